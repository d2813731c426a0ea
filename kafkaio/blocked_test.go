package kafkaio_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kordproject/kord/internal/rig/kafkatest"
	"github.com/kordproject/kord/internal/rig/syncbuf"
	"github.com/kordproject/kord/kafkaio"
	"github.com/kordproject/kord/keyed"
	"github.com/kordproject/kord/keyed/connector"
	"github.com/kordproject/kord/partitioner"
	"github.com/kordproject/kord/producer"
	"github.com/kordproject/kord/serde"
)

// wmProbe is the counter, keeping the highest watermark its task met.
type wmProbe struct {
	counter
	mu  *sync.Mutex
	max *time.Time
}

func (o *wmProbe) Process(key []byte, e event, out *keyed.Collector[result]) error {
	o.mu.Lock()
	if wm := out.Watermark(); wm.After(*o.max) {
		*o.max = wm
	}
	o.mu.Unlock()
	return o.counter.Process(key, e, out)
}

// keyFor returns a key that Kafka's Java client places on partition p of n.
func keyFor(p int32, n int, i int) string {
	for j := 0; ; j++ {
		k := fmt.Sprintf("k%d-%d", i, j)
		if partitioner.KeyPartition([]byte(k), n) == p {
			return k
		}
	}
}

// TestBlockedPartitionHoldsWatermark: partition 2 of the input holds
// records of a transaction left open, so a read_committed reader finds
// nothing to read there while partitions 0 and 1 flow. With idleness, a
// silent partition would stop holding the watermark; this one is blocked,
// not idle (its last stable offset is below its high watermark), and holds
// it as long as the transaction is open. When the transaction ends,
// committed (its records arrive) or aborted (the partition is silent and
// no longer blocked: idle), the watermark moves on.
func TestBlockedPartitionHoldsWatermark(t *testing.T) {
	for _, end := range []string{"commit", "abort"} {
		t.Run(end, func(t *testing.T) {
			kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
				in, out := c.CreateTopic(t, 3, nil), c.CreateTopic(t, 3, nil)
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()
				base := time.Now().Add(-time.Hour)
				txp, err := producer.New(serde.String(), serde.JSON[event](), producer.Brokers(c.Brokers),
					producer.TransactionalID("blocked-"+strings.ReplaceAll(in, "/", ".")))
				require.NoError(t, err)
				defer txp.Close()
				require.NoError(t, txp.InitTransactions(ctx))
				require.NoError(t, txp.BeginTransaction())
				for i := 0; i < 10; i++ {
					k := keyFor(2, 3, i)
					require.NoError(t, txp.Produce(ctx, producer.Record[string, event]{Topic: in, Key: k, Value: event{UUID: k}, Timestamp: base}, nil))
				}
				require.NoError(t, txp.Flush(ctx))

				client := mustClient(kafkaio.Brokers(strings.Split(c.Brokers, ",")...))
				var mu sync.Mutex
				var maxWm time.Time
				wm := func() time.Time { mu.Lock(); defer mu.Unlock(); return maxWm }
				var log syncbuf.Buffer
				j := keyed.NewJob(strings.ReplaceAll(kafkatest.TopicName(t), "/", "."), keyed.Dir(t.TempDir()), keyed.CheckpointInterval(200*time.Millisecond),
					keyed.Logger(logTo(&log, slog.LevelInfo, nil)))
				s := keyed.FromSource(j, "events", 1, connector.Source[event](kafkaio.NewSource(client, in, serde.JSON[event]()))).
					Watermarks(10 * time.Millisecond).Idleness(300 * time.Millisecond)
				o := keyed.Process(keyed.ByPartition(s), "count", 1, func() keyed.Operator[event, result] { return &wmProbe{mu: &mu, max: &maxWm} })
				keyed.ToSink(o, "results", connector.Sink[result](kafkaio.NewSink(client, out, serde.JSON[result](), kafkaio.Key(func(r result) string { return r.UUID }, serde.String()))))
				rctx, stop := context.WithCancel(ctx)
				done := make(chan error, 1)
				go func() { done <- j.Run(rctx) }()

				// Partitions 0 and 1 flow, each key once, times rising.
				p, err := producer.New(serde.String(), serde.JSON[event](), producer.Brokers(c.Brokers))
				require.NoError(t, err)
				defer p.Close()
				var sent atomic.Int64
				feed := func(d time.Duration) {
					for until := time.Now().Add(d); time.Now().Before(until); {
						n := sent.Add(1)
						k := keyFor(int32(n%2), 3, int(n)+1000)
						require.NoError(t, p.Produce(ctx, producer.Record[string, event]{Topic: in, Key: k, Value: event{UUID: k},
							Timestamp: base.Add(time.Duration(n) * time.Millisecond)}, nil))
						time.Sleep(2 * time.Millisecond)
					}
					require.NoError(t, p.Flush(ctx))
				}
				feed(3 * time.Second)
				held := wm()
				t.Logf("with the transaction open, after %d records on partitions 0 and 1: watermark %v", sent.Load(), held)
				require.True(t, held.IsZero(), "the blocked partition did not hold the watermark: %v", held)

				if end == "commit" {
					require.NoError(t, txp.CommitTransaction(ctx))
				} else {
					require.NoError(t, txp.AbortTransaction(ctx))
				}
				// The probe sees the watermark only as records arrive: feed
				// until it moves (a fixed 2 s feed ended before a loaded CI
				// machine's reader had passed the abort's marker, and the
				// watermark, moved after the last record, went unseen).
				for until := time.Now().Add(30 * time.Second); wm().IsZero() && time.Now().Before(until); {
					feed(100 * time.Millisecond)
				}
				require.False(t, wm().IsZero(), "the watermark did not move after the transaction's %s", end)
				t.Logf("after the %s: watermark %v", end, wm())
				stop()
				require.NoError(t, <-done, "%s", &log)
			})
		})
	}
}
