package consumer_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kordproject/kord/consumer"
	"github.com/kordproject/kord/internal/rig/kafkatest"
	"github.com/kordproject/kord/partitioner"
	"github.com/kordproject/kord/producer"
	"github.com/kordproject/kord/serde"
)

func TestConfigRefusesOffsetCommits(t *testing.T) {
	for _, k := range []string{"enable.auto.commit", "enable.auto.offset.store", "group.id"} {
		_, err := consumer.New(consumer.Brokers("127.0.0.1:1"), consumer.Set(k, "true"))
		require.ErrorIs(t, err, consumer.ErrConfig, k)
		require.ErrorContains(t, err, k)
	}
	_, err := consumer.New()
	require.ErrorIs(t, err, consumer.ErrConfig)
}

func TestSourcePositionsAndRanges(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		topic := c.CreateTopic(t, 3, nil)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		produceNumbers(ctx, t, c, topic, 10)

		s, err := consumer.New(consumer.Brokers(c.Brokers))
		require.NoError(t, err)
		defer s.Close()
		start, err := s.Resolve(ctx, topic, consumer.Earliest)
		require.NoError(t, err)
		require.Equal(t, []consumer.Position{{topic, 0, 0}, {topic, 1, 0}, {topic, 2, 0}}, start)
		end, err := s.Resolve(ctx, topic, consumer.Latest)
		require.NoError(t, err)
		require.Equal(t, []consumer.Position{{topic, 0, 10}, {topic, 1, 0}, {topic, 2, 0}}, end)

		// Past the end: refused, naming the partition and offset.
		err = s.Assign(ctx, []consumer.Position{{topic, 0, 11}})
		require.ErrorIs(t, err, consumer.ErrOutOfRange)
		require.ErrorContains(t, err, topic+"[0] offset 11")

		require.NoError(t, s.Assign(ctx, []consumer.Position{{topic, 0, 4}, {topic, 1, 0}, {topic, 2, 0}}))
		var got []string
		for len(got) < 6 {
			recs, err := s.Poll(ctx, 100, 100*time.Millisecond)
			require.NoError(t, err)
			for _, r := range recs {
				got = append(got, string(r.Value))
			}
		}
		require.Equal(t, []string{"4", "5", "6", "7", "8", "9"}, got)
		// Idle partitions keep their concrete position.
		require.Equal(t, []consumer.Position{{topic, 0, 10}, {topic, 1, 0}, {topic, 2, 0}}, s.Positions())

		_, err = s.Partitions(ctx, "no-such-topic-"+topic)
		require.ErrorIs(t, err, consumer.ErrUnknownTopic)
	})
}

// produceNumbers writes the values "0" to "n-1", key "k", to partition 0
// of topic.
func produceNumbers(ctx context.Context, t *testing.T, c *kafkatest.Cluster, topic string, n int) {
	p, err := producer.New(serde.String(), serde.String(), producer.Brokers(c.Brokers), producer.Partitioner(partitioner.Func(func(string, []byte, int, []int32) int32 { return 0 })))
	require.NoError(t, err)
	for i := 0; i < n; i++ {
		require.NoError(t, p.Produce(ctx, producer.Record[string, string]{Topic: topic, Key: "k", Value: strconv.Itoa(i)}, nil))
	}
	require.NoError(t, p.Close())
}

// TestPollAppend: PollAppend keeps what dst held and appends at most max
// records after it; a reader reusing one slice from poll to poll (dst[:0],
// as kafkaio's reader does) reads every record once, in order, into the
// same backing array once it is large enough.
func TestPollAppend(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		topic := c.CreateTopic(t, 1, nil)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		produceNumbers(ctx, t, c, topic, 50)
		s, err := consumer.New(consumer.Brokers(c.Brokers))
		require.NoError(t, err)
		defer s.Close()
		require.NoError(t, s.Assign(ctx, []consumer.Position{{topic, 0, 0}}))

		held := consumer.Record{Topic: "held", Offset: -7}
		var recs []consumer.Record
		for len(recs) < 2 {
			recs, err = s.PollAppend(ctx, []consumer.Record{held}, 1, 100*time.Millisecond)
			require.NoError(t, err)
		}
		require.Len(t, recs, 2, "max counts the records appended, not those dst held")
		require.Equal(t, held, recs[0], "dst's records are kept")
		require.Equal(t, "0", string(recs[1].Value))

		got := []string{"0"}
		buf := make([]consumer.Record, 0, 64)
		for len(got) < 50 {
			recs, err = s.PollAppend(ctx, buf[:0], 7, 100*time.Millisecond)
			require.NoError(t, err)
			require.LessOrEqual(t, len(recs), 7)
			if len(recs) > 0 {
				require.Same(t, &buf[:1][0], &recs[0], "the reader's slice is reused, not reallocated")
			}
			for _, r := range recs {
				got = append(got, string(r.Value))
			}
		}
		want := make([]string, 50)
		for i := range want {
			want[i] = strconv.Itoa(i)
		}
		require.Equal(t, want, got)
		require.Equal(t, []consumer.Position{{topic, 0, 50}}, s.Positions())
	})
}

// TestReachedPastTransactionMarkers: a topic written in transactions ends
// in commit markers, offsets no record carries. A reader bounded by Ends
// (the last stable offset) must still learn it reached the end: its own
// position stops at the marker, the consumer's end-of-partition event does
// not. Headers arrive as kord's own type. Behind says a partition has a
// backlog before it is read, none once it is read to the end (markers
// after the position), and one again behind an open transaction.
func TestReachedPastTransactionMarkers(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		topic := c.CreateTopic(t, 2, nil)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		p, err := producer.New(serde.String(), serde.String(), producer.Brokers(c.Brokers), producer.TransactionalID(topic))
		require.NoError(t, err)
		defer p.Close()
		require.NoError(t, p.InitTransactions(ctx))
		for txn := 0; txn < 3; txn++ {
			require.NoError(t, p.BeginTransaction())
			for i := 0; i < 5; i++ {
				require.NoError(t, p.Produce(ctx, producer.Record[string, string]{Topic: topic, Key: strconv.Itoa(i), Value: "v",
					Headers: []producer.Header{{Key: "h", Value: []byte(strconv.Itoa(txn))}}}, nil))
			}
			require.NoError(t, p.CommitTransaction(ctx))
		}
		s, err := consumer.New(consumer.Brokers(c.Brokers))
		require.NoError(t, err)
		defer s.Close()
		start, err := s.Resolve(ctx, topic, consumer.Earliest)
		require.NoError(t, err)
		require.NoError(t, s.Assign(ctx, start))
		ends, err := s.Ends(ctx)
		require.NoError(t, err)
		// Before any Poll, a partition with records has a backlog.
		for i, e := range ends {
			behind, err := s.Behind(ctx, consumer.TopicPartition{Topic: topic, Partition: e.Partition})
			require.NoError(t, err)
			require.Equal(t, e.Offset > start[i].Offset, behind, "partition %d, start %d, end %d", e.Partition, start[i].Offset, e.Offset)
		}
		n := 0
		for !s.Reached(ends) {
			recs, err := s.Poll(ctx, 100, 100*time.Millisecond)
			require.NoError(t, err)
			for _, r := range recs {
				require.Len(t, r.Headers, 1)
				require.Equal(t, "h", r.Headers[0].Key)
				require.Contains(t, []string{"0", "1", "2"}, string(r.Headers[0].Value))
			}
			n += len(recs)
			require.NoError(t, ctx.Err(), "Reached never became true after %d records (ends %v, positions %v)", n, ends, s.Positions())
		}
		require.Equal(t, 15, n)
		var behind bool
		for i, pos := range s.Positions() {
			behind = behind || pos.Offset < ends[i].Offset
		}
		require.True(t, behind, "the test did not put a marker after the last record: it proves nothing (positions %v, ends %v)", s.Positions(), ends)
		// Read to the end, markers after the position: no backlog.
		for _, e := range ends {
			behind, err := s.Behind(ctx, consumer.TopicPartition{Topic: topic, Partition: e.Partition})
			require.NoError(t, err)
			require.False(t, behind, "partition %d read to its end (positions %v, ends %v)", e.Partition, s.Positions(), ends)
		}
		// A transaction left open: its records wait, unreadable.
		require.NoError(t, p.BeginTransaction())
		require.NoError(t, p.Produce(ctx, producer.Record[string, string]{Topic: topic, Key: "open", Value: "v"}, nil))
		require.NoError(t, p.Flush(ctx))
		open := consumer.TopicPartition{Topic: topic, Partition: partitioner.KeyPartition([]byte("open"), 2)}
		require.Eventually(t, func() bool {
			behind, err := s.Behind(ctx, open)
			require.NoError(t, err)
			return behind
		}, 10*time.Second, 50*time.Millisecond, "records behind an open transaction are a backlog")
		recs, err := s.Poll(ctx, 100, 200*time.Millisecond)
		require.NoError(t, err)
		require.Empty(t, recs, "read_committed read an open transaction's record")
		require.NoError(t, p.AbortTransaction(ctx))
	})
}
