// Package layers holds the test that keeps kord's packages in their layers
// (DESIGN.md in the repository's root, "Layers"): arrows point down only.
//
//	examples/, bench/          programs
//	kordtest/                  an in-process cluster and read-back, for users' tests
//	kafkaio/                   the Kafka edge: the engine's source and sink
//	keyed/                     job graph, runtime, keyed and operator state
//	keyed/connector            what sources and sinks implement: nothing of keyed
//	keyed/internal/            the runtime's and keyed state's parts, under keyed's rules
//	internal/align, lifecycle, pure core under keyed: aligner, lifecycle,
//	  recovery, retain,        recovery decision, retention, state-file format
//	  statefile
//	checkpoint/                checkpoint storage, metadata, the restore errors
//	internal/layout            the grammar of checkpoint object names
//	producer/  consumer/       standalone clients on confluent-kafka-go;
//	admin/                     admin/ imports neither of the other two
//	partitioner/               Kafka's placement rules, pure functions
//	vfs/                       file systems; vfs/errorfs injects errors
//	internal/                  ground helpers (kafkaconf, jsonx, failpoint)
//	internal/rig/              test rigs, above everything, linked by tests only
//
// It has no code: the rules live in its test, which reads the packages'
// imports with `go list`.
package layers
