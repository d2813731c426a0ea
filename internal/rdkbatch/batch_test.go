//go:build cgo && !kordnobatch

package rdkbatch_test

import (
	"bytes"
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kordproject/kord/internal/rdkbatch"
	"github.com/kordproject/kord/internal/rig/kafkatest"
)

// newConsumer is a consumer set up as consumer.Source sets up its own:
// manual assignment, read_committed, partition ends reported, offsets out
// of range an error, librdkafka's log on a channel (drained here).
func newConsumer(t testing.TB, brokers string, extra kafka.ConfigMap) *kafka.Consumer {
	t.Helper()
	cm := kafka.ConfigMap{
		"bootstrap.servers":        brokers,
		"group.id":                 "kord.rdkbatch.test",
		"client.id":                "kord",
		"enable.auto.commit":       false,
		"enable.auto.offset.store": false,
		"enable.partition.eof":     true,
		"auto.offset.reset":        "error",
		"isolation.level":          "read_committed",
		"allow.auto.create.topics": "false",
		"fetch.queue.backoff.ms":   "10",
		"go.logs.channel.enable":   true,
	}
	for k, v := range extra {
		cm[k] = v
	}
	c, err := kafka.NewConsumer(&cm)
	require.NoError(t, err)
	logs := c.Logs()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range logs {
		}
	}()
	t.Cleanup(func() {
		_ = c.Close()
		<-done
	})
	return c
}

func assign(t testing.TB, c *kafka.Consumer, topic string, offsets map[int32]int64) {
	t.Helper()
	var tps []kafka.TopicPartition
	for p, o := range offsets {
		tps = append(tps, kafka.TopicPartition{Topic: &topic, Partition: p, Offset: kafka.Offset(o)})
	}
	require.NoError(t, c.Assign(tps))
}

// fromPoll is a *kafka.Message in the batch path's form.
func fromPoll(m *kafka.Message) rdkbatch.Message {
	epoch := int32(-1)
	if m.TopicPartition.LeaderEpoch != nil {
		epoch = *m.TopicPartition.LeaderEpoch
	}
	return rdkbatch.Message{Topic: *m.TopicPartition.Topic, Partition: m.TopicPartition.Partition, Offset: int64(m.TopicPartition.Offset),
		Key: m.Key, Value: m.Value, Headers: m.Headers, Timestamp: m.Timestamp, TimestampType: m.TimestampType, LeaderEpoch: epoch}
}

// reading is what a reader read: messages per partition in order, the
// last end reached per partition, and the errors.
type reading struct {
	msgs map[int32][]rdkbatch.Message
	eof  map[int32]int64
	errs []kafka.Error
}

func (r *reading) count() int {
	n := 0
	for _, ms := range r.msgs {
		n += len(ms)
	}
	return n
}

// done reports whether r has want messages and has reached ends on every
// partition of ends.
func (r *reading) done(want int, ends map[int32]int64) bool {
	if r.count() < want {
		return false
	}
	for p, e := range ends {
		if got, ok := r.eof[p]; !ok || got < e {
			return false
		}
	}
	return true
}

func newReading() *reading {
	return &reading{msgs: map[int32][]rdkbatch.Message{}, eof: map[int32]int64{}}
}

// pollAll reads with Consumer.Poll, as consumer.Source does, until done.
func pollAll(t *testing.T, c *kafka.Consumer, want int, ends map[int32]int64) *reading {
	t.Helper()
	r := newReading()
	deadline := time.Now().Add(time.Minute)
	for !r.done(want, ends) {
		require.True(t, time.Now().Before(deadline), "poll: %d of %d records, ends %v of %v", r.count(), want, r.eof, ends)
		switch e := c.Poll(100).(type) {
		case *kafka.Message:
			require.NoError(t, e.TopicPartition.Error)
			r.msgs[e.TopicPartition.Partition] = append(r.msgs[e.TopicPartition.Partition], fromPoll(e))
		case kafka.PartitionEOF:
			r.eof[e.Partition] = int64(e.Offset)
		case kafka.Error:
			r.errs = append(r.errs, e)
		}
	}
	return r
}

// readAll reads with the batch reader until done.
func readAll(t *testing.T, rd *rdkbatch.Reader, reuse bool, want int, ends map[int32]int64) *reading {
	t.Helper()
	r := newReading()
	b := &rdkbatch.Batch{Reuse: reuse}
	deadline := time.Now().Add(time.Minute)
	for !r.done(want, ends) {
		require.True(t, time.Now().Before(deadline), "batch: %d of %d records, ends %v of %v", r.count(), want, r.eof, ends)
		require.NoError(t, rd.Read(b, 100*time.Millisecond))
		for _, m := range b.Messages {
			if reuse { // the next Read overwrites the bytes
				m = clone(m)
			}
			r.msgs[m.Partition] = append(r.msgs[m.Partition], m)
		}
		for _, e := range b.EOFs {
			r.eof[e.Partition] = e.Offset
		}
		if b.Err != nil {
			r.errs = append(r.errs, b.Err.(kafka.Error))
		}
	}
	return r
}

func clone(m rdkbatch.Message) rdkbatch.Message {
	cp := func(b []byte) []byte {
		if b == nil {
			return nil
		}
		return append([]byte{}, b...)
	}
	m.Key, m.Value = cp(m.Key), cp(m.Value)
	if m.Headers != nil {
		hs := make([]kafka.Header, len(m.Headers))
		for i, h := range m.Headers {
			hs[i] = kafka.Header{Key: h.Key, Value: cp(h.Value)}
		}
		m.Headers = hs
	}
	return m
}

// same fails t unless a and b are the same message, field by field, nil
// and empty told apart.
func same(t *testing.T, a, b rdkbatch.Message, what string) {
	t.Helper()
	require.Equal(t, a.Topic, b.Topic, what)
	require.Equal(t, a.Partition, b.Partition, what)
	require.Equal(t, a.Offset, b.Offset, what)
	sameBytes(t, a.Key, b.Key, what+" key")
	sameBytes(t, a.Value, b.Value, what+" value")
	require.Equal(t, len(a.Headers), len(b.Headers), what+" headers")
	require.Equal(t, a.Headers == nil, b.Headers == nil, what+" headers nil")
	for i := range a.Headers {
		require.Equal(t, a.Headers[i].Key, b.Headers[i].Key, what)
		sameBytes(t, a.Headers[i].Value, b.Headers[i].Value, fmt.Sprintf("%s header %d", what, i))
	}
	require.True(t, a.Timestamp.Equal(b.Timestamp), "%s: timestamp %v, %v", what, a.Timestamp, b.Timestamp)
	require.Equal(t, a.Timestamp.IsZero(), b.Timestamp.IsZero(), what)
	require.Equal(t, a.TimestampType, b.TimestampType, what)
	require.Equal(t, a.LeaderEpoch, b.LeaderEpoch, what)
}

func sameBytes(t *testing.T, a, b []byte, what string) {
	t.Helper()
	require.Equal(t, a == nil, b == nil, "%s: nil %v, %v", what, a == nil, b == nil)
	require.True(t, bytes.Equal(a, b), "%s: %q, %q", what, a, b)
}

// produced is one record as written.
type produced struct {
	partition int32
	key, val  []byte
	hdrs      []kgo.RecordHeader
	ts        time.Time
}

// TestBatchReadsWhatPollReads writes records with keys, values, headers
// and timestamps across three partitions, plain and in committed and
// aborted transactions, and reads them back under read_committed from a
// manual assignment twice: with Consumer.Poll and with the batch reader
// (once allocating each batch, once reusing its buffer). Both see the same
// records, field by field and in the same order per partition: the
// written ones, no aborted record and no control record. Both reach the
// same partition ends, and the batch reader's consumer is positioned at
// each partition's end, past the last commit markers, as Poll's is.
func TestBatchReadsWhatPollReads(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		topic := c.CreateTopic(t, 3, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		base := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
		var want []produced
		n := 0
		next := func(p int32) *kgo.Record {
			n++
			r := &kgo.Record{Topic: topic, Partition: p, Timestamp: base.Add(time.Duration(n) * time.Second)}
			switch n % 4 {
			case 0: // a null key, a null value (a tombstone), no headers
			case 1:
				r.Key, r.Value = []byte{}, []byte{} // empty, not null
				r.Headers = []kgo.RecordHeader{{Key: "empty", Value: []byte{}}, {Key: "null"}}
			case 2:
				r.Key = []byte(fmt.Sprintf("key-%d", n))
				r.Value = bytes.Repeat([]byte{byte(n)}, 1+n*37%3000)
				r.Headers = []kgo.RecordHeader{{Key: "trace", Value: []byte(fmt.Sprint(n))}, {Key: "__value_schema_id", Value: []byte{0, 1, 2}}, {Key: "trace", Value: []byte("again")}}
			case 3:
				r.Key = []byte(fmt.Sprintf("key-%d", n))
				r.Value = []byte(strings.Repeat("v", n))
			}
			return r
		}
		keep := func(r *kgo.Record) {
			want = append(want, produced{r.Partition, r.Key, r.Value, r.Headers, r.Timestamp})
		}
		plain := c.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
		write := func(cl *kgo.Client, count int, kept bool) {
			for i := 0; i < count; i++ {
				r := next(int32(i % 3))
				require.NoError(t, cl.ProduceSync(ctx, r).FirstErr())
				if kept {
					keep(r)
				}
			}
		}
		write(plain, 30, true)
		txn := c.Client(t, kgo.TransactionalID(kafkatest.TopicName(t)), kgo.RecordPartitioner(kgo.ManualPartitioner()))
		for _, commit := range []bool{true, false, true, false} {
			require.NoError(t, txn.BeginTransaction())
			write(txn, 12, commit)
			require.NoError(t, txn.EndTransaction(ctx, map[bool]kgo.TransactionEndTry{true: kgo.TryCommit, false: kgo.TryAbort}[commit]))
		}
		write(plain, 9, true)
		// The last markers are written after EndTxn answers: wait until
		// the ends stand still at the high watermark.
		probe := newConsumer(t, c.Brokers, nil)
		ends := map[int32]int64{}
		require.Eventually(t, func() bool {
			for p := int32(0); p < 3; p++ {
				lo, hi, err := probe.QueryWatermarkOffsets(topic, p, 5000)
				if err != nil || lo != 0 {
					return false
				}
				ends[p] = hi
			}
			return true
		}, 30*time.Second, 50*time.Millisecond)
		total := int64(0)
		for _, e := range ends {
			total += e
		}
		// 39 plain records, 48 transactional (half aborted), and a marker
		// per partition per transaction.
		require.Equal(t, int64(39+48+4*3), total, "ends %v", ends)

		from := map[int32]int64{0: 0, 1: 0, 2: 0}
		pc := newConsumer(t, c.Brokers, nil)
		assign(t, pc, topic, from)
		polled := pollAll(t, pc, len(want), ends)

		for _, reuse := range []bool{false, true} {
			bc := newConsumer(t, c.Brokers, nil)
			assign(t, bc, topic, from)
			rd, err := rdkbatch.New(bc, 7) // small batches: many reads, batches across partitions
			require.NoError(t, err)
			read := readAll(t, rd, reuse, len(want), ends)
			rd.Close()

			require.Empty(t, read.errs)
			require.Equal(t, polled.eof, read.eof)
			require.Equal(t, ends, read.eof)
			for p := int32(0); p < 3; p++ {
				require.Equal(t, len(polled.msgs[p]), len(read.msgs[p]), "partition %d", p)
				for i := range polled.msgs[p] {
					same(t, polled.msgs[p][i], read.msgs[p][i], fmt.Sprintf("reuse %v partition %d record %d", reuse, p, i))
				}
			}
			pos, err := bc.Position([]kafka.TopicPartition{{Topic: &topic, Partition: 0}, {Topic: &topic, Partition: 1}, {Topic: &topic, Partition: 2}})
			require.NoError(t, err)
			for _, tp := range pos {
				require.Equal(t, ends[tp.Partition], int64(tp.Offset), "position of partition %d", tp.Partition)
			}
		}

		// And both read what was written, and nothing else.
		var wantBy [3][]produced
		for _, w := range want {
			wantBy[w.partition] = append(wantBy[w.partition], w)
		}
		for p := int32(0); p < 3; p++ {
			got := polled.msgs[p]
			require.Len(t, got, len(wantBy[p]), "partition %d", p)
			for i, w := range wantBy[p] {
				g := got[i]
				what := fmt.Sprintf("partition %d record %d (offset %d)", p, i, g.Offset)
				require.Equal(t, topic, g.Topic)
				sameBytes(t, w.key, g.Key, what+" key")
				sameBytes(t, w.val, g.Value, what+" value")
				require.True(t, w.ts.Equal(g.Timestamp), what)
				require.Equal(t, kafka.TimestampCreateTime, g.TimestampType, what)
				require.Len(t, g.Headers, len(w.hdrs), what)
				for j, h := range w.hdrs {
					require.Equal(t, h.Key, g.Headers[j].Key, what)
					require.True(t, bytes.Equal(h.Value, g.Headers[j].Value), what)
				}
				if i > 0 {
					require.Greater(t, g.Offset, got[i-1].Offset, what)
				}
			}
		}
	})
}

// TestLogAppendTime: a topic whose broker sets the timestamps; both paths
// say so, with the same times.
func TestLogAppendTime(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		topic := c.CreateTopic(t, 1, map[string]string{"message.timestamp.type": "LogAppendTime"})
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cl := c.Client(t)
		old := time.Unix(1000, 0)
		for i := 0; i < 5; i++ {
			require.NoError(t, cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte("v"), Timestamp: old}).FirstErr())
		}
		ends := map[int32]int64{0: 5}
		pc := newConsumer(t, c.Brokers, nil)
		assign(t, pc, topic, map[int32]int64{0: 0})
		polled := pollAll(t, pc, 5, ends)
		bc := newConsumer(t, c.Brokers, nil)
		assign(t, bc, topic, map[int32]int64{0: 0})
		rd, err := rdkbatch.New(bc, 100)
		require.NoError(t, err)
		defer rd.Close()
		read := readAll(t, rd, false, 5, ends)
		for i := range polled.msgs[0] {
			same(t, polled.msgs[0][i], read.msgs[0][i], fmt.Sprint("record ", i))
			if polled.msgs[0][i].TimestampType != kafka.TimestampLogAppendTime {
				t.Skipf("%s does not keep LogAppendTime (%v)", c.Name, polled.msgs[0][i].TimestampType)
			}
			require.True(t, read.msgs[0][i].Timestamp.After(old))
		}
	})
}

// TestEndOfPartition: an empty partition and one read to its end each
// give one end, at the partition's end, and a batch of only ends holds no
// message.
func TestEndOfPartition(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		topic := c.CreateTopic(t, 2, nil)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cl := c.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
		for i := 0; i < 3; i++ {
			require.NoError(t, cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: 1, Value: []byte("v")}).FirstErr())
		}
		bc := newConsumer(t, c.Brokers, nil)
		assign(t, bc, topic, map[int32]int64{0: 0, 1: 3})
		rd, err := rdkbatch.New(bc, 100)
		require.NoError(t, err)
		defer rd.Close()
		eofs := map[int32]int64{}
		var b rdkbatch.Batch
		deadline := time.Now().Add(30 * time.Second)
		for len(eofs) < 2 {
			require.True(t, time.Now().Before(deadline), "ends %v", eofs)
			require.NoError(t, rd.Read(&b, 100*time.Millisecond))
			require.Empty(t, b.Messages)
			require.NoError(t, b.Err)
			for _, e := range b.EOFs {
				require.Equal(t, topic, e.Topic)
				require.Zero(t, e.At)
				eofs[e.Partition] = e.Offset
			}
		}
		require.Equal(t, map[int32]int64{0: 0, 1: 3}, eofs)
	})
}

// TestOffsetOutOfRange: an assignment past a partition's end, with
// auto.offset.reset=error, gives the error Poll gives (its code and
// string), with the partition it is about, and no message.
func TestOffsetOutOfRange(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		topic := c.CreateTopic(t, 1, nil)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cl := c.Client(t)
		for i := 0; i < 3; i++ {
			require.NoError(t, cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte("v")}).FirstErr())
		}
		past := map[int32]int64{0: 1000}

		pc := newConsumer(t, c.Brokers, nil)
		assign(t, pc, topic, past)
		var pollErr kafka.Error
		deadline := time.Now().Add(30 * time.Second)
		for pollErr.Code() == kafka.ErrNoError {
			require.True(t, time.Now().Before(deadline))
			switch e := pc.Poll(100).(type) {
			case *kafka.Message:
				t.Fatalf("poll: a message %v", e)
			case kafka.Error:
				pollErr = e
			}
		}

		bc := newConsumer(t, c.Brokers, nil)
		assign(t, bc, topic, past)
		rd, err := rdkbatch.New(bc, 100)
		require.NoError(t, err)
		defer rd.Close()
		var b rdkbatch.Batch
		deadline = time.Now().Add(30 * time.Second)
		for b.Err == nil {
			require.True(t, time.Now().Before(deadline))
			require.NoError(t, rd.Read(&b, 100*time.Millisecond))
			require.Empty(t, b.Messages)
		}
		var kerr kafka.Error
		require.ErrorAs(t, b.Err, &kerr)
		require.Equal(t, kafka.ErrAutoOffsetReset, pollErr.Code(), "poll: %v", pollErr)
		require.Equal(t, pollErr.Code(), kerr.Code())
		require.Equal(t, pollErr.String(), kerr.String())
		require.Equal(t, pollErr.IsFatal(), kerr.IsFatal())
		require.Equal(t, topic, b.ErrTopic)
		require.Equal(t, int32(0), b.ErrPartition)
		t.Logf("%s: %v (at %s[%d] offset %d)", c.Name, kerr, b.ErrTopic, b.ErrPartition, b.ErrOffset)
	})
}

// TestClientErrorsKeepTheirCodes: a client-level error (no broker
// answers) reaches the batch reader as an error event with its code, as it
// reaches Poll: what kord's sources sort into ErrAuth and the passing
// kind. (rd_kafka_consume_batch_queue would only have logged it.)
func TestClientErrorsKeepTheirCodes(t *testing.T) {
	dead := "127.0.0.1:1" // nothing listens
	codes := func(read func() (kafka.Error, bool)) map[kafka.ErrorCode]bool {
		seen := map[kafka.ErrorCode]bool{}
		deadline := time.Now().Add(20 * time.Second)
		for !seen[kafka.ErrAllBrokersDown] && time.Now().Before(deadline) {
			if e, ok := read(); ok {
				seen[e.Code()] = true
			}
		}
		return seen
	}
	pc := newConsumer(t, dead, nil)
	polled := codes(func() (kafka.Error, bool) {
		e, ok := pc.Poll(100).(kafka.Error)
		return e, ok
	})
	bc := newConsumer(t, dead, nil)
	rd, err := rdkbatch.New(bc, 100)
	require.NoError(t, err)
	defer rd.Close()
	var b rdkbatch.Batch
	read := codes(func() (kafka.Error, bool) {
		require.NoError(t, rd.Read(&b, 100*time.Millisecond))
		require.Empty(t, b.Messages)
		if b.Err == nil {
			return kafka.Error{}, false
		}
		require.Equal(t, 1, b.Len()) // nothing after an error
		return b.Err.(kafka.Error), true
	})
	require.True(t, polled[kafka.ErrAllBrokersDown], "poll: %v", polled)
	require.True(t, read[kafka.ErrAllBrokersDown], "batch: %v", read)
	t.Logf("poll saw %v, the batch reader %v", keys(polled), keys(read))
}

func keys(m map[kafka.ErrorCode]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k.String())
	}
	sort.Strings(out)
	return out
}

// TestReassignDropsOlderRecords: records fetched for an assignment are not
// returned after the partition is assigned again from another offset
// (consumer.Source seeks by assigning): the batch reader goes on from the
// new offset, without one record of the old fetch.
func TestReassignDropsOlderRecords(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		topic := c.CreateTopic(t, 1, nil)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cl := c.Client(t)
		recs := make([]*kgo.Record, 500)
		for i := range recs {
			recs[i] = &kgo.Record{Topic: topic, Value: []byte(fmt.Sprint(i))}
		}
		require.NoError(t, cl.ProduceSync(ctx, recs...).FirstErr())
		bc := newConsumer(t, c.Brokers, nil)
		assign(t, bc, topic, map[int32]int64{0: 0})
		rd, err := rdkbatch.New(bc, 10)
		require.NoError(t, err)
		defer rd.Close()
		var b rdkbatch.Batch
		for len(b.Messages) == 0 {
			require.NoError(t, rd.Read(&b, 100*time.Millisecond))
		}
		require.Equal(t, int64(0), b.Messages[0].Offset)
		// librdkafka has fetched ahead by now: queued records from offset
		// 0 on. Assign from 400 and from 100 in turn.
		for _, from := range []int64{400, 100} {
			assign(t, bc, topic, map[int32]int64{0: from})
			b.Messages = nil
			for len(b.Messages) == 0 {
				require.NoError(t, rd.Read(&b, 100*time.Millisecond))
			}
			require.Equal(t, from, b.Messages[0].Offset)
			for i, m := range b.Messages {
				require.Equal(t, from+int64(i), m.Offset)
				require.Equal(t, fmt.Sprint(from+int64(i)), string(m.Value))
			}
		}
	})
}

// TestReadLimits: ReadN takes no more than asked, a zero wait returns at
// once, and Read after the consumer's Close fails with ErrClosed.
func TestReadLimits(t *testing.T) {
	c := kafkatest.Fake(t)
	topic := c.CreateTopic(t, 1, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl := c.Client(t)
	for i := 0; i < 50; i++ {
		require.NoError(t, cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte("v")}).FirstErr())
	}
	bc := newConsumer(t, c.Brokers, nil)
	rd, err := rdkbatch.New(bc, 20)
	require.NoError(t, err)
	defer rd.Close()
	var b rdkbatch.Batch
	start := time.Now()
	require.NoError(t, rd.Read(&b, 0))
	require.Less(t, time.Since(start), time.Second)
	require.Zero(t, b.Len())

	assign(t, bc, topic, map[int32]int64{0: 0})
	next := int64(0)
	for next < 50 {
		require.NoError(t, rd.ReadN(&b, 3, 100*time.Millisecond))
		require.LessOrEqual(t, b.Len(), 3)
		for _, m := range b.Messages {
			require.Equal(t, next, m.Offset)
			next++
		}
	}
	require.NoError(t, bc.Close())
	require.ErrorIs(t, rd.Read(&b, 0), rdkbatch.ErrClosed)

	_, err = rdkbatch.New(bc, 0)
	require.Error(t, err)
	require.True(t, rdkbatch.Enabled)
}

// TestDeclaredConstants: the constants batch.go declares from rdkafka.h's
// documentation are the ones confluent-kafka-go compiled from the header
// of the librdkafka it links (its generated error codes and timestamp
// types). The struct layouts are checked by TestBatchReadsWhatPollReads,
// field by field.
func TestDeclaredConstants(t *testing.T) {
	require.Equal(t, kafka.ErrorCode(-191), kafka.ErrPartitionEOF)
	require.Equal(t, kafka.ErrorCode(-194), kafka.ErrCritSysResource)
	require.Equal(t, kafka.TimestampType(0), kafka.TimestampNotAvailable)
	require.Equal(t, kafka.TimestampType(1), kafka.TimestampCreateTime)
	require.Equal(t, kafka.TimestampType(2), kafka.TimestampLogAppendTime)
}

// TestOtherEventsIgnored: events of other types on the queue (here
// statistics, every 20 ms) are dropped and counted, and do not stop the
// records behind them.
func TestOtherEventsIgnored(t *testing.T) {
	c := kafkatest.Fake(t)
	topic := c.CreateTopic(t, 1, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl := c.Client(t)
	for i := 0; i < 20; i++ {
		require.NoError(t, cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte(fmt.Sprint(i))}).FirstErr())
	}
	bc := newConsumer(t, c.Brokers, kafka.ConfigMap{"statistics.interval.ms": 20})
	rd, err := rdkbatch.New(bc, 100)
	require.NoError(t, err)
	defer rd.Close()
	var b rdkbatch.Batch
	ignored := 0
	deadline := time.Now().Add(10 * time.Second)
	for ignored < 3 {
		require.True(t, time.Now().Before(deadline))
		require.NoError(t, rd.Read(&b, 50*time.Millisecond))
		require.Empty(t, b.Messages)
		ignored += b.Ignored
	}
	time.Sleep(100 * time.Millisecond) // statistics pile up on the queue
	assign(t, bc, topic, map[int32]int64{0: 0})
	next := int64(0)
	for next < 20 {
		require.True(t, time.Now().Before(deadline))
		require.NoError(t, rd.Read(&b, 50*time.Millisecond))
		require.NoError(t, b.Err)
		for _, m := range b.Messages {
			require.Equal(t, next, m.Offset)
			require.Equal(t, fmt.Sprint(next), string(m.Value))
			next++
		}
	}
}

// TestSubscribingConsumerRefused: a consumer that subscribes has rebalance
// events to serve on its queue; New refuses it.
func TestSubscribingConsumerRefused(t *testing.T) {
	c := kafkatest.Fake(t)
	topic := c.CreateTopic(t, 1, nil)
	kc := newConsumer(t, c.Brokers, nil)
	require.NoError(t, kc.Subscribe(topic, nil))
	_, err := rdkbatch.New(kc, 10)
	require.ErrorContains(t, err, "subscribes")
}
