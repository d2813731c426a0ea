package keyed

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"
	"unsafe"

	"github.com/kordproject/kord/internal/layout"
	"github.com/kordproject/kord/keyed/connector"
	"github.com/kordproject/kord/keyed/internal/keygroup"
	"github.com/kordproject/kord/serde"
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

// Job is a dataflow declared before it runs: sources, keyed stages and a
// sink, joined by streams. Declare it with FromSource, MapValues, Filter,
// FlatMapValues, KeyBy or ByPartition, Process (or ProcessFunc, ProcessValue,
// WindowAggregate, WindowApply) and ToSink; a keyed stage's output is a
// stream like a source's, so stages follow one another, and a stream may
// feed several stages (fan-out) and a stage take several streams (union).
// Validate reports every declaration error; Run runs it. A Job holds no
// global state; Run may be called again after it returns.
type Job struct {
	name string
	cfg  config

	sources []sourceNode
	ops     []opNode
	sink    sinkNode   // the first sink: the job commits through it
	outputs []sinkNode // further sinks, each writing inside sink's commit
	hops    []hopNode  // on several processes, the edges keyed by a field
	errs    []error
	// eventTime names the stages that need watermarks (windows).
	eventTime map[string]bool

	statsMu     sync.Mutex
	bindMu      sync.Mutex // hops' connectors (bindHops) against Collect
	alignments  []time.Duration
	deadLetters atomic.Int64
	lateRecords atomic.Int64
	stats       jobStats // what Collect reports
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
	errs := append(append([]error(nil), j.errs...), j.bindHops()...)
	if len(j.sources) == 0 {
		errs = append(errs, errors.New("keyed: job has no source"))
	}
	if len(j.ops) == 0 {
		errs = append(errs, errors.New("keyed: job has no keyed stage (Process)"))
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
		if err := keygroup.ValidateParallelism(1, j.cfg.MaxParallelism); err != nil {
			errs = append(errs, err)
		}
	}
	errs = append(errs, j.validateGraph()...)
	// Sources, the keyed stages and the sink name their state files: the
	// names must differ.
	names := map[string]bool{}
	var all []string
	for _, s := range j.sources {
		all = append(all, s.sourceName())
	}
	for _, o := range j.ops {
		all = append(all, o.stageName())
	}
	for _, s := range j.sinks() {
		all = append(all, s.sinkName())
	}
	for _, n := range all {
		if names[n] {
			errs = append(errs, fmt.Errorf("keyed: two parts of the job are named %q: sources, keyed stages and sinks need distinct names", n))
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
	if j.cfg.Instance != "" && j.sink != nil {
		if _, ok := j.sink.sinkValue().(connector.Membership); !ok {
			errs = append(errs, fmt.Errorf("keyed: sink %q: Instance makes the job one of several processes, and its sink (%T) cannot assign their partitions (connector.Membership)", j.sink.sinkName(), j.sink.sinkValue()))
		}
	}
	for _, s := range j.sinks() {
		if v, ok := s.sinkValue().(connector.SinkValidator); ok && len(j.sources) > 0 {
			if err := v.ValidateSink(j.sinkInfo()); err != nil {
				errs = append(errs, fmt.Errorf("keyed: sink %q: %w", s.sinkName(), err))
			}
		}
	}
	errs = append(errs, j.checkParticipants()...)
	return j.named(errors.Join(errs...))
}

// sinks lists the job's sinks, the one it commits through first.
func (j *Job) sinks() []sinkNode {
	if j.sink == nil {
		return nil
	}
	return append([]sinkNode{j.sink}, j.outputs...)
}

// checkParticipants refuses a further sink that does not write inside
// the first sink's commit: a checkpoint commits in one atomic step, and a
// second commit beside it could happen without the first (a crash between
// them), losing or duplicating that sink's output.
func (j *Job) checkParticipants() []error {
	var errs []error
	for _, s := range j.outputs {
		if p, ok := s.sinkValue().(connector.Participant); ok && p.CommitsWith() == j.sink.sinkValue() {
			continue
		}
		if _, ok := s.sinkValue().(connector.Follower); ok {
			continue
		}
		c1, ok1 := j.sink.sinkValue().(connector.Clustered)
		c2, ok2 := s.sinkValue().(connector.Clustered)
		if ok1 && ok2 && c1.Cluster() != c2.Cluster() {
			errs = append(errs, fmt.Errorf("keyed: sinks %q and %q write to different clusters (%s and %s): a job commits its output in one transaction, which cannot span two clusters",
				j.sink.sinkName(), s.sinkName(), c1.Cluster(), c2.Cluster()))
			continue
		}
		errs = append(errs, fmt.Errorf("keyed: sinks %q and %q would commit apart: a job commits through its first sink, and a further sink must write inside that commit (connector.Participant: kafkaio.Output of the first Kafka sink, keyed.MemoryOutput of a MemorySink) or finish after it (connector.Follower: filesink)",
			j.sink.sinkName(), s.sinkName()))
	}
	return errs
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

// Stream is a stream of records: a source's (FromSource), a keyed
// stage's output (Process), or either through MapValues, Filter and FlatMapValues.
type Stream[T any] struct {
	j   *Job
	out outlet[T]
	// src is the source when the stream is its records as read (what
	// Timestamps, Watermarks and Idleness apply to); nil otherwise.
	src *sourceOf[T]
}

// name names the stages s's records come from, for errors.
func (s *Stream[T]) name() string {
	var names []string
	for _, o := range s.out.origins() {
		names = append(names, o.stageName())
	}
	return strings.Join(names, "+")
}

// KeyedStream is a stream partitioned by a key of type K.
type KeyedStream[K, T any] struct {
	j       *Job
	streams []outlet[T]
	key     func(v T, recordKey []byte) []byte // KeyBy (recordKey: the source record's); nil with ByPartition
	keyName string                             // KeyBy's name for the key; "" with ByPartition
	// byPartition: the key group is the source partition (ByPartition).
	byPartition bool
	keyOf       func([]byte) K // the key as the user keyed by, from its bytes
	// broadcast, when not nil, says which records go to every task
	// (ProcessBroadcast's broadcast input).
	broadcast func(T) bool
	// values encode the records when they cross processes (Serde).
	values serde.Serde[T]
}

// FromSource adds a source read by parallelism tasks. Parallelism 0 is
// the default: as many tasks as the source has partitions, at most
// runtime.NumCPU(), at least one; it is resolved each time the job runs,
// when the partitions are known. A negative parallelism is an error.
//
// In keyBy mode its partitions go to tasks round-robin by position
// (partition i of the sorted list to task i % parallelism); in partition
// mode each task gets a contiguous range of partitions, the same ranges as
// the keyed operator's key groups, so that with equal parallelism each
// source task feeds exactly one operator task (no shuffle).
func FromSource[T any](j *Job, name string, parallelism int, s connector.Source[T]) *Stream[T] {
	n := &sourceOf[T]{name: name, parallelism: parallelism, src: s}
	if err := layout.ValidateOperator(name); err != nil {
		j.errs = append(j.errs, fmt.Errorf("keyed: source name: %w", err))
	}
	if parallelism < 0 {
		j.errs = append(j.errs, fmt.Errorf("keyed: source %q: parallelism %d (0 is the default: the partition count, at most the CPUs)", name, parallelism))
	}
	j.sources = append(j.sources, n)
	return &Stream[T]{j: j, out: n, src: n}
}

// source is the source s's records are as read, or nil after a note on
// the job that method needs one.
func (s *Stream[T]) source(method string) *sourceOf[T] {
	if s.src == nil {
		s.j.errs = append(s.j.errs, fmt.Errorf("keyed: %s of stream from %q: it applies to a source's stream (FromSource), before MapValues, Filter or FlatMapValues", method, s.name()))
	}
	return s.src
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
	if src := s.source("Timestamps"); src != nil {
		src.extract = extract
	}
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
	if src := s.source("Watermarks"); src != nil {
		src.watermarks, src.lateness = true, lateness
	}
	return s
}

// Auxiliary makes s an auxiliary input: rules or settings that may never
// end, which the job does not wait for. Once every other source has ended
// (bounded inputs), the job takes its final checkpoint and stops, as on a
// stop, with this one's position in it. It takes no part in event time:
// it holds no watermark back, as if always idle (so it takes neither
// Watermarks nor Idleness). And it is read first, as Kafka Streams
// bootstraps a global table: the other sources read nothing until every
// task of every auxiliary source has read its partitions to the end they
// had (connector.BacklogReader) when it began and sent on what it read,
// so that the first records of the others, at a stage this input feeds
// directly, already meet the rules it held at the start. A job of
// auxiliary sources alone runs until stopped.
func (s *Stream[T]) Auxiliary() *Stream[T] {
	if src := s.source("Auxiliary"); src != nil {
		src.auxiliary = true
	}
	return s
}

// Idleness makes a partition of s that has had no record for d stop
// holding the watermark back (Flink's WatermarkStrategy.withIdleness), so
// that an empty or quiet partition does not stall event time; when all of
// a task's partitions are idle, the task's inputs downstream wait for the
// others only. A partition whose reader says records wait past its
// position (connector.BacklogReader: not fetched yet, or behind an open transaction)
// is not idle, however long it is silent.
// Records of a partition that was idle may be late when they come. Needs
// Watermarks; default: no idleness.
func (s *Stream[T]) Idleness(d time.Duration) *Stream[T] {
	if src := s.source("Idleness"); src != nil {
		src.idleness = d
	}
	return s
}

// KeyBy keys streams by key(record): key group = xxhash64(key) %
// maxParallelism, records shuffled to the task owning the key group. The
// streams may be sources' or keyed stages' outputs; several are unioned,
// and their barriers aligned.
//
// name names the key ("uuid", "page"). A function cannot be compared, so
// the name stands for it: the stage keyed by it records the name in each
// checkpoint, and a restore under another name is refused, naming the
// stage and both names, since the stored state would sit under keys of
// another meaning. Rename a key only with the stage (a new stage starts
// empty). Each restored key is also checked to hash to the key group it
// is stored under.
func KeyBy[T any](name string, key func(T) []byte, streams ...*Stream[T]) *KeyedStream[[]byte, T] {
	return keyBy(name, func(v T, _ []byte) []byte { return key(v) }, func(b []byte) []byte { return b }, streams)
}

// KeyByRecordKey keys streams by their records' Kafka keys, shuffled by
// kord's hash of the key bytes as KeyBy's are: for records whose value
// does not hold the key, such as a compacted topic's deletions (a null
// value) that TableJoin reads. The streams are sources' records, as read
// or through MapValues, Filter and FlatMapValues, which keep the key; a
// stage's output has no record key and is refused. Unlike ByPartition, it
// needs no co-partitioning: the records are shuffled.
func KeyByRecordKey[T any](name string, streams ...*Stream[T]) *KeyedStream[[]byte, T] {
	for _, s := range streams {
		for _, o := range s.out.origins() {
			if _, ok := o.(sourceNode); !ok {
				s.j.errs = append(s.j.errs, fmt.Errorf("keyed: KeyByRecordKey of the output of %q: only a source's records have a record key; key a stage's output with KeyBy", o.stageName()))
			}
		}
	}
	return keyBy(name, func(_ T, rk []byte) []byte { return rk }, func(b []byte) []byte { return b }, streams)
}

func keyBy[K, T any](name string, key func(T, []byte) []byte, keyOf func([]byte) K, streams []*Stream[T]) *KeyedStream[K, T] {
	if len(streams) == 0 {
		panic("keyed: KeyBy of no stream")
	}
	k := &KeyedStream[K, T]{j: streams[0].j, key: key, keyName: name, keyOf: keyOf}
	if err := validKeyName(name); err != nil {
		k.j.errs = append(k.j.errs, fmt.Errorf("keyed: KeyBy of %q: %w", streams[0].name(), err))
	}
	for _, s := range streams {
		if s.j != k.j {
			k.j.errs = append(k.j.errs, fmt.Errorf("keyed: KeyBy of streams of jobs %q and %q: a stream belongs to one job", k.j.name, s.j.name))
		}
		k.streams = append(k.streams, s.out)
	}
	return k
}

// validKeyName reports whether name can name a key: it is recorded in a
// checkpoint's stage record as "key=<name>;maxParallelism=<n>".
func validKeyName(name string) error {
	if name == "" {
		return errors.New("no key name: name the key (\"uuid\", say); a restore checks it did not change")
	}
	if len(name) > 100 || strings.ContainsAny(name, ";=") || strings.IndexFunc(name, unicode.IsControl) >= 0 {
		return fmt.Errorf("key name %q: at most 100 characters, without ';', '=' or control characters", name)
	}
	return nil
}

// KeyByString is KeyBy for a key held as a string (a uuid field, say): the
// key's bytes are used in place, without the copy and allocation per record
// that returning []byte(s) from a KeyBy function costs, and ProcessFunc and
// ProcessValue give the key as a string.
func KeyByString[T any](name string, key func(T) string, streams ...*Stream[T]) *KeyedStream[string, T] {
	return keyBy(name, func(v T, _ []byte) []byte {
		s := key(v)
		return unsafe.Slice(unsafe.StringData(s), len(s)) // read-only: see Operator.Process
	}, func(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }, streams)
}

// ByPartition keys a stream by its records' key, for input already
// partitioned by that key (events produced with kord's Java-exact
// partitioner): the key group is the source partition and nothing is
// shuffled (Flink reinterpretAsKeyedStream). s must come from one source,
// through MapValues, Filter or FlatMapValues or not: a record keeps its partition and
// Kafka key through them.
func ByPartition[T any](s *Stream[T]) *KeyedStream[[]byte, T] {
	if o := s.out.origins(); len(o) != 1 {
		s.j.errs = append(s.j.errs, fmt.Errorf("keyed: ByPartition of a union of %q: partition mode takes one source", s.name()))
	} else if _, ok := o[0].(sourceNode); !ok {
		s.j.errs = append(s.j.errs, fmt.Errorf("keyed: ByPartition of the output of %q: partition mode keys a source's records by their partition; key a stage's output with KeyBy", s.name()))
	}
	return &KeyedStream[[]byte, T]{j: s.j, streams: []outlet[T]{s.out}, byPartition: true, keyOf: func(b []byte) []byte { return b }}
}

// Process adds a keyed stage: parallelism tasks, each with an Operator
// from newOp and keyed state for its key-group range (Flink's
// KeyedProcessFunction; Kafka Streams' Processor with state stores). Its
// output is a stream: to a sink (ToSink), or keyed again (KeyBy) into a
// further stage, with barriers aligned and watermarks carried at every
// hop. For a function with no state or one value per key, ProcessFunc and
// ProcessValue are shorter.
//
// Parallelism 0 is the default: as many tasks as the job's source topics
// have partitions together, at most runtime.NumCPU() and the max
// parallelism, at least one; it is resolved each time the job runs, when
// the partitions are known, and a restore at another parallelism
// redistributes the key groups. A negative parallelism is an error, and so
// is an explicit one above the max parallelism (in partition mode, the
// partition count). Every keyed stage of a job has the job's max
// parallelism (in partition mode, the partition count).
func Process[K, T, O any](k *KeyedStream[K, T], name string, parallelism int, newOp func() Operator[T, O]) *Stream[O] {
	j := k.j
	if err := layout.ValidateOperator(name); err != nil {
		j.errs = append(j.errs, fmt.Errorf("keyed: operator name: %w", err))
	}
	if parallelism < 0 {
		j.errs = append(j.errs, fmt.Errorf("keyed: operator %q: parallelism %d (0 is the default: the partition count, at most the CPUs)", name, parallelism))
	}
	if j.cfg.Instance != "" && !k.byPartition {
		k = hopOf(k, name)
	}
	ex := &keyedExchange[T]{key: k.key, keyName: k.keyName, byPartition: k.byPartition, broadcast: k.broadcast}
	op := &opOf[T, O]{name: name, parallelism: parallelism, newOp: newOp, in: ex}
	for _, s := range k.streams {
		s.attach(ex)
		op.inputs = append(op.inputs, s.origins()...)
	}
	j.ops = append(j.ops, op)
	return &Stream[O]{j: j, out: op}
}

// ProcessFunc adds a keyed operator stage that keeps no state: fn is
// called for each record with its key, as the type the stream was keyed by
// (a KeyByString key is a string). The key is only valid during the call:
// copy it (strings.Clone, bytes.Clone) to keep it. Parallelism as
// Process: 0 is the default, the partition count at most the CPUs.
func ProcessFunc[K, T, O any](k *KeyedStream[K, T], name string, parallelism int, fn func(key K, v T, out *Collector[O]) error) *Stream[O] {
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
// key, kept in keyed state named "value" and snapshotted with codec: fn is
// called for each record with its key (as ProcessFunc gives it) and the
// key's state (Flink's ValueState in a KeyedProcessFunction). Parallelism
// as Process: 0 is the default, the partition count at most the CPUs.
func ProcessValue[K, T, S, O any](k *KeyedStream[K, T], name string, parallelism int, codec serde.Serde[S],
	fn func(key K, v T, state *ValueState[S], out *Collector[O]) error) *Stream[O] {
	keyOf := k.keyOf
	if codec == nil || fn == nil {
		k.j.errs = append(k.j.errs, fmt.Errorf("keyed: operator %q: ProcessValue needs a codec for its state and a function", name))
	}
	return Process(k, name, parallelism, func() Operator[T, O] {
		return &valueOp[K, T, S, O]{codec: codec, keyOf: keyOf, fn: fn}
	})
}

type valueOp[K, T, S, O any] struct {
	codec serde.Serde[S]
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

// ToSink sends s's records to sink, through a sink task that aligns
// barriers across every task upstream. The job commits each checkpoint
// through its first sink (its Commit records the checkpoint with the
// source offsets in one atomic step). A job may have further sinks, each
// of which writes inside the first's commit (connector.Participant:
// kafkaio.Output of the first Kafka sink puts its records in the same
// transactions, keyed.MemoryOutput does the same in memory) or finishes
// after it what the checkpoint staged (connector.Follower: filesink). Any
// other is refused by Validate, naming both sinks (and both clusters, for
// Kafka sinks on two).
func ToSink[O any](s *Stream[O], name string, sink connector.Sink[O]) {
	j := s.j
	ex := &sinkExchange[O]{}
	s.out.attach(ex)
	n := &sinkOf[O]{name: name, sink: sink, in: ex}
	if j.sink == nil {
		j.sink = n
		return
	}
	j.outputs = append(j.outputs, n)
}
