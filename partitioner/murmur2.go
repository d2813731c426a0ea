// Package partitioner reproduces the partitioning rules of Apache Kafka's Java
// producer, so that a record placed by a Go service lands on the same
// partition as the same record placed by a Java service.
//
// The keyed rule every Java producer since 0.10.2 applies is
//
//	toPositive(murmur2(keyBytes)) % numPartitions
//
// computed over all partitions of the topic, whether or not they currently
// have a leader (kafka-clients, BuiltInPartitioner.partitionForKey, and before
// it DefaultPartitioner.partition). An empty key is a key and is hashed; only
// a nil key means "no key".
//
// librdkafka, and so confluent-kafka-go, defaults to a CRC32 partitioner
// ("consistent_random") that places keys elsewhere; kord's producer never lets
// librdkafka choose a partition.
//
// The other clients' keyed rules are Rules: [SaramaHash] (sarama's default,
// goka's, librdkafka's fnv1a), [SaramaReferenceHash], [Consistent] and
// [ConsistentRandom] (librdkafka's), proven against sarama's own partitioners
// and librdkafka's; [ByRule] places a producer's records by one of them.
//
// Adding partitions to a topic moves keys, exactly as it does in Java: the
// rule depends on the partition count.
package partitioner

// Seed and mixing constants of Kafka's murmur2 variant
// (kafka-clients, org.apache.kafka.common.utils.Utils.murmur2).
const (
	murmur2Seed uint32 = 0x9747b28c
	murmur2M    uint32 = 0x5bd1e995
	murmur2R           = 24
)

// Murmur2 returns Kafka's 32-bit murmur2 hash of data, bit for bit what
// kafka-clients' Utils.murmur2 returns (as a signed int, as Java has it).
//
// Kafka's variant reads the body as little-endian 32-bit words, mixes the 1-3
// tail bytes in from the highest down, and seeds with 0x9747b28c xor the
// length.
func Murmur2(data []byte) int32 {
	n := len(data)
	h := murmur2Seed ^ uint32(n)
	body := n &^ 3
	for i := 0; i < body; i += 4 {
		k := uint32(data[i]) | uint32(data[i+1])<<8 | uint32(data[i+2])<<16 | uint32(data[i+3])<<24
		k *= murmur2M
		k ^= k >> murmur2R
		k *= murmur2M
		h *= murmur2M
		h ^= k
	}
	switch n & 3 {
	case 3:
		h ^= uint32(data[body+2]) << 16
		fallthrough
	case 2:
		h ^= uint32(data[body+1]) << 8
		fallthrough
	case 1:
		h ^= uint32(data[body])
		h *= murmur2M
	}
	h ^= h >> 13
	h *= murmur2M
	h ^= h >> 15
	return int32(h)
}

// ToPositive maps n to a non-negative int32 by clearing the sign bit, as
// kafka-clients' Utils.toPositive does. It is not an absolute value:
// ToPositive(-1) is 2147483647 and ToPositive(math.MinInt32) is 0.
func ToPositive(n int32) int32 {
	return n & 0x7fffffff
}

// KeyPartition returns the partition Kafka's Java producer gives a record
// with this key in a topic of numPartitions partitions:
// toPositive(murmur2(key)) % numPartitions (kafka-clients,
// BuiltInPartitioner.partitionForKey).
//
// key must not be nil (a nil key has no hash partition; see the Partitioner
// implementations for what happens to it). numPartitions must be positive; it
// returns -1 otherwise, which no caller may use as a partition.
func KeyPartition(key []byte, numPartitions int) int32 {
	if numPartitions <= 0 {
		return -1
	}
	return int32(int64(ToPositive(Murmur2(key))) % int64(numPartitions))
}
