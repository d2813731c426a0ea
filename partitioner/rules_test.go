package partitioner

import (
	"encoding/hex"
	"fmt"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/stretchr/testify/require"
)

// TestSaramaVectors: SaramaHash and SaramaReferenceHash against the
// partitions sarama's own NewHashPartitioner and
// NewReferenceHashPartitioner gave for the Java vectors' keys
// (testdata/sarama.tsv, written by testdata/saramagen with sarama
// v1.62.0), for 1 to 1000 partitions.
func TestSaramaVectors(t *testing.T) {
	rows := 0
	differ := 0
	forEachVectorLine(t, "testdata/sarama.tsv", func(line int, f []string) {
		require.Len(t, f, 2+2*len(vectorPartitionCounts), "sarama.tsv line %d", line)
		key, err := hex.DecodeString(f[1])
		require.NoError(t, err)
		for i, n := range vectorPartitionCounts {
			hash, ref := atoi32(t, f[2+i], line), atoi32(t, f[2+len(vectorPartitionCounts)+i], line)
			require.Equal(t, hash, SaramaHash.Partition(key, n), "line %d: key %x, %d partitions: sarama's NewHashPartitioner", line, key, n)
			require.Equal(t, ref, SaramaReferenceHash.Partition(key, n), "line %d: key %x, %d partitions: sarama's NewReferenceHashPartitioner", line, key, n)
			if hash != ref {
				differ++
			}
		}
		rows++
	})
	require.Greater(t, rows, 5000)
	// "bo[[c]": FNV-1a 0x80000000, math.MinInt32 as an int32, whose
	// negation overflows (goka's own lookups get a negative partition);
	// sarama takes the remainder first: 2^31 mod n (sarama v1.62.0 gave
	// these).
	require.Equal(t, uint32(0x80000000), FNV1a32([]byte("bo[[c]")))
	for i, want := range []int32{0, 0, 2, 2, 8, 48, 648} {
		require.Equal(t, want, SaramaHash.Partition([]byte("bo[[c]"), vectorPartitionCounts[i]))
	}
	require.NotZero(t, differ, "the two rules differ where the hash's top bit is set")
}

// TestLibrdkafkaRules lets the librdkafka bundled with confluent-kafka-go
// place the vector keys with each of its partitioners (its partitioner
// setting) and compares the partitions it delivered to with the rule kord
// gives that name. librdkafka's mock cluster is only somewhere to send the
// records, so that the delivery reports carry librdkafka's choice.
// consistent_random places an empty key as no key (sticky): those are
// left out, and ConsistentRandom says so (Keyed).
func TestLibrdkafkaRules(t *testing.T) {
	vs := loadMurmur2Vectors(t)
	if testing.Short() {
		vs = vs[:500]
	}
	counts := []int{3, 12, 100}
	mc, err := kafka.NewMockCluster(1)
	require.NoError(t, err)
	defer mc.Close()
	for _, name := range []string{"consistent", "consistent_random", "murmur2", "murmur2_random", "fnv1a", "fnv1a_random"} {
		t.Run(name, func(t *testing.T) {
			rule, ok := RuleNamed(name)
			require.True(t, ok)
			p, err := kafka.NewProducer(&kafka.ConfigMap{
				"bootstrap.servers": mc.BootstrapServers(), "partitioner": name, "linger.ms": 5, "log_level": 0,
			})
			require.NoError(t, err)
			defer p.Close()
			type sent struct {
				n   int
				key []byte
			}
			reports := make(chan kafka.Event, len(vs)*len(counts))
			want := 0
			for _, n := range counts {
				topic := fmt.Sprintf("%s-%d", name, n)
				require.NoError(t, mc.CreateTopic(topic, n, 1))
				for _, v := range vs {
					if !rule.Keyed(v.key) {
						require.Equal(t, "consistent_random", name)
						require.Empty(t, v.key)
						continue
					}
					require.NoError(t, p.Produce(&kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: kafka.PartitionAny},
						Key: v.key, Opaque: sent{n, v.key}}, reports))
					want++
				}
			}
			deadline := time.After(2 * time.Minute)
			for i := 0; i < want; i++ {
				select {
				case ev := <-reports:
					m := ev.(*kafka.Message)
					require.NoError(t, m.TopicPartition.Error)
					s := m.Opaque.(sent)
					require.Equal(t, rule.Partition(s.key, s.n), m.TopicPartition.Partition, "librdkafka %s placed key %x (%d partitions) elsewhere than kord's %s", name, s.key, s.n, rule.Name())
				case <-deadline:
					t.Fatalf("only %d of %d delivery reports", i, want)
				}
			}
		})
	}
}

// TestRuleNamed: each client's names, and the zero Rule is Java's.
func TestRuleNamed(t *testing.T) {
	for name, want := range map[string]string{"java": "java", "murmur2_random": "java", "goka": "sarama", "fnv1a": "sarama",
		"Sarama-Reference": "sarama-reference", " consistent ": "consistent", "consistent_random": "consistent_random"} {
		r, ok := RuleNamed(name)
		require.True(t, ok, name)
		require.Equal(t, want, r.Name(), name)
	}
	_, ok := RuleNamed("crc32")
	require.False(t, ok)
	require.Equal(t, KeyPartition([]byte("k"), 7), Rule{}.Partition([]byte("k"), 7))
	require.Equal(t, "java", Rule{}.Name())
	require.False(t, ConsistentRandom.Keyed([]byte{}))
	require.True(t, Consistent.Keyed([]byte{}))
	require.False(t, Java.Keyed(nil))
	require.Equal(t, int32(-1), SaramaHash.Partition([]byte("k"), 0))
	// ByRule: keyed records by the rule, the rest by NoKey.
	b := ByRule{Rule: ConsistentRandom, NoKey: NewRoundRobin()}
	require.Equal(t, Consistent.Partition([]byte("k"), 12), b.Partition("t", []byte("k"), 12, nil))
	require.Equal(t, int32(0), b.Partition("t", []byte{}, 12, nil), "an empty key goes round robin, from 0")
	require.Equal(t, int32(1), b.Partition("t", nil, 12, nil))
}
