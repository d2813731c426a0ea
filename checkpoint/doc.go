// Package checkpoint is the pure core under kord's engine: the barrier
// aligner and the checkpoint lifecycle as state machines fed events, the
// recovery decision (Decide), and the durable side of checkpoints (the
// metadata, commit-record and state-file formats, and the Storage they are
// kept in: Store, a directory on a vfs.FS, and checkpoint/blobstore, a
// bucket). It imports no Kafka client. Every function that reads or writes
// a Storage takes the job's context first, and cancelling it reaches the
// storage.
//
// A user of kord starts with package keyed (jobs) and package kafkaio
// (Kafka sources and sinks); from this package they meet the errors a
// restore can stop with (ErrCommittedMissing, ErrAmbiguous,
// ErrOffsetsDiffer) and Mode. The file systems for tests (an in-memory one
// that simulates crashes, one that injects errors) are packages vfs and
// vfs/errorfs.
package checkpoint
