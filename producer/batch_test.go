package producer_test

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kordproject/kord/internal/rdkproduce"
	"github.com/kordproject/kord/internal/rig/kafkatest"
	"github.com/kordproject/kord/partitioner"
	"github.com/kordproject/kord/producer"
	"github.com/kordproject/kord/serde"
)

// TestProduceBatch: ProduceBatch on a transactional producer without
// delivery reports queues what Produce would, in order: an aborted batch
// is never read; a committed one is, every record on its partition (the
// one it names, or Java's by its key), with its headers (a null value
// among them), its timestamp and its null value, in order per key on each
// partition, across
// a queue far smaller than a batch (librdkafka refuses records while it is
// full: the rest are queued as it drains). A record too large fails alone,
// as recs[n] with ErrRecordTooLarge, the records before it queued and none
// after it; the caller goes on past it. With the batch path built in, a
// batch of 1,000 takes far fewer cgo calls than records (the per-record
// path takes one or more each).
func TestProduceBatch(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		const parts = 3
		out := c.CreateTopic(t, parts, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		p := newBytesProducer(t, c, producer.TransactionalID(kafkatest.TopicName(t)), producer.CommitReports(),
			producer.Set("queue.buffering.max.messages", "300"), producer.Set("message.max.bytes", "20000"))
		require.NoError(t, p.InitTransactions(ctx))

		require.NoError(t, p.BeginTransaction())
		aborted := make([]producer.Record[string, []byte], 500)
		for i := range aborted {
			aborted[i] = producer.Record[string, []byte]{Topic: out, Key: fmt.Sprintf("k%d", i%7), Value: []byte("aborted")}
		}
		n, err := p.ProduceBatch(ctx, aborted)
		require.NoError(t, err)
		require.Equal(t, len(aborted), n)
		require.NoError(t, p.AbortTransaction(ctx))

		require.NoError(t, p.BeginTransaction())
		const total, tooLarge = 5000, 2345
		t0 := time.UnixMilli(1_700_000_000_000)
		two := int32(2)
		recs := make([]producer.Record[string, []byte], total)
		for i := range recs {
			r := producer.Record[string, []byte]{Topic: out, Key: fmt.Sprintf("k%d", i%11), Value: []byte(strconv.Itoa(i))}
			if i%10 == 3 {
				r.Partition = &two
			}
			if i%3 == 0 {
				r.Headers = []producer.Header{{Key: "i", Value: []byte(strconv.Itoa(i))}, {Key: "null", Value: nil}}
			}
			if i%5 == 0 {
				r.Timestamp = t0.Add(time.Duration(i) * time.Millisecond)
			}
			if i%97 == 0 {
				r.Value = nil
			}
			recs[i] = r
		}
		recs[tooLarge].Value = make([]byte, 30_000)
		var calls int64
		for at := 0; at < total; {
			end := min(at+1000, total)
			c0 := runtime.NumCgoCall()
			n, err := p.ProduceBatch(ctx, recs[at:end])
			calls += runtime.NumCgoCall() - c0
			if at+n == tooLarge {
				require.ErrorIs(t, err, producer.ErrRecordTooLarge)
				at += n + 1
				continue
			}
			require.NoError(t, err)
			require.Equal(t, end-at, n)
			at = end
		}
		require.NoError(t, p.Flush(ctx))
		require.NoError(t, p.CommitTransaction(ctx))
		if rdkproduce.Enabled {
			// Each batch is one call, and one more each time the queue
			// was full; the wait between them calls nothing.
			require.Less(t, calls, int64(total/4), "cgo calls for %d records in batches", total)
		} else {
			require.GreaterOrEqual(t, calls, int64(total-1), "cgo calls for %d records one at a time", total-1)
		}

		got := c.ReadExactly(t, out, total-1)
		last := map[string]int{}
		for _, r := range got {
			var i int
			if r.Value == nil {
				// A null value: which record it is shows in its header
				// or its key's sequence; only multiples of 97 have one.
				i = -1
			} else {
				v, err := strconv.Atoi(string(r.Value))
				require.NoError(t, err, "an aborted record was read: %q", r.Value)
				i = v
			}
			if i < 0 {
				continue
			}
			require.NotEqual(t, tooLarge, i, "the record too large was written")
			want := partitioner.KeyPartition(r.Key, parts)
			if i%10 == 3 {
				want = 2
			}
			require.Equal(t, want, r.Partition, "record %d", i)
			// In order per key on each partition (a key's records named
			// to partition 2 are a sequence of their own).
			kp := fmt.Sprintf("%s/%d", r.Key, r.Partition)
			if prev, ok := last[kp]; ok {
				require.Greater(t, i, prev, "key %s out of order on partition %d", r.Key, r.Partition)
			}
			last[kp] = i
			if i%3 == 0 {
				require.Len(t, r.Headers, 2, "record %d", i)
				require.Equal(t, "i", r.Headers[0].Key)
				require.Equal(t, strconv.Itoa(i), string(r.Headers[0].Value))
				require.Equal(t, "null", r.Headers[1].Key)
				require.Nil(t, r.Headers[1].Value, "record %d's null header", i)
			} else {
				require.Empty(t, r.Headers, "record %d", i)
			}
			if i%5 == 0 {
				require.Equal(t, t0.Add(time.Duration(i)*time.Millisecond).UnixMilli(), r.Timestamp.UnixMilli(), "record %d", i)
			}
		}
		nulls := 0
		for _, r := range got {
			if r.Value == nil {
				nulls++
			}
		}
		require.Equal(t, (total+96)/97, nulls, "null values")
		require.GreaterOrEqual(t, len(last), 11)
	})
}

// TestProduceBatchWithReports: with delivery reports on, ProduceBatch
// queues the records one Produce at a time, and they are delivered.
func TestProduceBatchWithReports(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		out := c.CreateTopic(t, 2, nil)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		p, err := producer.New(serde.String(), serde.String(), producer.Brokers(c.Brokers))
		require.NoError(t, err)
		defer p.Close()
		recs := make([]producer.Record[string, string], 100)
		for i := range recs {
			recs[i] = producer.Record[string, string]{Topic: out, Key: fmt.Sprintf("k%d", i%5), Value: strconv.Itoa(i)}
		}
		n, err := p.ProduceBatch(ctx, recs)
		require.NoError(t, err)
		require.Equal(t, len(recs), n)
		require.NoError(t, p.Flush(ctx))
		require.Len(t, c.ReadAll(t, out, len(recs), false, 30*time.Second), len(recs))
	})
}
