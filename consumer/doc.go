// Package consumer is kord's checkpointing Kafka source, in the manner of
// Flink's Kafka consumer: partitions are assigned (a [Source] never joins a
// group; a [Member] does, below),
// each assigned partition's position is a concrete offset kept by kord and
// recorded in checkpoints, and offsets reach Kafka only inside the
// transaction that commits a checkpoint (see package kafkaio). The
// consumer never commits offsets itself: auto-commit and the offset store
// are forced off.
//
// Start with [New], Resolve (where to begin), Assign and Poll; Ends and
// Reached tell when a partition's end is read (see Example). A kord job
// reads Kafka through kafkaio.NewSource, which builds on this package. The
// work of an admin (a group's committed offsets, committing them from
// outside the group, deleting a group, a topic's configuration, its
// cluster id and topic id) is package admin's.
//
// # Failures
//
// Every call that reaches for the cluster (metadata, watermarks, offsets,
// a [FromGroup] start's read of the group's offsets) succeeds or fails
// within [RequestTimeout] (10 s by default), with an
// error that names its cause in the classes the producer and package
// admin share: [ErrAuth] (credentials or TLS refused, within about a
// second), [ErrUnreachable], [ErrDenied], [ErrUnknownTopic] (DESIGN.md,
// "Errors"). librdkafka's log goes to [Logger], never raw to stderr.
//
// # Group membership
//
// [Join] makes a Member of a consumer group, for a job on several processes
// (keyed.Instance): Kafka assigns it partitions (the classic protocol
// with cooperative-sticky, or KIP-848's with [Protocol]), it holds them
// paused and tells its owner through [Hooks], releasing a revoked partition
// only when the owner's Revoked hook returns (after its commit). Its group
// metadata goes with the owner's transactional offset commits
// (producer.Producer.SendOffsetsToTransactionFor), so the group
// coordinator refuses a member of an older generation (KIP-447).
// [InstanceID] makes it static.
//
// # Where a job starts
//
// With no checkpoint, [Source.Resolve] turns a Start into a concrete offset
// for every partition of a topic, which the caller records as checkpoint
// 0: [Earliest], [Latest], AtTime(t), AtOffsets(map).Otherwise(start) and
// FromGroup(group), the last two with OrReset(ResetEarliest|ResetLatest)
// for offsets that are missing or no longer in the log (Kafka's
// auto.offset.reset; the default, [ResetNone], fails). After that, a
// restart starts from the checkpoint and never resolves again.
//
// # Memory
//
// librdkafka fetches ahead of Poll into one queue per Source: every
// assigned partition's fetch queue is forwarded to the consumer's queue,
// and the fetch thresholds are checked against that shared queue. It stops
// fetching once the queue holds N = queued.min.messages records or
// Q = queued.max.messages.kbytes × 1024 bytes of record values
// (rd_kafka_toppar_fetch_decide in librdkafka's rdkafka_fetcher.c). The
// check passes just below a threshold and each broker has one Fetch in
// flight, so the queue overshoots by up to one fetch response per broker:
// at most F = fetch.max.bytes, and at most M = max.partition.fetch.bytes
// per partition (Kafka still returns a partition's first record batch
// whole, up to the topic's max.message.bytes, so that a consumer can
// progress). A fetch response stays allocated until Poll has taken its
// last record, and each queued record costs librdkafka about 300 bytes of
// bookkeeping besides (measured with librdkafka 2.11.1: 300,000 queued
// 1-byte records took 94 MB).
//
// So for records of w bytes on the wire with v-byte values, a Source
// holds at most about
//
//	R = min(Q/v, N) + O/w records, O = Σ over brokers b of min(F, P_b × M)
//
// taking R × (w + 300) bytes, where P_b is the number of the Source's
// assigned partitions that broker b leads (with B such brokers, O ≤ B × F).
// For compressed topics, O/w takes the compressed record size (a fetch
// carries more records), and each record is held at its decompressed
// size.
//
// kord's defaults: Q = 2 MiB (queued.max.messages.kbytes = 2048, against
// librdkafka's 65536), N = 10000 (against 100000), and F, unless set,
// derived by librdkafka as max(min(50 MiB, Q), message.max.bytes) = 2 MiB
// (rdkafka_conf.c); M stays librdkafka's and Java's 1 MiB. For a Source
// of 12 partitions led by 3 brokers (O = 3 × min(2, 4) MiB = 6 MiB):
// with 150-byte records (100-byte values) R ≈ 10000 + 41900 and the
// worst case is about 23 MB (librdkafka's defaults: about 83 MB); with
// 1 KiB values (about 1,070-byte records), about 11 MB (librdkafka's
// defaults: about 106 MB). For tiny records the fetch sizes dominate:
// lower max.partition.fetch.bytes and fetch.max.bytes with [Set]. Raise Q
// and N for throughput over high-latency links: each broker returns at
// most F to a Source per round trip. On one host, 1,000,000 150-byte
// records over 12 partitions read as fast with kord's defaults as with
// librdkafka's (about 270,000 records/s either way, 8 alternated runs
// each) in 31 MB of peak RSS instead of 106 MB; kord's former defaults
// (8 MiB, 20000) took 56 MB. Records Poll returned are copied into Go
// memory and belong to the caller.
package consumer

// Fetch queue defaults (see the package doc).
const (
	defaultQueueKBytes  = "2048"
	defaultQueueRecords = "10000"
)
