//go:build cgo && !kordnobatch

package rdkproduce_test

import (
	"bytes"
	"context"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kordproject/kord/internal/rdkproduce"
	"github.com/kordproject/kord/internal/rig/kafkatest"
)

// newProducer is an idempotent producer as kord's producer package sets
// one up (acks=all, gapless), its log drained; its Events are drained too
// unless events is false.
func newProducer(t testing.TB, brokers string, extra kafka.ConfigMap, drain bool) *kafka.Producer {
	t.Helper()
	cm := kafka.ConfigMap{
		"bootstrap.servers":         brokers,
		"client.id":                 "kord",
		"enable.idempotence":        true,
		"acks":                      "all",
		"enable.gapless.guarantee":  true,
		"allow.auto.create.topics":  false,
		"linger.ms":                 5,
		"go.logs.channel.enable":    true,
		"go.delivery.report.fields": "none",
	}
	for k, v := range extra {
		cm[k] = v
	}
	p, err := kafka.NewProducer(&cm)
	require.NoError(t, err)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range p.Logs() {
		}
	}()
	evDone := make(chan struct{})
	if drain {
		go func() {
			defer close(evDone)
			for range p.Events() {
			}
		}()
	} else {
		close(evDone)
	}
	t.Cleanup(func() {
		p.Close()
		<-done
		<-evDone
	})
	return p
}

func newWriter(t testing.TB, p *kafka.Producer) *rdkproduce.Writer {
	t.Helper()
	w, err := rdkproduce.New(p)
	require.NoError(t, err)
	t.Cleanup(w.Close) // registered after the producer's: runs first
	return w
}

// produce enqueues recs with confluent-kafka-go's per-record Produce, as
// kord's producer does (no opaque, no delivery channel), waiting on a full
// queue.
func produce(t testing.TB, p *kafka.Producer, recs []rdkproduce.Record) {
	t.Helper()
	for i := range recs {
		r := &recs[i]
		m := &kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &r.Topic, Partition: r.Partition},
			Key: r.Key, Value: r.Value, Headers: r.Headers, Timestamp: r.Timestamp}
		for {
			err := p.Produce(m, nil)
			if err == nil {
				break
			}
			require.Equal(t, kafka.ErrQueueFull, err.(kafka.Error).Code(), "Produce: %v", err)
			p.Flush(10)
		}
	}
}

// write enqueues recs with Write, waiting on a full queue and writing the
// rest; it returns how many Writes stopped short.
func write(t testing.TB, p *kafka.Producer, w *rdkproduce.Writer, recs []rdkproduce.Record) (short int) {
	t.Helper()
	for len(recs) > 0 {
		n, err := w.Write(recs)
		if err == nil {
			require.Equal(t, len(recs), n)
			return short
		}
		require.Less(t, n, len(recs))
		require.Equal(t, kafka.ErrQueueFull, err.(kafka.Error).Code(), "Write: %v", err)
		short++
		recs = recs[n:]
		p.Flush(10)
	}
	return short
}

func flush(t testing.TB, p *kafka.Producer) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); p.Flush(100) > 0; {
		require.True(t, time.Now().Before(deadline), "flush: %d still queued", p.Len())
	}
}

// mixed is n records to topic over partitions: null and empty keys, values
// and header values, no headers and several (one name twice), binary bytes,
// and timestamps (in milliseconds, as Kafka keeps them).
func mixed(topic string, partitions int32, n int) []rdkproduce.Record {
	base := time.UnixMilli(1_700_000_000_000)
	recs := make([]rdkproduce.Record, n)
	for i := range recs {
		r := rdkproduce.Record{Topic: topic, Partition: int32(i) % partitions, Timestamp: base.Add(time.Duration(i) * time.Millisecond)}
		switch i % 5 {
		case 0: // null key, null value, no headers
		case 1:
			r.Key, r.Value = []byte{}, []byte{}
			r.Headers = []kafka.Header{{Key: "null", Value: nil}, {Key: "empty", Value: []byte{}}, {Key: "", Value: []byte("anonymous")}}
		case 2:
			r.Key, r.Value = []byte(fmt.Sprintf("key-%d", i)), bytes.Repeat([]byte{0, 1, 2, 255}, i)
			r.Headers = []kafka.Header{{Key: "dup", Value: []byte("a")}, {Key: "dup", Value: []byte("b")}, {Key: "bin", Value: []byte{0, 0, 7}}}
		case 3:
			r.Key, r.Value = []byte{0}, []byte(fmt.Sprintf("value-%d", i))
			r.Headers = []kafka.Header{}
		case 4:
			r.Key = []byte(fmt.Sprintf("key-%d", i))
			r.Headers = []kafka.Header{{Key: "k", Value: []byte("v")}}
		}
		recs[i] = r
	}
	return recs
}

// byPartition is records as read, per partition in offset order.
func byPartition(recs []*kgo.Record) map[int32][]*kgo.Record {
	out := map[int32][]*kgo.Record{}
	for _, r := range recs {
		out[r.Partition] = append(out[r.Partition], r)
	}
	return out
}

// nullable says b as null, empty or its bytes.
func nullable(b []byte) string {
	if b == nil {
		return "null"
	}
	return fmt.Sprintf("%q", b)
}

// same fails t unless got, read back, is want as written, field by field,
// with null and empty apart.
func same(t *testing.T, want rdkproduce.Record, got *kgo.Record, what string) {
	t.Helper()
	require.Equal(t, want.Partition, got.Partition, what)
	require.Equal(t, nullable(want.Key), nullable(got.Key), what+": key")
	require.Equal(t, nullable(want.Value), nullable(got.Value), what+": value")
	require.Equal(t, len(want.Headers), len(got.Headers), what+": headers")
	for i, h := range want.Headers {
		require.Equal(t, h.Key, got.Headers[i].Key, what+": header name")
		require.Equal(t, nullable(h.Value), nullable(got.Headers[i].Value), what+": header %q", h.Key)
	}
	if !want.Timestamp.IsZero() {
		require.True(t, want.Timestamp.Equal(got.Timestamp), "%s: timestamp %v, want %v", what, got.Timestamp, want.Timestamp)
	}
	require.Equal(t, int8(0), got.Attrs.TimestampType(), what+": CreateTime")
}

// TestSameAsProduce: records written by Write read back identical, field by
// field and in order per partition, to the same records written by
// Produce, and to what was written; a record without a timestamp gets the
// time of the enqueue on both paths.
func TestSameAsProduce(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		const parts = 3
		viaProduce := c.CreateTopic(t, parts, nil)
		viaWrite := c.CreateTopic(t, parts, nil)
		p := newProducer(t, c.Brokers, nil, true)
		w := newWriter(t, p)

		recs := mixed(viaWrite, parts, 200)
		recs = append(recs, rdkproduce.Record{Topic: viaWrite, Partition: 1, Key: []byte("no time")})
		before := time.Now().Add(-time.Second)
		write(t, p, w, recs)
		for i := range recs {
			recs[i].Topic = viaProduce
		}
		produce(t, p, recs)
		flush(t, p)
		after := time.Now().Add(time.Second)

		a := byPartition(c.ReadExactly(t, viaProduce, len(recs)))
		b := byPartition(c.ReadExactly(t, viaWrite, len(recs)))
		want := map[int32][]rdkproduce.Record{}
		for _, r := range recs {
			want[r.Partition] = append(want[r.Partition], r)
		}
		for part, ws := range want {
			require.Len(t, a[part], len(ws))
			require.Len(t, b[part], len(ws))
			for i, r := range ws {
				what := fmt.Sprintf("partition %d record %d", part, i)
				same(t, r, a[part][i], "Produce: "+what)
				same(t, r, b[part][i], "Write: "+what)
				require.Equal(t, a[part][i].Offset, b[part][i].Offset, what)
				if r.Timestamp.IsZero() {
					for _, got := range []*kgo.Record{a[part][i], b[part][i]} {
						require.True(t, got.Timestamp.After(before) && got.Timestamp.Before(after), "%s: enqueue time %v", what, got.Timestamp)
					}
				}
			}
		}
	})
}

// TestTransactions: Write enqueues into the open transaction: a committed
// transaction's records are read back under read_committed, in order, an
// aborted one's are not, and a Write outside a transaction is refused
// with librdkafka's state error, as Produce is.
func TestTransactions(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		const parts = 2
		topic := c.CreateTopic(t, parts, nil)
		p := newProducer(t, c.Brokers, kafka.ConfigMap{"transactional.id": kafkatest.TopicName(t)}, true)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		require.NoError(t, p.InitTransactions(ctx))
		w := newWriter(t, p)

		// Before BeginTransaction: refused (rd_kafka_check_produce).
		n, err := w.Write(mixed(topic, parts, 3))
		require.Equal(t, 0, n)
		require.Equal(t, kafka.ErrState, err.(kafka.Error).Code(), "%v", err)
		require.Equal(t, kafka.ErrState, p.Produce(&kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: 0}}, nil).(kafka.Error).Code())

		all := mixed(topic, parts, 90)
		committed1, aborted, committed2 := all[:30], all[30:60], all[60:]
		for i := range aborted {
			aborted[i].Value = []byte("aborted")
		}
		for _, tx := range []struct {
			recs   []rdkproduce.Record
			commit bool
		}{{committed1, true}, {aborted, false}, {committed2, true}} {
			require.NoError(t, p.BeginTransaction())
			write(t, p, w, tx.recs)
			if tx.commit {
				require.NoError(t, p.CommitTransaction(ctx))
			} else {
				flush(t, p) // the aborted records reach the log first
				require.NoError(t, p.AbortTransaction(ctx))
			}
		}
		want := map[int32][]rdkproduce.Record{}
		for _, r := range append(append([]rdkproduce.Record{}, committed1...), committed2...) {
			want[r.Partition] = append(want[r.Partition], r)
		}
		got := byPartition(c.ReadExactly(t, topic, len(committed1)+len(committed2)))
		for part, ws := range want {
			require.Len(t, got[part], len(ws))
			for i, r := range ws {
				same(t, r, got[part][i], fmt.Sprintf("partition %d record %d", part, i))
			}
		}
		// Under read_uncommitted the aborted records are there: they were
		// written, then aborted.
		un := c.ReadAll(t, topic, len(all), false, 30*time.Second)
		require.Len(t, un, len(all))
	})
}

// TestQueueFull: with a small queue (queue.buffering.max.messages), Write
// stops at the first record librdkafka refuses with ErrQueueFull, having
// enqueued the ones before it; the rest, written again after a wait, are
// read back in the order given, per partition.
func TestQueueFull(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		const parts = 2
		topic := c.CreateTopic(t, parts, nil)
		p := newProducer(t, c.Brokers, kafka.ConfigMap{"queue.buffering.max.messages": 7, "linger.ms": 50}, true)
		w := newWriter(t, p)

		recs := mixed(topic, parts, 100)
		n, err := w.Write(recs)
		require.Equal(t, 7, n, "the queue holds 7")
		require.Equal(t, kafka.ErrQueueFull, err.(kafka.Error).Code(), "%v", err)
		short := 1 + write(t, p, w, recs[n:])
		require.GreaterOrEqual(t, short, 100/7)
		flush(t, p)

		got := byPartition(c.ReadExactly(t, topic, len(recs)))
		want := map[int32][]rdkproduce.Record{}
		for _, r := range recs {
			want[r.Partition] = append(want[r.Partition], r)
		}
		for part, ws := range want {
			require.Len(t, got[part], len(ws))
			for i, r := range ws {
				same(t, r, got[part][i], fmt.Sprintf("partition %d record %d", part, i))
			}
		}
	})
}

// TestStopsAtError: a record librdkafka refuses for another reason (a
// partition the topic does not have) stops Write there with Produce's
// error; the records before it are enqueued and written, none after it.
func TestStopsAtError(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		topic := c.CreateTopic(t, 2, nil)
		p := newProducer(t, c.Brokers, nil, true)
		// The topic's metadata, so that librdkafka knows its partitions
		// (before that it holds records unassigned: rd_kafka_msg_partitioner).
		_, err := p.GetMetadata(&topic, false, 10_000)
		require.NoError(t, err)
		w := newWriter(t, p)
		recs := mixed(topic, 2, 10)
		recs[6].Partition = 5
		n, err := w.Write(recs)
		require.Equal(t, 6, n)
		require.Equal(t, kafka.ErrUnknownPartition, err.(kafka.Error).Code(), "%v", err)
		m := &kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: 5}}
		require.Equal(t, err, p.Produce(m, nil), "Produce's error")
		flush(t, p)
		got := c.ReadExactly(t, topic, 6)
		require.Len(t, got, 6)
	})
}

// cgoMapLen is the number of entries in confluent-kafka-go's cgo map of the
// producer (kafka/handle.go, handle.cgomap: the delivery channels and
// opaques of records in flight), read by reflection.
func cgoMapLen(t *testing.T, p *kafka.Producer) int {
	t.Helper()
	h, ok := reflect.TypeFor[kafka.Producer]().FieldByName("handle")
	require.True(t, ok)
	m, ok := h.Type.FieldByName("cgomap")
	require.True(t, ok)
	require.Equal(t, reflect.Map, m.Type.Kind())
	l, ok := h.Type.FieldByName("cgoLock")
	require.True(t, ok)
	require.Equal(t, reflect.TypeFor[sync.Mutex](), l.Type)
	mu := (*sync.Mutex)(unsafe.Add(unsafe.Pointer(p), h.Offset+l.Offset))
	mu.Lock()
	defer mu.Unlock()
	return reflect.NewAt(m.Type, unsafe.Add(unsafe.Pointer(p), h.Offset+m.Offset)).Elem().Len()
}

// TestDeliveryReports answers what confluent-kafka-go does with the
// delivery reports of records that carry no opaque: with
// go.delivery.reports on, each comes on Events as a *kafka.Message with no
// Opaque, its partition and offset, and no error, beside the reports of
// Produce's records, which keep their own opaques and channels; with it
// off they are dropped, and Flush drains the queue. The cgo map holds
// nothing of them either way.
func TestDeliveryReports(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		topic := c.CreateTopic(t, 2, nil)
		t.Run("on", func(t *testing.T) {
			p := newProducer(t, c.Brokers, kafka.ConfigMap{"go.delivery.reports": true}, false)
			w := newWriter(t, p)
			dr := make(chan kafka.Event, 1)
			require.NoError(t, p.Produce(&kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: 0}, Opaque: "mine"}, nil))
			require.NoError(t, p.Produce(&kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: 1}}, dr))
			recs := mixed(topic, 2, 50)
			write(t, p, w, recs)

			offsets := map[int32][]int64{}
			var opaque int
			timeout := time.After(time.Minute)
			for got := 0; got < len(recs)+1; {
				select {
				case ev := <-p.Events():
					m, ok := ev.(*kafka.Message)
					if !ok {
						continue // a log or client event
					}
					require.NoError(t, m.TopicPartition.Error)
					got++
					if m.Opaque != nil {
						require.Equal(t, "mine", m.Opaque)
						opaque++
						continue
					}
					offsets[m.TopicPartition.Partition] = append(offsets[m.TopicPartition.Partition], int64(m.TopicPartition.Offset))
				case <-timeout:
					t.Fatal("delivery reports missing")
				}
			}
			require.Equal(t, 1, opaque)
			select {
			case ev := <-dr:
				require.NoError(t, ev.(*kafka.Message).TopicPartition.Error)
			case <-time.After(time.Minute):
				t.Fatal("Produce's delivery channel got no report")
			}
			require.Equal(t, 0, cgoMapLen(t, p))
			// Write's reports: one per record, each partition's offsets
			// ascending after Produce's record (at offset 0).
			for part, os := range offsets {
				require.Len(t, os, len(recs)/2, "partition %d", part)
				for i, o := range os {
					require.Equal(t, int64(i+1), o, "partition %d", part)
				}
			}
		})
		t.Run("off", func(t *testing.T) {
			p := newProducer(t, c.Brokers, kafka.ConfigMap{"go.delivery.reports": false}, false)
			w := newWriter(t, p)
			write(t, p, w, mixed(topic, 2, 50))
			flush(t, p)
			require.Equal(t, 0, p.Len())
			require.Equal(t, 0, cgoMapLen(t, p))
			select {
			case ev := <-p.Events():
				_, isMsg := ev.(*kafka.Message)
				require.False(t, isMsg, "a delivery report with go.delivery.reports off: %v", ev)
			case <-time.After(200 * time.Millisecond):
			}
		})
	})
}

// TestClosed: New refuses a closed producer, and Write fails with
// ErrClosed once the producer or the Writer is closed, touching no handle.
func TestClosed(t *testing.T) {
	c := kafkatest.Fake(t)
	topic := c.CreateTopic(t, 1, nil)
	p, err := kafka.NewProducer(&kafka.ConfigMap{"bootstrap.servers": c.Brokers})
	require.NoError(t, err)
	w, err := rdkproduce.New(p)
	require.NoError(t, err)
	n, err := w.Write([]rdkproduce.Record{{Topic: topic}})
	require.NoError(t, err)
	require.Equal(t, 1, n)
	w.Close()
	_, err = w.Write([]rdkproduce.Record{{Topic: topic}})
	require.ErrorIs(t, err, rdkproduce.ErrClosed)

	w, err = rdkproduce.New(p)
	require.NoError(t, err)
	p.Close()
	_, err = w.Write([]rdkproduce.Record{{Topic: topic}})
	require.ErrorIs(t, err, rdkproduce.ErrClosed)
	w.Close()
	_, err = rdkproduce.New(p)
	require.ErrorIs(t, err, rdkproduce.ErrClosed)
	require.True(t, rdkproduce.Enabled)
}
