package consumer_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kordproject/kord/consumer"
	"github.com/kordproject/kord/internal/rdkbatch"
	"github.com/kordproject/kord/internal/rig/kafkatest"
)

// The two read paths: a Source reads its consumer's queue in batches
// (internal/rdkbatch) unless built with the kordnobatch tag, and record by
// record (one Consumer.Poll each) with it. These tests read the same
// topics on both in one binary (consumer.ReadRecordByRecord puts a Source
// on the second) and require the same: the records field by field (nil
// and empty told apart), positions, partition ends, errors and their
// messages, waits. Built with the tag, both sides read record by record.

// path is one of the two, named.
type path struct {
	name   string
	source func(t *testing.T, c *kafkatest.Cluster, opts ...consumer.Opt) *consumer.Source
}

var paths = []path{
	{"batches", func(t *testing.T, c *kafkatest.Cluster, opts ...consumer.Opt) *consumer.Source {
		s := newSource(t, c, opts...)
		require.Equal(t, rdkbatch.Enabled, consumer.ReadsInBatches(s))
		return s
	}},
	{"records", func(t *testing.T, c *kafkatest.Cluster, opts ...consumer.Opt) *consumer.Source {
		s := newSource(t, c, opts...)
		consumer.ReadRecordByRecord(s)
		require.False(t, consumer.ReadsInBatches(s))
		return s
	}},
}

// TestBatchPathBuiltIn: a Source reads in batches exactly when the batch
// path is built in (no kordnobatch tag): the batch reader does not fall
// back to Poll silently.
func TestBatchPathBuiltIn(t *testing.T) {
	s, err := consumer.New(consumer.Brokers("127.0.0.1:1"))
	require.NoError(t, err)
	defer s.Close()
	require.Equal(t, rdkbatch.Enabled, consumer.ReadsInBatches(s))
}

// reading is what one path read: records per partition, in order.
type reading map[int32][]consumer.Record

// readTo reads s until it has reached ends, with PollAppend onto a slice
// holding one record of its own, asking for maxes in turn (1 record at a
// time, a few, more than a batch read takes): every call keeps the held
// record and appends at most max after it.
func readTo(t *testing.T, ctx context.Context, s *consumer.Source, ends []consumer.Position) reading {
	t.Helper()
	held := consumer.Record{Topic: "held", Offset: -7}
	got := reading{}
	maxes := []int{1, 7, 100, 1000}
	for i := 0; !s.Reached(ends); i++ {
		require.NoError(t, ctx.Err(), "read %v, ends %v, positions %v", got, ends, s.Positions())
		max := maxes[i%len(maxes)]
		recs, err := s.PollAppend(ctx, []consumer.Record{held}, max, 100*time.Millisecond)
		require.NoError(t, err)
		require.Equal(t, held, recs[0])
		require.LessOrEqual(t, len(recs)-1, max)
		for _, r := range recs[1:] {
			got[r.Partition] = append(got[r.Partition], r)
		}
	}
	return got
}

// TestReadPathsAgree writes records of every shape (null and empty keys,
// values and header values, repeated header keys, set timestamps) over
// three partitions, plain and in a committed and an aborted transaction,
// and reads them back on both paths: the same records, field by field, in
// the same order per partition; the same positions, progress (past the
// last commit markers) and last record times.
func TestReadPathsAgree(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		topic := c.CreateTopic(t, 3, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		base := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
		n := 0
		next := func(p int32) *kgo.Record {
			n++
			r := &kgo.Record{Topic: topic, Partition: p, Timestamp: base.Add(time.Duration(n) * time.Second)}
			switch n % 4 {
			case 0: // a null key and value, no headers
			case 1:
				r.Key, r.Value = []byte{}, []byte{}
				r.Headers = []kgo.RecordHeader{{Key: "empty", Value: []byte{}}, {Key: "null"}}
			case 2:
				r.Key = []byte(fmt.Sprintf("key-%d", n))
				r.Value = bytes.Repeat([]byte{byte(n)}, 1+n*37%3000)
				r.Headers = []kgo.RecordHeader{{Key: "trace", Value: []byte(fmt.Sprint(n))}, {Key: "trace", Value: []byte("again")}}
			case 3:
				r.Key = []byte(fmt.Sprintf("key-%d", n))
				r.Value = []byte(strings.Repeat("v", n))
			}
			return r
		}
		write := func(cl *kgo.Client, count int) {
			for i := 0; i < count; i++ {
				require.NoError(t, cl.ProduceSync(ctx, next(int32(i%3))).FirstErr())
			}
		}
		plain := c.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
		write(plain, 30)
		txn := c.Client(t, kgo.TransactionalID(kafkatest.TopicName(t)), kgo.RecordPartitioner(kgo.ManualPartitioner()))
		for _, end := range []kgo.TransactionEndTry{kgo.TryCommit, kgo.TryAbort} {
			require.NoError(t, txn.BeginTransaction())
			write(txn, 12)
			require.NoError(t, txn.EndTransaction(ctx, end))
		}
		write(plain, 9)
		// 30+12+12+9 records and two markers a partition: wait until the
		// ends (last stable offsets) count them all.
		probe := newSource(t, c)
		start, err := probe.Resolve(ctx, topic, consumer.Earliest)
		require.NoError(t, err)
		require.NoError(t, probe.Assign(ctx, start))
		var ends []consumer.Position
		require.Eventually(t, func() bool {
			ends, err = probe.Ends(ctx)
			require.NoError(t, err)
			total := int64(0)
			for _, e := range ends {
				total += e.Offset
			}
			return total == 63+6
		}, 30*time.Second, 50*time.Millisecond)

		var first reading
		var firstPos []consumer.Position
		var firstLag []consumer.PartitionLag
		for _, p := range paths {
			s := p.source(t, c)
			require.NoError(t, s.Assign(ctx, start))
			got := readTo(t, ctx, s, ends)
			pos := s.Positions()
			lag, err := s.Lag(ctx)
			require.NoError(t, err)
			for i, l := range lag {
				require.Zero(t, l.Behind, "%s: partition %d", p.name, l.Partition)
				require.Equal(t, ends[i].Offset, s.Progress(l.TopicPartition), "%s: read past the markers", p.name)
			}
			count := 0
			for _, recs := range got {
				count += len(recs)
			}
			require.Equal(t, 30+12+9, count, "%s: every record written and committed, once", p.name)
			if first == nil {
				first, firstPos, firstLag = got, pos, lag
				continue
			}
			require.Equal(t, firstPos, pos, p.name)
			require.Equal(t, firstLag, lag, p.name)
			for part := int32(0); part < 3; part++ {
				require.Equal(t, len(first[part]), len(got[part]), "%s: partition %d", p.name, part)
				for i := range first[part] {
					// reflect.DeepEqual: nil and empty slices differ.
					require.Equal(t, first[part][i], got[part][i], "%s: partition %d record %d", p.name, part, i)
				}
			}
		}
		// The test reads what it means to: null and empty told apart.
		var sawNull, sawEmpty bool
		for _, recs := range first {
			for _, r := range recs {
				require.Equal(t, consumer.TimestampCreate, r.TimestampType)
				require.False(t, r.Timestamp.Before(base))
				for _, h := range r.Headers {
					sawNull = sawNull || h.Key == "null" && h.Value == nil
					sawEmpty = sawEmpty || h.Key == "empty" && h.Value != nil && len(h.Value) == 0
				}
			}
		}
		require.True(t, sawNull && sawEmpty)
	})
}

// TestReadPathsReassign: records already fetched for an assignment are not
// returned after the partitions are assigned again (kord seeks by
// assigning), on either path: a partition dropped from the assignment
// returns no more records, and one assigned from another offset goes on
// from there, every record once, in order.
func TestReadPathsReassign(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		topic := c.CreateTopic(t, 2, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cl := c.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
		var recs []*kgo.Record
		for i := 0; i < 500; i++ {
			recs = append(recs, &kgo.Record{Topic: topic, Partition: 0, Value: []byte(fmt.Sprint(i))})
			if i < 100 {
				recs = append(recs, &kgo.Record{Topic: topic, Partition: 1, Value: []byte(fmt.Sprint(i))})
			}
		}
		require.NoError(t, cl.ProduceSync(ctx, recs...).FirstErr())
		// readFrom reads, after an assignment from, until the
		// partitions it names stand at their ends, checking each
		// record follows the last of its partition.
		readFrom := func(s *consumer.Source, what string, from, ends []consumer.Position) {
			t.Helper()
			next := map[int32]int64{}
			for _, p := range from {
				next[p.Partition] = p.Offset
			}
			for !s.Reached(ends) {
				require.NoError(t, ctx.Err(), "%s: positions %v", what, s.Positions())
				got, err := s.Poll(ctx, 50, 100*time.Millisecond)
				require.NoError(t, err)
				for _, r := range got {
					want, ok := next[r.Partition]
					require.True(t, ok, "%s: a record of partition %d, not assigned", what, r.Partition)
					require.Equal(t, want, r.Offset, "%s: partition %d", what, r.Partition)
					require.Equal(t, fmt.Sprint(r.Offset), string(r.Value), what)
					next[r.Partition]++
				}
			}
			require.Equal(t, ends, s.Positions(), what)
		}
		for _, p := range paths {
			// Fetches that do not wait out 500 ms at a partition's end
			// before an assignment changes.
			s := p.source(t, c, consumer.Set("fetch.wait.max.ms", "10"))
			both := []consumer.Position{{topic, 0, 0}, {topic, 1, 0}}
			require.NoError(t, s.Assign(ctx, both))
			var got []consumer.Record
			for len(got) == 0 {
				var err error
				got, err = s.Poll(ctx, 10, 100*time.Millisecond)
				require.NoError(t, err)
			}
			// librdkafka has fetched ahead of what was read by now.
			from := []consumer.Position{{topic, 0, 400}}
			require.NoError(t, s.Assign(ctx, from))
			readFrom(s, p.name+": partition 0 from 400", from, []consumer.Position{{topic, 0, 500}})
			from = []consumer.Position{{topic, 0, 100}, {topic, 1, 50}}
			require.NoError(t, s.Assign(ctx, from))
			readFrom(s, p.name+": from 100 and 50", from, []consumer.Position{{topic, 0, 500}, {topic, 1, 100}})
		}
	})
}

// TestReadPathsErrors: an offset out of range under a reader fails Poll
// with the same error, message and all, on both paths, with no record; a
// cancelled context ends Poll with its error; the wait for the first
// record is not ended by a partition's end or a statistics event, and
// ends at the deadline.
func TestReadPathsErrors(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		topic := c.CreateTopic(t, 2, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cl := c.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
		for i := 0; i < 3; i++ {
			require.NoError(t, cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: 0, Value: []byte("v")}).FirstErr())
		}
		var msgs []string
		for _, p := range paths {
			// Statistics events every 10 ms on the queue, which Poll
			// drops.
			s := p.source(t, c, consumer.Set("statistics.interval.ms", "10"))
			require.NoError(t, s.Assign(ctx, []consumer.Position{{topic, 0, 3}, {topic, 1, 0}}))
			// Both partitions at their ends: the wait runs to the
			// deadline each time (the partitions' ends come within
			// the first, or the second after a fetch's long poll).
			for i := 0; i < 3; i++ {
				start := time.Now()
				recs, err := s.Poll(ctx, 10, 300*time.Millisecond)
				took := time.Since(start)
				require.NoError(t, err)
				require.Empty(t, recs)
				require.GreaterOrEqual(t, took, 290*time.Millisecond, p.name)
				require.Less(t, took, 3*time.Second, p.name)
			}

			done, stop := context.WithCancel(ctx)
			stop()
			recs, err := s.Poll(done, 10, time.Second)
			require.ErrorIs(t, err, context.Canceled, p.name)
			require.Empty(t, recs)

			// The log moves from under a reader: its next offset is
			// past the end. (A fresh Source: librdkafka 2.11 asserts
			// when a partition is unassigned twice before its fetcher
			// has stopped, as two assignments in a row, without
			// Assign's requests between them, can do: librdkafka
			// issue #5573, on either path.)
			s = p.source(t, c)
			require.NoError(t, s.Assign(ctx, []consumer.Position{{topic, 0, 0}}))
			require.NoError(t, consumer.AssignPast(s, topic, 0, 1000))
			for err = nil; err == nil; {
				require.NoError(t, ctx.Err(), p.name)
				recs, err = s.Poll(ctx, 10, 100*time.Millisecond)
				require.Empty(t, recs, p.name)
			}
			t.Logf("%s: %v", p.name, err)
			require.True(t, strings.HasPrefix(err.Error(), "consumer: "), err.Error())
			msgs = append(msgs, err.Error())
		}
		require.Equal(t, msgs[0], msgs[1])
	})
}

// TestReadPathsClientErrors: with no broker answering, Poll on either path
// returns no error and no record, and takes in the client's errors with
// their codes (logged, kept to explain a later timeout), as it has always
// done.
func TestReadPathsClientErrors(t *testing.T) {
	for _, p := range paths {
		t.Run(p.name, func(t *testing.T) {
			var logs logBuffer
			s, err := consumer.New(consumer.Brokers("127.0.0.1:1"), consumer.Logger(slog.New(slog.NewJSONHandler(&logs, nil))))
			require.NoError(t, err)
			defer s.Close()
			if p.name == "records" {
				consumer.ReadRecordByRecord(s)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			for {
				recs, err := s.Poll(ctx, 10, 100*time.Millisecond)
				require.NoError(t, err)
				require.Empty(t, recs)
				down := false
				for _, l := range logs.lines(t, "kord source: client error") {
					down = down || strings.Contains(fmt.Sprint(l["err"]), "brokers are down")
				}
				if down {
					break
				}
			}
		})
	}
}

// TestReadPathsClose: Close ends a Source part-way through its records,
// with more fetched than read, promptly; Poll after it fails on the batch
// path (the per-record path must not be called then).
func TestReadPathsClose(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		topic := c.CreateTopic(t, 1, nil)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		produceNumbers(ctx, t, c, topic, 200)
		for _, p := range paths {
			s := p.source(t, c)
			require.NoError(t, s.Assign(ctx, []consumer.Position{{topic, 0, 0}}))
			var got []consumer.Record
			for len(got) == 0 {
				var err error
				got, err = s.Poll(ctx, 5, 100*time.Millisecond)
				require.NoError(t, err)
			}
			start := time.Now()
			require.NoError(t, s.Close())
			require.Less(t, time.Since(start), 10*time.Second, p.name)
			if consumer.ReadsInBatches(s) {
				_, err := s.Poll(ctx, 5, 0)
				require.Error(t, err)
			}
			require.NoError(t, s.Close(), "a second Close does nothing")
		}
	})
}
