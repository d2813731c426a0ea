// Package keyed declares and runs kord jobs: sources, keyed stages with
// per-key state, and a sink, checkpointed exactly once (or at least once)
// and restored after any crash.
//
// Start with [NewJob] (named, configured by options), [FromSource], one of
// [KeyBy], [KeyByString] or [ByPartition], then [Process] (an [Operator]
// with any keyed state), [ProcessFunc] (no state) or [ProcessValue] (one
// value per key), [ToSink], and Run. A stage's output is a [Stream] like a
// source's: key it again into a further stage, chain [MapValues], Filter
// and [FlatMapValues] into the task that makes it, feed it to several
// stages, [Union] streams. Each stage takes a parallelism, its number of
// tasks: 0 is the default, the partition count of its source topics at most
// runtime.NumCPU(), resolved each time the job runs. A source or a sink is
// anything implementing package connector's Source or Sink: Kafka's are in
// package kafkaio; the in-memory ones here ([MemorySource], [MemorySink])
// need no Kafka; package kordtest runs a job against an in-process cluster
// in tests. Example and kafkaio's Example show complete jobs (go doc does
// not print examples: they are in keyed/example_test.go and
// kafkaio/example_test.go, and the guides under docs/ in the repository
// go through jobs step by step).
//
// The rest of this doc is how keyed state works.
//
// # Key groups
//
// Every key belongs to one of maxParallelism key groups, and every key group
// to exactly one of the parallelism instances of a keyed operator, which owns
// a contiguous range of them (Flink's KeyGroupRangeAssignment formulas). Two
// modes share this layout:
//
//   - keyBy(extractor): key group = xxhash64(key) %
//     maxParallelism, our own hash of the key bytes (Flink applies murmur to
//     a Java hashCode; kord does not). Records are shuffled to instance
//     keyGroup * parallelism / maxParallelism.
//   - keyed by the record key, already partitioned: the key group is the
//     Kafka partition the record was read from and maxParallelism is the
//     topic's partition count, so no shuffle is needed (Flink's
//     reinterpretAsKeyedStream).
//
// # State
//
// A [Backend] holds every keyed state of one operator instance for its
// key-group range. An Operator declares its states on it in Open ([Value],
// [List], [Map]); the runtime sets the current key before it calls the
// operator, and [ValueState], [ListState] and [MapState] then read and
// write the current key's state. A Backend is used by one goroutine, the
// operator's.
//
// # Snapshots
//
// The runtime's snapshot of a Backend, taken at the barrier, is
// O(states × key groups): it freezes the current per-key-group tables and
// returns. The first write to a frozen key group afterwards copies that
// group's table (copy-on-write at key-group granularity), so the snapshot
// is encoded on another goroutine while processing goes on. Encoding
// writes, for each state, one state file (an Avro object container file,
// kord's internal/statefile) holding every key group of the instance that
// has entries, with an index of its key groups, named with
// "<operator>.<state>" in the operator slot and the instance's first key
// group (one file per instance and state, as Flink writes one per task: a
// file per key group made checkpoints cost their file system calls). A restore reads the files of a checkpoint
// taken at any parallelism with the same maxParallelism and decodes, in
// parallel, the key groups of its own range: that is rescaling. Until a
// snapshot is encoded and released, writes keep copying the key groups
// they touch first.
//
// Values are held as Go values and shared with snapshots, so a stored value
// is never modified in place: a value holding pointers, slices or maps must
// be replaced (Set, Put, Update), not mutated.
//
// # Schemas
//
// The checkpoint records each state's kind and its codecs' fingerprints,
// and a restore checks them. A state whose codec is a [serde.Resolver] (the
// Avro serdes) records its writer schema too, and may change it across a
// restore as Avro's schema resolution allows: fields added with a
// default, fields removed, types promoted (int to long, float to double,
// string to bytes...), enum symbols removed where the enum has a default.
// The restore reads the old values into the new shape, or refuses, before
// reading any, with a [*MismatchError] naming the state and the field. Any
// other change of fingerprint is refused.
package keyed
