package partitioner

import (
	"fmt"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/stretchr/testify/require"
)

// TestDifferentialLibrdkafkaMurmur2Random lets librdkafka place every vector
// key with its own Java-compatible partitioner (partitioner=murmur2_random)
// and compares with KeyPartition. librdkafka's mock cluster is used only as
// somewhere to send records so that delivery reports carry librdkafka's
// choice; nothing here depends on its transaction or retention behaviour.
func TestDifferentialLibrdkafkaMurmur2Random(t *testing.T) {
	vs := loadMurmur2Vectors(t)
	counts := []int{1, 3, 12, 100}
	if testing.Short() {
		vs = vs[:500]
	}
	mc, err := kafka.NewMockCluster(1)
	require.NoError(t, err)
	defer mc.Close()
	p, err := kafka.NewProducer(&kafka.ConfigMap{
		"bootstrap.servers":         mc.BootstrapServers(),
		"partitioner":               "murmur2_random",
		"linger.ms":                 5,
		"go.delivery.report.fields": "key",
		"log_level":                 0,
	})
	require.NoError(t, err)
	defer p.Close()
	type sent struct {
		n   int
		key []byte
	}
	reports := make(chan kafka.Event, len(vs)*len(counts))
	for _, n := range counts {
		topic := fmt.Sprintf("murmur2-random-%d", n)
		require.NoError(t, mc.CreateTopic(topic, n, 1))
		for _, v := range vs {
			err := p.Produce(&kafka.Message{
				TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: kafka.PartitionAny},
				Key:            v.key,
				Opaque:         sent{n, v.key},
			}, reports)
			require.NoError(t, err)
		}
	}
	deadline := time.After(2 * time.Minute)
	empty := 0
	for i := 0; i < len(vs)*len(counts); i++ {
		select {
		case ev := <-reports:
			m := ev.(*kafka.Message)
			require.NoError(t, m.TopicPartition.Error)
			s := m.Opaque.(sent)
			require.Equal(t, KeyPartition(s.key, s.n), m.TopicPartition.Partition, "librdkafka murmur2_random placed key %x (%d partitions) elsewhere", s.key, s.n)
			if len(s.key) == 0 {
				empty++
			}
		case <-deadline:
			t.Fatalf("only %d of %d delivery reports", i, len(vs)*len(counts))
		}
	}
	// confluent-kafka-go passes an empty key as a zero-length key (not
	// NULL), so librdkafka hashes it like Java does.
	require.NotZero(t, empty)
}
