// Package kafkaio connects kord jobs (package keyed) to Kafka: a [Client]
// configured once ([NewClient]: brokers and any librdkafka property), a
// source reading a topic ([NewSource]) and an exactly-once sink writing one
// ([NewSink]). Example shows a complete job. It is kord's Kafka edge (named
// after Beam's Go SDK connector, sdks/go/pkg/beam/io/kafkaio; Flink too
// keeps its Kafka connector outside its runtime). It is the only place
// where the engine (package keyed) meets kord's Kafka clients (packages
// producer and consumer); keyed and checkpoint import no Kafka client.
//
// # The commit protocol
//
// Source reads a topic's partitions from concrete offsets kept in the
// engine's checkpoints; nothing is committed by its consumers. Sink writes
// the job's output through one transactional producer per job
// (transactional.id "kord.<job>"): records of the checkpoint in flight go
// into the open transaction; records after its barrier wait in a bounded
// epoch buffer. Commit sends the checkpoint's source offsets to the commit
// group "kord.<job>.commit" with the commit record
// kord1;run=R;ckpt=n;job=J (and ;inst=I on a job of several processes) as
// offset metadata, commits, begins the next transaction and drains the
// buffer into it. Recorded reads that record back, with stable offsets, so
// recovery restores exactly the checkpoint Kafka committed.
//
// librdkafka cannot resume another producer's transaction, and Kafka's
// transaction protocol lets a delayed commit or abort land on a later
// transaction (KIP-890, not in librdkafka). So the sink never retries a
// transactional call whose outcome it does not know: the call's error is
// marked [keyed.OutcomeUnknown], the engine ends the run, and the next run's
// Reset makes a new producer whose InitTransactions fences the old one
// (completing a commit it had sent, aborting anything else), then restores
// what Kafka recorded.
//
// # Several processes
//
// With keyed.Instance(id), the job is one of several processes: the
// sink is a static member of the commit group, Kafka assigns the input
// partitions, the producer's transactional.id is "kord.<job>.<id>", each
// partition's offset carries its own commit record, and offsets are sent
// with the member's group metadata (KIP-447), so a process that lost its
// partitions cannot commit them. The engine restores each assigned
// partition from the checkpoint its record names, from the checkpoint
// storage every process shares (a directory, or object storage:
// [keyed.CheckpointStorage] with checkpoint/blobstore; DESIGN.md, "Several
// processes"). Its stages are keyed by partition, or by a field through a
// hop: the records cross between the processes through the topic
// kord.<job>.<stage>.repartition, written in the job's transactions and
// read back by the job ([connector.Hops]; DESIGN.md, "Keying by a field: the hop").
//
// # Time
//
// Every record the source reads carries its Kafka timestamp, and its
// reader is a [connector.BacklogReader]: with keyed watermarks and idleness
// (Stream.Watermarks, Stream.Idleness), a silent partition with records
// waiting past the reader's position, not fetched yet or behind an open
// transaction (its last stable offset below its high watermark), is not
// idle and keeps holding the watermark.
//
// Errors are classified in the engine's terms: a fenced producer and a
// configuration the broker refuses are [keyed.Permanent] (a restart would
// fence the live copy of the job, or fail the same way); unknown outcomes
// are keyed.OutcomeUnknown; the rest are retryable.
package kafkaio
