package connector

import (
	"context"
	"log/slog"
	"math"
	"time"

	"github.com/kordproject/kord/checkpoint"
)

// Position is a source partition and the next offset to read.
type Position struct {
	Partition int32
	Offset    int64
}

// SourceRecord is one record of a partitioned, replayable source.
type SourceRecord[T any] struct {
	Partition int32
	Offset    int64
	// Key is the record key: the key used in partition mode (keyed.ByPartition).
	Key   []byte
	Value T
	// Timestamp is the record's time (Kafka's record timestamp; zero if it
	// has none). keyed's Stream.Timestamps can take the time from the value
	// instead. Operators read it with keyed.Collector.Timestamp.
	Timestamp time.Time
	// Bad, when set, says the record could not be decoded (Value is then
	// zero): the job hands it to the sink's dead letters, under the
	// checkpoint that covers its offset, and counts it; with a sink that
	// takes none (DeadLetterSink) the job fails with Bad.Err.
	Bad *BadRecord
	// Mark, when set, says the record is no data but a watermark mark of
	// a hop (Hops; Value is then zero). Sources of users' topics never
	// set it.
	Mark *HopMark
}

// BadRecord is an input record that could not be decoded, as read.
type BadRecord struct {
	Topic     string
	Partition int32
	Offset    int64
	Key       []byte
	Value     []byte
	Timestamp time.Time
	Err       error
}

// DeadLetterSink is a sink that also takes dead letters. Like Write, a dead
// letter of epoch e must stay invisible (exactly-once) until Commit(c) for
// some c ≥ e, so that it is written once if its record's offset is
// committed and never if it is not.
type DeadLetterSink interface {
	// TakesDeadLetters reports whether the sink is set up to take them (a
	// Kafka sink with a dead-letter topic, say).
	TakesDeadLetters() bool
	DeadLetter(ctx context.Context, epoch uint64, b BadRecord) error
}

// Source is a partitioned, replayable source: its records are addressed by
// partition and offset, and reading from an offset again yields the same
// records (a Kafka topic, or keyed.MemorySource).
type Source[T any] interface {
	// Topic names the source in checkpoints (a Kafka topic name).
	Topic() string
	// Partitions lists the partitions, ascending.
	Partitions(ctx context.Context) ([]int32, error)
	// Start resolves, for a fresh start, each partition's first offset.
	Start(ctx context.Context, partitions []int32) ([]Position, error)
	// Reader opens a reader for one source task.
	Reader(ctx context.Context) (Reader[T], error)
}

// Identified is a Source that knows where its records live beyond the
// topic's name: the cluster that serves them and the topic's identity
// there (kafkaio's sources give Kafka's cluster id and topic id, KIP-516).
// Every checkpoint records it (checkpoint.Metadata.Sources), and a restore
// refuses a checkpoint whose offsets were read on another cluster or from
// an earlier incarnation of the topic (checkpoint.ErrProvenance), unless
// the job is given keyed.Failover. The job asks once per run, before it restores
// anything.
type Identified interface {
	Provenance(ctx context.Context) (checkpoint.SourceRef, error)
}

// OperatorState is implemented by a Sink, or by a source's Reader, that
// keeps state of its own besides the offsets the engine keeps for it
// (Flink's operator list state). The state is a list of byte strings,
// written with each checkpoint as an Avro file per instance.
type OperatorState interface {
	// SnapshotState returns the state as of the barrier of checkpoint id:
	// the sink's when every output before the barrier has been written to
	// it, a reader's at the point its offsets are recorded. An error fails
	// the run. Checkpoint id may still be declined after it (the storage
	// failed to keep this file or another's, a task declined): the next
	// snapshot then holds whatever this one held, as the job restores
	// only a checkpoint that completed.
	SnapshotState(id uint64) ([][]byte, error)
	// RestoreState is called once, before any record, when the job
	// restores a checkpoint (not on a fresh start). It receives the
	// elements of every instance's snapshot, in instance order (union
	// redistribution, as Flink's union list state): at the same
	// parallelism and at another, each instance gets all of them and keeps
	// what concerns it.
	RestoreState(elements [][]byte) error
}

// FinalState is an OperatorState told which snapshot is its run's last,
// the final checkpoint of a bounded input's end or a graceful stop:
// SnapshotFinal is called there in place of SnapshotState. A sink that
// defers work across checkpoints (filesink's compaction) does it there, so
// that nothing waits for a run that may never come. A final checkpoint
// that aborts is followed by another, also final.
type FinalState interface {
	OperatorState
	SnapshotFinal(id uint64) ([][]byte, error)
}

// NewPartitionStarter is implemented by sources whose partitions can grow
// (kafkaio.NewSource's): StartNew returns the first offsets of partitions
// that appeared after the job started (the log start, whatever Start would
// choose for a fresh start). Sources without it use Start.
type NewPartitionStarter interface {
	StartNew(ctx context.Context, partitions []int32) ([]Position, error)
}

// Reader reads the partitions assigned to one source task.
type Reader[T any] interface {
	// Assign sets the partitions to read, each from its offset, replacing
	// any earlier assignment (a discovered partition is added by assigning
	// every partition again at its current offset).
	Assign(ctx context.Context, positions []Position) error
	// Poll returns up to max records, waiting at most wait for the first.
	// done reports that every assigned partition has ended (a bounded
	// source; Kafka never ends). The engine is done with recs when it
	// calls Poll again: a reader may reuse the slice.
	Poll(ctx context.Context, max int, wait time.Duration) (recs []SourceRecord[T], done bool, err error)
	Close() error
}

// BacklogReader is a Reader that tells a partition with nothing more to
// read from one that is silent while records wait past what the reader
// has delivered: records it has not fetched yet (a reader that fell behind,
// busy with other partitions), or records it cannot read yet (a
// read_committed consumer held behind an open transaction: its last stable
// offset stands below the high watermark). kafkaio's reader and
// keyed.MemorySource's are ones. With keyed.Stream.Idleness, a silent partition is
// idle only if it has no backlog: one with a backlog keeps holding the
// watermark, since its records, once read, are older than what the others
// have moved on to.
type BacklogReader interface {
	// Behind reports whether partition has records past the reader's
	// position that it has not delivered.
	Behind(ctx context.Context, partition int32) (bool, error)
}

// PositionReader is a Reader that knows how far its reading has come in a
// partition beyond the records it delivered: past a log's entries that
// carry no record (Kafka's transaction markers), say. A source task asks it
// at each checkpoint's barrier, when every record delivered has gone
// downstream, and records the further position, so that a restore resumes
// past those entries and a job that has caught up commits its input's end
// (its commit lag is 0).
type PositionReader interface {
	// Position returns the next offset of partition from which a reader
	// would deliver the same records as this one, or -1 when it knows no
	// further than the records it delivered.
	Position(partition int32) int64
}

// Sink receives the keyed operator's output. The engine calls Write from
// one sink task; Commit from the checkpoint coordinator, in checkpoint
// order, once the checkpoint is durable. Every call is bounded by its ctx.
type Sink[T any] interface {
	// Reset starts a new incarnation of the sink, before each run (the
	// first and every restart or recovery): output not committed is
	// dropped, and anything an older incarnation left in flight is fenced
	// off. info describes the job.
	Reset(ctx context.Context, info SinkInfo) error
	// Write adds v to the output of checkpoint epoch: it must stay invisible
	// (exactly-once) until Commit(c) for some c ≥ epoch. It may block
	// (backpressure) until ctx is done.
	Write(ctx context.Context, epoch uint64, v T) error
	// Commit makes visible the output of every epoch ≤ ref.ID and records,
	// in the same atomic step, that checkpoint ref committed with these
	// source offsets (a Kafka sink commits them to its commit group inside
	// the transaction). An error marked keyed.OutcomeUnknown says the step may or
	// may not have happened.
	Commit(ctx context.Context, ref checkpoint.Ref, offsets []checkpoint.PartitionOffset) error
	// Recorded returns what the sink's system recorded as committed, nil
	// if nothing: recovery restores exactly that checkpoint and checks the
	// recorded offsets against it.
	Recorded(ctx context.Context) (*Recorded, error)
}

// Forgetter is a sink that can forget what its system recorded as
// committed for a job (a Kafka sink deletes its commit group): keyed.Job.Forget
// calls it.
type Forgetter interface {
	Forget(ctx context.Context, info SinkInfo) error
}

// Resumer is a sink that writes every epoch's output into one open
// transaction (a Kafka sink): the transaction takes the epoch after the
// last commit, and later epochs wait for it to commit. Such a sink cannot
// tell that epoch from the Writes: after a restore it is the restored
// checkpoint's id plus one, and a run of one of several processes numbers
// its checkpoints from 1 again. The engine calls Resume after Reset and
// before the run's first Write. A sink that keeps each epoch's output apart
// until Commit (keyed.MemorySink) needs no Resume.
type Resumer interface {
	// Resume says the run resumes after checkpoint after (0 for a run
	// that restored none): its epochs are after+1, after+2, ...
	Resume(after uint64)
}

// Participant is a further sink of a job that writes inside another sink's
// commit: its output of an epoch becomes visible when, and only when, a
// Commit of that sink covering the epoch does (kafkaio.Output writes in the
// Kafka sink's transactions; keyed.MemoryOutput in a MemorySink's commits).
// A job commits through its first sink; every further sink must be a
// Participant whose CommitsWith returns that sink, or a Follower. The engine Resets a
// participant after the first sink, and never calls its Commit or
// Recorded.
type Participant interface {
	CommitsWith() any
}

// Follower is a further sink of a job that commits after the first, by
// finishing what each checkpoint staged (Flink's two-phase-commit sinks:
// pre-commit at the barrier, commit on notifyCheckpointComplete). It must
// keep its state in the checkpoint (OperatorState): at the barrier of
// checkpoint n, SnapshotState makes the output of epochs ≤ n durable but
// invisible, and names it; once the first sink's Commit of n succeeded,
// the engine calls Finish(n), which makes it visible. A crash between the
// two is mended on restore: the checkpoint restored is committed, so
// RestoreState finishes what it names. Finish and that restore must be
// idempotent, and output of an aborted checkpoint stays staged for the
// next (kord's filesink is one).
type Follower interface {
	OperatorState
	Finish(ctx context.Context, ref checkpoint.Ref) error
}

// Timed is a sink that is told each record's event time and the watermark
// at its input (filesink's partitions by event time, committed when the
// watermark passes them). The engine's sink task calls WriteAt instead of
// Write, and Advance whenever its watermark advances: first with the
// restored checkpoint's watermark, before any record, then between
// records, never backwards. The watermark is the oldest of the sink task's
// inputs that are not idle (keyed's Stream.Watermarks and Idleness); a
// record written after Advance(wm) whose time is before wm is late by the
// job's own rule. Times are Unix milliseconds; NoTime is a record without
// one, or no watermark yet.
type Timed[T any] interface {
	WriteAt(ctx context.Context, epoch uint64, v T, ts int64) error
	Advance(wm int64)
}

// BatchWriter is a sink that takes a batch of records in one call: the
// engine's sink task calls WriteBatch, with the records of one message
// from upstream in their order, instead of Write for each (kafkaio's sink
// queues them in one call into librdkafka). WriteBatch must do what
// Write would do for each record in turn, and may keep none of vs, which
// the engine reuses. A sink that is also Timed is written through
// WriteAt.
type BatchWriter[T any] interface {
	WriteBatch(ctx context.Context, epoch uint64, vs []T) error
}

// NoTime is a record's time when it has none, and the watermark before
// there is one (Timed).
const NoTime int64 = math.MinInt64

// ScaledState is operator state that a job of several processes may keep.
// Each run restores the elements of every checkpoint its partitions'
// records name, whichever process wrote it (union redistribution across
// processes): the state must tolerate two processes restoring the same
// elements (a checkpoint whose partitions were split between them), and
// one restoring elements of another's. filesink's Sink is one: publishing
// a committed file twice is the same as once.
type ScaledState interface {
	OperatorState
	ScaledState()
}

// Owner is a sink told, at the start of each run of a job of several
// processes, the input partitions this run owns and every partition of
// the job's inputs, by topic: a sink that decides by all processes'
// progress (filesink's partition commit, on the oldest watermark of all)
// keeps a record for each partition it owns.
type Owner interface {
	Own(owned, all map[string][]int32)
}

// Clustered is a sink that names the cluster it writes to (a Kafka sink:
// its bootstrap servers), so that sinks on two clusters are refused by
// name.
type Clustered interface {
	Cluster() string
}

// SinkInfo describes the job to its sink, at each Reset.
type SinkInfo struct {
	// Job is the job's name (keyed.NewJob): a Kafka sink derives its
	// transactional id and commit group from it.
	Job string
	// Instance is this process's instance id when the job runs on several
	// processes (keyed.Instance), "" otherwise. A sink that assigns
	// partitions (Membership) then joins its system under it.
	Instance string
	// Inputs are the topics of the job's sources, ascending.
	Inputs []string
	// Mode is the job's checkpointing mode: exactly-once output is
	// written in transactions, at-least-once output at once.
	Mode checkpoint.Mode
	// TransactionTimeout is derived from the checkpoint settings (the
	// interval, timeout and min pause, times the tolerable failures plus
	// one, plus 10 s, capped at keyed.TransactionMaxTimeout): a transaction
	// spans at most this long.
	TransactionTimeout time.Duration
	// CommitTimeout bounds every Commit (its ctx has this deadline, the
	// checkpoint timeout, or less during a graceful stop). A Kafka sink
	// keeps librdkafka's request timeout above it, so that librdkafka never
	// sends a commit again by itself while the sink still uses its producer.
	CommitTimeout time.Duration
	// Logger is the job's logger.
	Logger *slog.Logger
}

// Recorded is what a sink's system holds as committed: a checkpoint, and
// the source offsets committed with it.
type Recorded struct {
	Ref checkpoint.Ref
	// Offsets are the committed source offsets, one per partition that has
	// one; a restore checks them against the checkpoint's
	// (internal/recovery's CheckOffsets).
	Offsets []checkpoint.PartitionOffset
	// Where names the record for errors ("commit group kord.x.commit").
	Where string
	// Parts is set instead of Ref and Offsets by a Membership sink: each
	// recorded partition with its own checkpoint.
	Parts []PartitionRecord
}

// PartitionRecord is what a sink's system holds as committed for one
// input partition when each partition has its own record (a job on several
// processes, Membership): its offset and the checkpoint that holds its
// state.
type PartitionRecord struct {
	Topic     string
	Partition int32
	Offset    int64
	Ref       checkpoint.Ref
}

// Membership is a sink whose system assigns the job's input partitions to
// this process (a Kafka consumer group), so that several
// processes run one job. With one, each run covers the partitions assigned
// now, restores each from the checkpoint its own record names
// (Recorded.Parts), commits only them, and ends with a final checkpoint
// when the assignment changes; the next run takes the new assignment.
// Only keyed.ByPartition jobs run this way: their key group is the partition, so
// state follows it.
//
// The engine uses it when the job is one of several processes
// (keyed.Instance, SinkInfo.Instance); a job on one process never calls it.
type Membership interface {
	// Assignment waits until this process is assigned partitions and
	// returns them by topic, with a channel closed when the assignment is
	// about to change. A run holds them until Released.
	Assignment(ctx context.Context) (map[string][]int32, <-chan struct{}, error)
	// Released tells the membership the run over the last assignment has
	// ended: what it held is committed or aborted, and revoked partitions
	// may move on.
	Released()
}

// SinkValidator is a sink that can check itself, and the job it is given,
// before the job runs: keyed.Job.Validate calls it.
type SinkValidator interface {
	ValidateSink(info SinkInfo) error
}

// Hops is a first sink that carries a job's re-keyed streams between its
// processes (keyed.Instance). Each edge of the plan where records change
// key (a hop) is a topic of the job's: the upstream stage writes it in
// this sink's transactions, and the downstream stage reads it, by
// partition and read_committed, as a source of the same job, so the
// records of checkpoint n are read once n has committed, and the reading
// side's offsets go into a later checkpoint with the rest (DESIGN.md,
// "Keying by a field: the hop"). kafkaio's sink is one.
type Hops interface {
	// Hop returns the sink that writes the hop into stage of job (in this
	// sink's transactions: a Participant) and the source that reads it.
	Hop(job, stage string) (Sink[HopRecord], Source[HopRecord])
	// CreateHop creates the hop's topic with partitions partitions if it
	// does not exist, and checks an existing one's count: its partitions
	// are the downstream stage's key groups, fixed for the job's life.
	CreateHop(ctx context.Context, topic string, partitions int) error
}

// HopRecord is one record crossing a hop, encoded: a stream's record
// (Key, Value and its time), or a watermark mark to one partition.
type HopRecord struct {
	Key, Value []byte
	// Time is the record's time in Unix milliseconds, NoTime for none.
	Time int64
	// Mark, when set, makes it a mark (Key and Value nil), written to
	// Partition; a record goes to its key's partition.
	Mark      *HopMark
	Partition int32
}

// HopMark is a watermark crossing a hop: writer, one of writers that
// write the hop (an upstream input partition each), says that its records
// from now on are not older than Watermark (Unix milliseconds). The
// reader of a hop partition takes the least of every writer's latest.
type HopMark struct {
	Writer    string
	Writers   int
	Watermark int64
}
