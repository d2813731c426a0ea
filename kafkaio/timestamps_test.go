package kafkaio_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kordproject/kord/consumer"
	"github.com/kordproject/kord/internal/rig/kafkatest"
	"github.com/kordproject/kord/kafkaio"
	"github.com/kordproject/kord/keyed"
	"github.com/kordproject/kord/keyed/connector"
	"github.com/kordproject/kord/kordtest"
	"github.com/kordproject/kord/producer"
	"github.com/kordproject/kord/serde"
)

// timed is the counter, noting the time its Collector reports for each
// event.
type timed struct {
	counter
	mu   *sync.Mutex
	seen map[string]time.Time
}

func (o *timed) Process(key []byte, e event, out *keyed.Collector[result]) error {
	o.mu.Lock()
	o.seen[fmt.Sprintf("%s/%d", e.UUID, e.Seq)] = out.Timestamp()
	o.mu.Unlock()
	return o.counter.Process(key, e, out)
}

// TestKafkaRecordTimestamps: the timestamp a producer gave each record
// (CreateTime) reaches the operator that processes it, and the consumer
// reports its type.
func TestKafkaRecordTimestamps(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		in, out := c.CreateTopic(t, 3, nil), c.CreateTopic(t, 3, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		p, err := producer.New(serde.String(), serde.JSON[event](), producer.Brokers(c.Brokers))
		require.NoError(t, err)
		base := time.UnixMilli(1_700_000_000_000)
		stamp := func(u string, seq int64) time.Time {
			return base.Add(time.Duration(seq)*time.Second + time.Duration(len(u))*time.Millisecond)
		}
		const users, per = 20, 15
		for q := int64(0); q < per; q++ {
			for i := 0; i < users; i++ {
				u := fmt.Sprintf("user-%d", i)
				require.NoError(t, p.Produce(ctx, producer.Record[string, event]{Topic: in, Key: u, Value: event{UUID: u, Seq: q}, Timestamp: stamp(u, q)}, nil))
			}
		}
		require.NoError(t, p.Flush(ctx))
		p.Close()

		client := mustClient(kafkaio.Brokers(strings.Split(c.Brokers, ",")...))
		recs, err := kordtest.ReadCommitted(ctx, client, in)
		require.NoError(t, err)
		require.Len(t, recs, users*per)
		for _, r := range recs {
			require.Equal(t, consumer.TimestampCreate, r.TimestampType, "%s[%d]@%d", r.Topic, r.Partition, r.Offset)
		}

		mu, seen := &sync.Mutex{}, map[string]time.Time{}
		j := keyed.NewJob(strings.ReplaceAll(kafkatest.TopicName(t), "/", "."), keyed.Dir(t.TempDir()), keyed.CheckpointInterval(100*time.Millisecond))
		s := keyed.FromSource(j, "events", 2, connector.Source[event](kafkaio.NewSource(client, in, serde.JSON[event](), kafkaio.Bounded())))
		o := keyed.Process(keyed.ByPartition(s), "count", 2, func() keyed.Operator[event, result] { return &timed{mu: mu, seen: seen} })
		keyed.ToSink(o, "results", connector.Sink[result](kafkaio.NewSink(client, out, serde.JSON[result](), kafkaio.Key(func(r result) string { return r.UUID }, serde.String()))))
		require.NoError(t, j.Run(ctx))
		require.Len(t, seen, users*per)
		for i := 0; i < users; i++ {
			u := fmt.Sprintf("user-%d", i)
			for q := int64(0); q < per; q++ {
				got := seen[fmt.Sprintf("%s/%d", u, q)]
				require.True(t, stamp(u, q).Equal(got), "%s/%d: the operator saw %v, the producer gave %v", u, q, got, stamp(u, q))
			}
		}
	})
}
