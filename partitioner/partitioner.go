package partitioner

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
)

// Partitioner chooses the partition of one record.
//
// numPartitions is the topic's partition count and must be positive.
// available lists the partitions that currently have a leader, in the order
// given (kord's producer passes ascending partition ids, which is the order
// Java's Cluster keeps them in when built from ascending metadata). key == nil
// means "no key"; an empty non-nil key is a key.
//
// Implementations in this package are safe for concurrent use.
type Partitioner interface {
	Partition(topic string, key []byte, numPartitions int, available []int32) int32
}

// Func adapts a function to the Partitioner interface.
type Func func(topic string, key []byte, numPartitions int, available []int32) int32

// Partition calls f.
func (f Func) Partition(topic string, key []byte, numPartitions int, available []int32) int32 {
	return f(topic, key, numPartitions, available)
}

// counters holds one 32-bit counter per exact topic name. Java keeps a
// ConcurrentMap<String, AtomicInteger> and advances it with getAndIncrement,
// which wraps from 2^31-1 to -2^31; atomic.Int32.Add wraps the same way and
// ToPositive folds the negative half back, as in Java.
type counters struct {
	m     sync.Map // string -> *atomic.Int32
	start func(topic string) int32
}

// next returns the topic's counter value and advances it by one.
func (c *counters) next(topic string) int32 {
	v, ok := c.m.Load(topic)
	if !ok {
		n := new(atomic.Int32)
		n.Store(c.start(topic))
		v, _ = c.m.LoadOrStore(topic, n)
	}
	return v.(*atomic.Int32).Add(1) - 1
}

// pick applies the round-robin rule shared by Java's RoundRobinPartitioner and
// the legacy DefaultPartitioner's null-key path: an available partition by
// position, or any partition when none is available.
func pick(c int32, numPartitions int, available []int32) int32 {
	if len(available) > 0 {
		return available[int(ToPositive(c))%len(available)]
	}
	if numPartitions <= 0 {
		return -1
	}
	return int32(int(ToPositive(c)) % numPartitions)
}

// RoundRobin is Java's org.apache.kafka.clients.producer.RoundRobinPartitioner
// (kafka-clients, RoundRobinPartitioner.java): keys are ignored; each topic has
// its own counter starting at 0, advanced once per record; the record goes to
// available[toPositive(c) % len(available)], or to toPositive(c) %
// numPartitions when no partition is available.
//
// Java producers before the KAFKA-9965 fix (Kafka 3.x, where onNewBatch
// re-partitioned the first record of each new batch) called the partitioner
// twice for such records and so skipped partitions, spreading records
// unevenly. kord follows the partitioner's own rule, one step per record, not
// that skew.
type RoundRobin struct {
	c counters
}

// NewRoundRobin returns Java's RoundRobinPartitioner.
func NewRoundRobin() *RoundRobin {
	return &RoundRobin{c: counters{start: func(string) int32 { return 0 }}}
}

// Partition implements Partitioner.
func (r *RoundRobin) Partition(topic string, _ []byte, numPartitions int, available []int32) int32 {
	return pick(r.c.next(topic), numPartitions, available)
}

// Legacy is the default partitioner of Kafka's Java producer from 0.10.2 to
// 2.3 (kafka-clients 2.3, producer/internals/DefaultPartitioner.java): a keyed
// record goes to KeyPartition(key, numPartitions), over all partitions; a
// record without a key round-robins over the available partitions with a
// per-topic counter that starts at a random value (Java:
// ThreadLocalRandom.nextInt()), or over all partitions when none is
// available.
//
// Later Java versions place keyed records identically but spread null-key
// records with a sticky, batch-driven rule; null-key placement is not a
// contract in any Java version.
type Legacy struct {
	c counters
}

// LegacyOpt configures NewLegacy.
type LegacyOpt func(*Legacy)

// LegacyStart sets the function that gives a topic's first counter value
// (default: a uniformly random int32, as Java's ThreadLocalRandom.nextInt).
// Tests use it to make null-key placement deterministic.
func LegacyStart(start func(topic string) int32) LegacyOpt {
	return func(l *Legacy) { l.c.start = start }
}

// NewLegacy returns the 0.10.2–2.3 Java default partitioner.
func NewLegacy(opts ...LegacyOpt) *Legacy {
	l := &Legacy{c: counters{start: func(string) int32 { return int32(rand.Uint32()) }}}
	for _, o := range opts {
		o(l)
	}
	return l
}

// Partition implements Partitioner.
func (l *Legacy) Partition(topic string, key []byte, numPartitions int, available []int32) int32 {
	if key != nil {
		return KeyPartition(key, numPartitions)
	}
	return pick(l.c.next(topic), numPartitions, available)
}

// Keyed places keyed records by KeyPartition and hands records without a key
// to another partitioner (NoKey), for example Keyed{NoKey: NewRoundRobin()}.
// kord's producer uses NewLegacy by default (producer.Partitioner), which
// places keyed records the same way but round-robins null-key records from a
// random start.
type Keyed struct {
	NoKey Partitioner
}

// Partition implements Partitioner.
func (k Keyed) Partition(topic string, key []byte, numPartitions int, available []int32) int32 {
	if key != nil {
		return KeyPartition(key, numPartitions)
	}
	return k.NoKey.Partition(topic, nil, numPartitions, available)
}
