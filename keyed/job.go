package keyed

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/kordproject/kord/checkpoint"
	"github.com/kordproject/kord/internal/layout"
)

// Restart is a restart strategy: after a task fails, every task restarts
// from the last committed checkpoint, after Delay(attempt), at most
// Attempts times in a row. The count starts again only after an attempt
// that committed a checkpoint and ran at least StableAfter (default 1
// minute) before failing: a record that fails the job on every attempt
// (a poison record) must end it after Attempts restarts, although each
// attempt may commit checkpoints before reaching the record. (Flink's
// exponential-delay strategy resets its backoff after a stable period the
// same way.)
type Restart struct {
	Attempts int
	// Delay returns the wait before attempt n (1-based).
	Delay func(attempt int) time.Duration
	// StableAfter is how long an attempt must run, committing, for a
	// later failure to count as the first in a row again.
	StableAfter time.Duration
}

// FixedDelay restarts up to attempts times, d apart (Flink fixed-delay).
func FixedDelay(attempts int, d time.Duration) Restart {
	return Restart{Attempts: attempts, Delay: func(int) time.Duration { return d }}
}

// ExponentialBackoff restarts up to attempts times, waiting initial,
// 2*initial, ... capped at max (Flink exponential-delay).
func ExponentialBackoff(attempts int, initial, max time.Duration) Restart {
	return Restart{Attempts: attempts, Delay: func(n int) time.Duration {
		d := initial
		for i := 1; i < n && d < max; i++ {
			d *= 2
		}
		if d > max {
			d = max
		}
		return d
	}}
}

// Job is a dataflow declared before it runs: sources, one keyed operator
// stage and one sink. Declare it with FromSource, KeyBy or ByPartition,
// Process and ToSink; Validate reports every declaration error; Run runs
// it. A Job holds no global state; Run may be called again after it
// returns.
type Job struct {
	name string
	cfg  config

	sources []sourceNode
	op      opNode
	sink    sinkNode
	errs    []error

	statsMu     sync.Mutex
	alignments  []time.Duration
	deadLetters atomic.Int64
	lateRecords atomic.Int64
}

// NewJob starts declaring a job named name, configured by opts. The name
// is the job's identity across restarts, and the one thing a job is given
// once: its Kafka sink derives the transactional id (kord.<name>) and the
// commit group (kord.<name>.commit) from it, and the checkpoints go to
// DefaultDir(name) unless Dir says otherwise. Letters, digits and . _ -.
func NewJob(name string, opts ...Opt) *Job {
	cfg := config{name: name}
	for _, o := range opts {
		o(&cfg)
	}
	j := &Job{name: name, cfg: cfg.withDefaults()}
	if err := layout.ValidateOperator(name); err != nil {
		j.errs = append(j.errs, fmt.Errorf("keyed: job name: %w", err))
	}
	j.errs = append(j.errs, cfg.errs...)
	return j
}

// Validate reports the declaration's errors.
func (j *Job) Validate() error {
	errs := append([]error(nil), j.errs...)
	if len(j.sources) == 0 {
		errs = append(errs, errors.New("keyed: job has no source"))
	}
	if j.op == nil {
		errs = append(errs, errors.New("keyed: job has no keyed operator (Process)"))
	}
	if j.sink == nil {
		errs = append(errs, errors.New("keyed: job has no sink (ToSink)"))
	}
	if j.cfg.Dir == "" && j.cfg.Storage == nil {
		errs = append(errs, errors.New("keyed: no checkpoint directory: set keyed.Dir (or keyed.CheckpointStorage), or KORD_STATE_DIR or HOME for the default"))
	}
	if err := j.cfg.Checkpoint.Validate(); err != nil {
		errs = append(errs, err)
	}
	if j.cfg.TransactionMaxTimeout < time.Second {
		errs = append(errs, fmt.Errorf("keyed: transaction max timeout %v below 1s", j.cfg.TransactionMaxTimeout))
	}
	if j.cfg.MaxParallelism != 0 {
		if err := validateParallelism(1, j.cfg.MaxParallelism); err != nil {
			errs = append(errs, err)
		}
	}
	if j.op != nil {
		if err := j.op.validate(j.cfg); err != nil {
			errs = append(errs, err)
		}
	}
	// Sources, the operator and the sink name their state files: the
	// names must differ.
	names := map[string]bool{}
	var all []string
	for _, s := range j.sources {
		all = append(all, s.sourceName())
	}
	if j.op != nil {
		all = append(all, j.op.opName())
	}
	if j.sink != nil {
		all = append(all, j.sink.sinkName())
	}
	for _, n := range all {
		if names[n] {
			errs = append(errs, fmt.Errorf("keyed: two parts of the job are named %q: sources, the operator and the sink need distinct names", n))
		}
		names[n] = true
	}
	// What the parts can check of themselves before the job starts.
	for _, s := range j.sources {
		if v, ok := s.sourceValue().(interface{ Validate() error }); ok {
			if err := v.Validate(); err != nil {
				errs = append(errs, fmt.Errorf("keyed: source %q: %w", s.sourceName(), err))
			}
		}
	}
	if j.sink != nil && len(j.sources) > 0 {
		if v, ok := j.sink.sinkValue().(SinkValidator); ok {
			if err := v.ValidateSink(j.sinkInfo()); err != nil {
				errs = append(errs, fmt.Errorf("keyed: sink %q: %w", j.sink.sinkName(), err))
			}
		}
	}
	return errors.Join(errs...)
}

// SinkValidator is a sink that can check itself, and the job it is given,
// before the job runs: Validate calls it.
type SinkValidator interface {
	ValidateSink(info SinkInfo) error
}

// Position is a source partition and the next offset to read.
type Position struct {
	Partition int32
	Offset    int64
}

// SourceRecord is one record of a partitioned, replayable source.
type SourceRecord[T any] struct {
	Partition int32
	Offset    int64
	// Key is the record key: the key used in partition mode (ByPartition).
	Key   []byte
	Value T
	// Timestamp is the record's time (Kafka's record timestamp; zero if it
	// has none). Stream.Timestamps can take the time from the value
	// instead. Operators read it with Collector.Timestamp.
	Timestamp time.Time
	// Bad, when set, says the record could not be decoded (Value is then
	// zero): the job hands it to the sink's dead letters, under the
	// checkpoint that covers its offset, and counts it; with a sink that
	// takes none (DeadLetterSink) the job fails with Bad.Err.
	Bad *BadRecord
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
// records (a Kafka topic, or MemorySource).
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
// the job is given Failover. The job asks once per run, before it restores
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
	// it, a reader's at the point its offsets are recorded.
	SnapshotState(id uint64) ([][]byte, error)
	// RestoreState is called once, before any record, when the job
	// restores a checkpoint (not on a fresh start). It receives the
	// elements of every instance's snapshot, in instance order (union
	// redistribution, as Flink's union list state): at the same
	// parallelism and at another, each instance gets all of them and keeps
	// what concerns it.
	RestoreState(elements [][]byte) error
}

// NewPartitionStarter is implemented by sources whose partitions can
// grow (KafkaSource): StartNew returns the first offsets of partitions that
// appeared after the job started (the log start, whatever Start would
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
// MemorySource's are ones. With Stream.Idleness, a silent partition is
// idle only if it has no backlog: one with a backlog keeps holding the
// watermark, since its records, once read, are older than what the others
// have moved on to.
type BacklogReader interface {
	// Behind reports whether partition has records past the reader's
	// position that it has not delivered.
	Behind(ctx context.Context, partition int32) (bool, error)
}

// Operator is a keyed operator: Process is called for each record with the
// keyed state scoped to the record's key. One instance exists per parallel
// task; it is used by one goroutine.
type Operator[T, O any] interface {
	// Open registers the operator's state on b (keyed.Value, List, Map).
	Open(b *Backend) error
	// Process handles one record of key; out.Emit sends results on. key is
	// read-only: it may share memory with the record (see KeyByString) and
	// is only valid during the call.
	Process(key []byte, v T, out *Collector[O]) error
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
	// the transaction). An error marked OutcomeUnknown says the step may or
	// may not have happened.
	Commit(ctx context.Context, ref checkpoint.Ref, offsets []checkpoint.PartitionOffset) error
	// Recorded returns what the sink's system recorded as committed, nil
	// if nothing: recovery restores exactly that checkpoint and checks the
	// recorded offsets against it.
	Recorded(ctx context.Context) (*Recorded, error)
}

// Forgetter is a sink that can forget what its system recorded as
// committed for a job (a Kafka sink deletes its commit group): Job.Forget
// calls it.
type Forgetter interface {
	Forget(ctx context.Context, info SinkInfo) error
}

// SinkInfo describes the job to its sink, at each Reset.
type SinkInfo struct {
	// Job is the job's name (NewJob): a Kafka sink derives its
	// transactional id and commit group from it.
	Job string
	// Inputs are the topics of the job's sources, ascending.
	Inputs []string
	// Mode is the job's checkpointing mode: exactly-once output is
	// written in transactions, at-least-once output at once.
	Mode checkpoint.Mode
	// TransactionTimeout is derived from the checkpoint settings (the
	// interval, timeout and min pause, times the tolerable failures plus
	// one, plus 10 s, capped at TransactionMaxTimeout): a transaction
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
// this process (a Kafka consumer group: kafkaio.Instance), so that several
// processes run one job. With one, each run covers the partitions assigned
// now, restores each from the checkpoint its own record names
// (Recorded.Parts), commits only them, and ends with a final checkpoint
// when the assignment changes; the next run takes the new assignment.
// Only ByPartition jobs run this way: their key group is the partition, so
// state follows it.
type Membership interface {
	// Scaled reports whether this sink runs the job as one of several
	// processes.
	Scaled() bool
	// Assignment waits until this process is assigned partitions and
	// returns them by topic, with a channel closed when the assignment is
	// about to change. A run holds them until Released.
	Assignment(ctx context.Context) (map[string][]int32, <-chan struct{}, error)
	// Released tells the membership the run over the last assignment has
	// ended: what it held is committed or aborted, and revoked partitions
	// may move on.
	Released()
}

// Stream is a stream of records from a source.
type Stream[T any] struct {
	j    *Job
	node *sourceOf[T]
}

// KeyedStream is a stream partitioned by a key of type K.
type KeyedStream[K, T any] struct {
	j     *Job
	in    *keyedIn[T]
	keyOf func([]byte) K // the key as the user keyed by, from its bytes
}

// keyedIn is how a keyed stream's records reach the keyed operator.
type keyedIn[T any] struct {
	srcs        []*sourceOf[T]
	key         func(T) []byte // keyBy mode
	byPartition bool
}

// Output is a keyed operator's output stream.
type Output[O any] struct {
	j  *Job
	op outputNode[O]
}

// FromSource adds a source read by parallelism tasks. In keyBy mode its
// partitions go to tasks round-robin by position (partition i of the
// sorted list to task i % parallelism); in partition mode each task gets a
// contiguous range of partitions, the same ranges as the keyed operator's
// key groups, so that with equal parallelism each source task feeds exactly
// one operator task (no shuffle).
func FromSource[T any](j *Job, name string, parallelism int, s Source[T]) *Stream[T] {
	n := &sourceOf[T]{name: name, parallelism: parallelism, src: s}
	if err := layout.ValidateOperator(name); err != nil {
		j.errs = append(j.errs, fmt.Errorf("keyed: source name: %w", err))
	}
	if parallelism < 1 {
		j.errs = append(j.errs, fmt.Errorf("keyed: source %q: parallelism %d", name, parallelism))
	}
	j.sources = append(j.sources, n)
	return &Stream[T]{j: j, node: n}
}

// Timestamps makes extract give each record of s its time, from the
// value and the record's own timestamp (Flink's
// WatermarkStrategy.withTimestampAssigner; Kafka Streams'
// TimestampExtractor). By default a record's time is its Kafka timestamp.
// A record for which extract gives the zero time, or a time before 1970,
// fails the job (Permanent, no restart) with an error naming its topic,
// partition and offset, as Kafka Streams' default FailOnInvalidTimestamp
// does: it is never processed without a time nor skipped silently.
func (s *Stream[T]) Timestamps(extract func(v T, recordTime time.Time) time.Time) *Stream[T] {
	s.node.extract = extract
	return s
}

// Watermarks makes s's tasks send event-time watermarks with their
// records (Flink's WatermarkStrategy.forBoundedOutOfOrderness): per input
// partition, the newest record time seen less lateness, the out-of-order
// delay allowed; a task's watermark is the oldest of its partitions', and
// an operator task's the oldest of its inputs' (Collector.Watermark). A
// watermark travels after the records before it and never overtakes
// them. A partition that has had no record holds the watermark back; a
// bounded input's end releases it. Without Watermarks a source sends none.
func (s *Stream[T]) Watermarks(lateness time.Duration) *Stream[T] {
	s.node.watermarks, s.node.lateness = true, lateness
	return s
}

// Idleness makes a partition of s that has had no record for d stop
// holding the watermark back (Flink's WatermarkStrategy.withIdleness), so
// that an empty or quiet partition does not stall event time; when all of
// a task's partitions are idle, the task's inputs downstream wait for the
// others only. A partition whose reader says records wait past its
// position (BacklogReader: not fetched yet, or behind an open transaction)
// is not idle, however long it is silent.
// Records of a partition that was idle may be late when they come. Needs
// Watermarks; default: no idleness.
func (s *Stream[T]) Idleness(d time.Duration) *Stream[T] {
	s.node.idleness = d
	return s
}

// KeyBy keys streams by key(record): key group = xxhash64(key) %
// maxParallelism, records shuffled to the task owning the key group.
// Several streams are unioned; their barriers are aligned.
func KeyBy[T any](key func(T) []byte, streams ...*Stream[T]) *KeyedStream[[]byte, T] {
	return keyBy(key, func(b []byte) []byte { return b }, streams)
}

func keyBy[K, T any](key func(T) []byte, keyOf func([]byte) K, streams []*Stream[T]) *KeyedStream[K, T] {
	if len(streams) == 0 {
		panic("keyed: KeyBy of no stream")
	}
	k := &KeyedStream[K, T]{j: streams[0].j, in: &keyedIn[T]{key: key}, keyOf: keyOf}
	for _, s := range streams {
		k.in.srcs = append(k.in.srcs, s.node)
	}
	return k
}

// KeyByString is KeyBy for a key held as a string (a uuid field, say): the
// key's bytes are used in place, without the copy and allocation per record
// that returning []byte(s) from a KeyBy function costs, and ProcessFunc and
// ProcessValue give the key as a string.
func KeyByString[T any](key func(T) string, streams ...*Stream[T]) *KeyedStream[string, T] {
	return keyBy(func(v T) []byte {
		s := key(v)
		return unsafe.Slice(unsafe.StringData(s), len(s)) // read-only: see Operator.Process
	}, func(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }, streams)
}

// ByPartition keys a stream by its records' key, for input already
// partitioned by that key (events produced with kord's Java-exact
// partitioner): the key group is the source partition and nothing is
// shuffled (Flink reinterpretAsKeyedStream).
func ByPartition[T any](s *Stream[T]) *KeyedStream[[]byte, T] {
	return &KeyedStream[[]byte, T]{j: s.j, in: &keyedIn[T]{srcs: []*sourceOf[T]{s.node}, byPartition: true}, keyOf: func(b []byte) []byte { return b }}
}

// Process adds the keyed operator stage: parallelism tasks, each with an
// Operator from newOp and keyed state for its key-group range (Flink's
// KeyedProcessFunction; Kafka Streams' Processor with state stores). For
// a function with no state or one value per key, ProcessFunc and
// ProcessValue are shorter.
func Process[K, T, O any](k *KeyedStream[K, T], name string, parallelism int, newOp func() Operator[T, O]) *Output[O] {
	j := k.j
	if j.op != nil {
		j.errs = append(j.errs, fmt.Errorf("keyed: operator %q: only one keyed operator stage per job is supported", name))
	}
	if err := layout.ValidateOperator(name); err != nil {
		j.errs = append(j.errs, fmt.Errorf("keyed: operator name: %w", err))
	}
	if parallelism < 1 {
		j.errs = append(j.errs, fmt.Errorf("keyed: operator %q: parallelism %d", name, parallelism))
	}
	if k.in.byPartition && len(k.in.srcs) != 1 {
		j.errs = append(j.errs, fmt.Errorf("keyed: operator %q: partition mode takes one source", name))
	}
	op := &opOf[T, O]{name: name, parallelism: parallelism, newOp: newOp, in: k.in}
	j.op = op
	return &Output[O]{j: j, op: op}
}

// ProcessFunc adds a keyed operator stage that keeps no state: fn is
// called for each record with its key, as the type the stream was keyed by
// (a KeyByString key is a string). The key is only valid during the call:
// copy it (strings.Clone, bytes.Clone) to keep it.
func ProcessFunc[K, T, O any](k *KeyedStream[K, T], name string, parallelism int, fn func(key K, v T, out *Collector[O]) error) *Output[O] {
	keyOf := k.keyOf
	return Process(k, name, parallelism, func() Operator[T, O] {
		return &funcOp[K, T, O]{keyOf: keyOf, fn: fn}
	})
}

type funcOp[K, T, O any] struct {
	keyOf func([]byte) K
	fn    func(K, T, *Collector[O]) error
}

func (f *funcOp[K, T, O]) Open(*Backend) error { return nil }
func (f *funcOp[K, T, O]) Process(key []byte, v T, out *Collector[O]) error {
	return f.fn(f.keyOf(key), v, out)
}

// ProcessValue adds a keyed operator stage with one value of type S per
// key, kept in keyed state named "value" and snapshotted with codec: fn is called for each record with its key (as ProcessFunc gives
// it) and the key's state (Flink's ValueState in a KeyedProcessFunction).
func ProcessValue[K, T, S, O any](k *KeyedStream[K, T], name string, parallelism int, codec Codec[S],
	fn func(key K, v T, state *ValueState[S], out *Collector[O]) error) *Output[O] {
	keyOf := k.keyOf
	return Process(k, name, parallelism, func() Operator[T, O] {
		return &valueOp[K, T, S, O]{codec: codec, keyOf: keyOf, fn: fn}
	})
}

type valueOp[K, T, S, O any] struct {
	codec Codec[S]
	keyOf func([]byte) K
	fn    func(K, T, *ValueState[S], *Collector[O]) error
	state *ValueState[S]
}

func (v *valueOp[K, T, S, O]) Open(b *Backend) (err error) {
	v.state, err = Value(b, "value", v.codec)
	return err
}

func (v *valueOp[K, T, S, O]) Process(key []byte, x T, out *Collector[O]) error {
	return v.fn(v.keyOf(key), x, v.state, out)
}

// ToSink sends the operator's output to s, through one sink task that
// aligns barriers across all operator tasks.
func ToSink[O any](o *Output[O], name string, s Sink[O]) {
	j := o.j
	if j.sink != nil {
		j.errs = append(j.errs, fmt.Errorf("keyed: sink %q: only one sink per job is supported", name))
	}
	j.sink = &sinkOf[O]{name: name, sink: s, op: o.op}
}
