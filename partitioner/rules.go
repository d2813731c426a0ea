package partitioner

import (
	"hash/crc32"
	"sort"
	"strings"
)

// A Rule is how a client places a record that has a key: the partition of
// key among numPartitions, a function of the key's bytes and the count
// only. The rules here are those of the clients Kafka shops run, so that
// kord places keys where their consumers expect them, and can check that
// its input was placed as it assumes (kafkaio.CheckPlacement).
//
// Records without a key keep the producer's own rule (its Partitioner's
// NoKey); no consumer relies on where they go.
type Rule struct {
	name  string
	place func(key []byte, numPartitions int) int32
	// emptyIsNoKey: an empty key is placed as if it had none
	// (librdkafka's consistent_random).
	emptyIsNoKey bool
}

// The rules, by the clients that define them.
var (
	// Java is Kafka's Java producer: toPositive(murmur2(key)) %
	// numPartitions (KeyPartition). Also franz-go's default, librdkafka's
	// murmur2 and murmur2_random, and sarama's NewMurmur2Partitioner.
	Java = Rule{name: "java", place: KeyPartition}
	// SaramaHash is sarama's NewHashPartitioner, its default:
	// p = int32(fnv1a32(key)) % numPartitions, negated if negative
	// (sarama, partitioner.go, hashPartitioner.Partition). Also goka's
	// emitters (goka's DefaultHasher is FNV-1a, through
	// sarama.NewCustomHashPartitioner) and librdkafka's fnv1a and
	// fnv1a_random, which compute |int32(h)| % numPartitions to match it
	// (rdfnv1a.c). An empty key is hashed.
	SaramaHash = Rule{name: "sarama", place: saramaHash}
	// SaramaReferenceHash is sarama's NewReferenceHashPartitioner:
	// (int32(fnv1a32(key)) & 0x7fffffff) % numPartitions.
	SaramaReferenceHash = Rule{name: "sarama-reference", place: saramaReference}
	// Consistent is librdkafka's consistent partitioner:
	// crc32(key) % numPartitions, the IEEE CRC-32 of zlib, taken unsigned
	// (rdkafka_msg.c, rd_kafka_msg_partitioner_consistent). Also sarama's
	// NewConsistentCRCHashPartitioner for any non-nil key.
	Consistent = Rule{name: "consistent", place: consistent}
	// ConsistentRandom is librdkafka's default partitioner, and so
	// confluent-kafka-go's: Consistent for a key with bytes; an empty key
	// is placed as no key is (rd_kafka_msg_partitioner_consistent_random).
	ConsistentRandom = Rule{name: "consistent_random", place: consistent, emptyIsNoKey: true}
)

// names maps the names a configuration may give a rule to it: kord's, and
// each client's own where it has one (librdkafka's partitioner setting).
var names = map[string]Rule{
	"java": Java, "murmur2": Java, "murmur2_random": Java,
	"sarama": SaramaHash, "goka": SaramaHash, "fnv1a": SaramaHash, "fnv1a_random": SaramaHash,
	"sarama-reference": SaramaReferenceHash,
	"consistent":       Consistent, "consistent_random": ConsistentRandom,
}

// RuleNamed returns the rule a name gives: java (murmur2, murmur2_random),
// sarama (goka, fnv1a, fnv1a_random), sarama-reference, consistent or
// consistent_random; false for any other name.
func RuleNamed(name string) (Rule, bool) {
	r, ok := names[strings.ToLower(strings.TrimSpace(name))]
	return r, ok
}

// RuleNames lists the names RuleNamed takes, sorted.
func RuleNames() []string {
	out := make([]string, 0, len(names))
	for n := range names {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Name is the rule's name.
func (r Rule) Name() string {
	if r.place == nil {
		return Java.name
	}
	return r.name
}

// Keyed reports whether the rule places key by its bytes: a non-nil key,
// and with ConsistentRandom a non-empty one.
func (r Rule) Keyed(key []byte) bool {
	return key != nil && !(r.emptyIsNoKey && len(key) == 0)
}

// Partition returns the partition the rule gives key among numPartitions
// (-1 when numPartitions is not positive). The zero Rule is Java. For a
// key the rule does not place by its bytes (Keyed), the result is what
// the rule's hash gives, which its client does not use.
func (r Rule) Partition(key []byte, numPartitions int) int32 {
	if numPartitions <= 0 {
		return -1
	}
	if r.place == nil {
		return KeyPartition(key, numPartitions)
	}
	return r.place(key, numPartitions)
}

// FNV1a32 returns the 32-bit FNV-1a hash of data (offset basis
// 0x811c9dc5, prime 0x01000193: hash/fnv's New32a, which sarama and goka
// use).
func FNV1a32(data []byte) uint32 {
	h := uint32(0x811c9dc5)
	for _, b := range data {
		h ^= uint32(b)
		h *= 0x01000193
	}
	return h
}

func saramaHash(key []byte, n int) int32 {
	// Go's remainder takes the dividend's sign; sarama negates it after,
	// so math.MinInt32 never has to be negated.
	p := int64(int32(FNV1a32(key))) % int64(n)
	if p < 0 {
		p = -p
	}
	return int32(p)
}

func saramaReference(key []byte, n int) int32 {
	return int32(int64(int32(FNV1a32(key))&0x7fffffff) % int64(n))
}

func consistent(key []byte, n int) int32 {
	return int32(uint64(crc32.ChecksumIEEE(key)) % uint64(n))
}

// ByRule places keyed records by rule and hands records without a key (or
// that the rule places as having none) to NoKey (nil: as NewLegacy does,
// the producer's default): the partitioner of a
// producer that writes where another client's consumers expect keys
// (producer.Partitioner(partitioner.ByRule{Rule: partitioner.SaramaHash,
// NoKey: partitioner.NewLegacy()})).
type ByRule struct {
	Rule  Rule
	NoKey Partitioner
}

// Partition implements Partitioner.
func (b ByRule) Partition(topic string, key []byte, numPartitions int, available []int32) int32 {
	if b.Rule.Keyed(key) {
		return b.Rule.Partition(key, numPartitions)
	}
	if b.NoKey == nil {
		return legacyNoKey.Partition(topic, nil, numPartitions, available)
	}
	return b.NoKey.Partition(topic, nil, numPartitions, available)
}

// legacyNoKey places ByRule's records without a key when it has no NoKey:
// as the producer's default does (NewLegacy).
var legacyNoKey = NewLegacy()
