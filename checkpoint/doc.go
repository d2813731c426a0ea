// Package checkpoint is the pure core under kord's engine: the barrier
// aligner and the checkpoint lifecycle as state machines fed events, the
// recovery decision (Decide), and the durable side of checkpoints (the
// metadata, commit-record and state-file formats, a Store on a small FS
// interface with an in-memory, a crash-simulating and an error-injecting
// version). It imports no Kafka client.
//
// A user of kord starts with package keyed (jobs) and package kafkaio
// (Kafka sources and sinks); from this package they meet the errors a
// restore can stop with (ErrCommittedMissing, ErrAmbiguous,
// ErrOffsetsDiffer), Mode, and the file systems for tests (NewMemFS,
// NewErrorFS).
package checkpoint
