// Package checkpoint is where a job's checkpoints are kept and what they
// hold: the [Storage] they live in ([Store], a directory on a [vfs.FS], and
// checkpoint/blobstore, a bucket), the metadata of one checkpoint and the
// references in it ([Metadata], [Ref], [PartitionOffset], [SourceRef],
// [FileRef], [OperatorRef]), reading them back ([ListCheckpoints],
// [ReadCheckpoint]), and the errors a restore can stop with. It imports no
// Kafka client. Every function that reads or writes a Storage takes the
// job's context first, and cancelling it reaches the storage.
//
// A user of kord starts with package keyed (jobs) and package kafkaio
// (Kafka sources and sinks); from this package they meet the errors a
// restore can stop with ([ErrCommittedMissing], [ErrAmbiguous],
// [ErrOffsetsDiffer], [ErrProvenance]) and [Mode], and a connector meets
// Ref and PartitionOffset. The file systems for tests (an in-memory one
// that simulates crashes, one that injects errors) are packages vfs and
// vfs/errorfs.
//
// The engine's machinery under it is internal to kord: the barrier aligner
// (internal/align), the checkpoint lifecycle (internal/lifecycle), the
// recovery decision (internal/recovery), retention (internal/retain), the
// state-file format (internal/statefile) and the grammar of object names
// (internal/layout).
package checkpoint
