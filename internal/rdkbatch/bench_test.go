//go:build cgo && !kordnobatch

package rdkbatch_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kordproject/kord/internal/rdkbatch"
	"github.com/kordproject/kord/internal/rig/kafkatest"
)

// record is consumer.Record's shape: what each path builds per record.
type record struct {
	Topic     string
	Partition int32
	Offset    int64
	Key       []byte
	Value     []byte
	Headers   []header
	Timestamp time.Time
	TSType    int8
}

type header struct {
	Key   string
	Value []byte
}

// BenchmarkConsume reads a prepared topic of KORD_BENCH_EVENTS (200,000)
// records (a 36-byte key, a 120-byte value; every other record with two
// headers) over 4 partitions, from a manual assignment, to the end: with
// Consumer.Poll as consumer.Source reads (one Poll per record, 500
// records per PollAppend), and with the batch reader (500 per Read). It
// runs on the real broker of KORD_KAFKA_BROKERS when set, else on
// kordtest's in-process cluster (which then shares the CPU with the
// reader). Reported per record: records/s, cgo calls, allocations, bytes.
//
//	KORD_KAFKA_BROKERS=... go test -run XXX -bench Consume -benchtime 3x ./internal/rdkbatch/
func BenchmarkConsume(b *testing.B) {
	events := 200_000
	if v := os.Getenv("KORD_BENCH_EVENTS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			b.Fatal(err)
		}
		events = n
	}
	var c *kafkatest.Cluster
	if os.Getenv(kafkatest.EnvBrokers) != "" {
		c = kafkatest.Broker(b)
	} else {
		c = kafkatest.Fake(b)
	}
	topic := c.CreateTopic(b, 4, nil)
	ctx := context.Background()
	cl := c.Client(b, kgo.ProducerLinger(5*time.Millisecond))
	val := make([]byte, 120)
	for i := range val {
		val[i] = 'a' + byte(i%26)
	}
	for i := 0; i < events; i++ {
		r := &kgo.Record{Topic: topic, Key: []byte(fmt.Sprintf("%08x-0000-4000-8000-%012x", i%10000, i)), Value: val}
		if i%2 == 0 {
			r.Headers = []kgo.RecordHeader{{Key: "trace", Value: []byte("00-0af7651916cd43dd8448eb211c80319c")}, {Key: "kind", Value: []byte("click")}}
		}
		cl.Produce(ctx, r, func(_ *kgo.Record, err error) {
			if err != nil {
				b.Error(err)
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	from := map[int32]int64{0: 0, 1: 0, 2: 0, 3: 0}

	run := func(b *testing.B, read func(kc *kafka.Consumer, dst []record) []record) {
		var total int64
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		cgo0 := runtime.NumCgoCall()
		var elapsed time.Duration
		for b.Loop() {
			kc := newConsumer(b, c.Brokers, nil)
			assign(b, kc, topic, from)
			start := time.Now()
			got := 0
			dst := make([]record, 0, 500)
			deadline := start.Add(5 * time.Minute)
			for got < events {
				if time.Now().After(deadline) {
					b.Fatalf("%d of %d records", got, events)
				}
				dst = read(kc, dst[:0])
				got += len(dst)
			}
			elapsed += time.Since(start)
			total += int64(got)
			_ = kc.Close()
		}
		cgo1 := runtime.NumCgoCall()
		runtime.ReadMemStats(&m1)
		b.ReportMetric(float64(total)/elapsed.Seconds(), "records/s")
		b.ReportMetric(float64(cgo1-cgo0)/float64(total), "cgo-calls/record")
		b.ReportMetric(float64(m1.Mallocs-m0.Mallocs)/float64(total), "allocs/record")
		b.ReportMetric(float64(m1.TotalAlloc-m0.TotalAlloc)/float64(total), "B/record")
	}

	b.Run("poll", func(b *testing.B) {
		run(b, func(kc *kafka.Consumer, dst []record) []record {
			timeout := 100
			for len(dst) < 500 {
				ev := kc.Poll(timeout)
				timeout = 0
				if ev == nil {
					return dst
				}
				m, ok := ev.(*kafka.Message)
				if !ok {
					continue
				}
				var hs []header
				if len(m.Headers) > 0 {
					hs = make([]header, len(m.Headers))
					for i, h := range m.Headers {
						hs[i] = header{h.Key, h.Value}
					}
				}
				dst = append(dst, record{Topic: *m.TopicPartition.Topic, Partition: m.TopicPartition.Partition, Offset: int64(m.TopicPartition.Offset),
					Key: m.Key, Value: m.Value, Headers: hs, Timestamp: m.Timestamp, TSType: int8(m.TimestampType)})
			}
			return dst
		})
	})
	b.Run("batch", func(b *testing.B) {
		var rd *rdkbatch.Reader
		var owner *kafka.Consumer
		var bt rdkbatch.Batch
		run(b, func(kc *kafka.Consumer, dst []record) []record {
			if owner != kc {
				if rd != nil {
					rd.Close()
				}
				var err error
				if rd, err = rdkbatch.New(kc, 500); err != nil {
					b.Fatal(err)
				}
				owner = kc
			}
			if err := rd.Read(&bt, 100*time.Millisecond); err != nil {
				b.Fatal(err)
			}
			// The headers of a batch in one allocation, as a Source would
			// convert them.
			n := 0
			for i := range bt.Messages {
				n += len(bt.Messages[i].Headers)
			}
			var hs []header
			if n > 0 {
				hs = make([]header, n)
			}
			for i := range bt.Messages {
				m := &bt.Messages[i]
				var mh []header
				if len(m.Headers) > 0 {
					mh = hs[:len(m.Headers):len(m.Headers)]
					hs = hs[len(m.Headers):]
					for j, h := range m.Headers {
						mh[j] = header{h.Key, h.Value}
					}
				}
				dst = append(dst, record{Topic: m.Topic, Partition: m.Partition, Offset: m.Offset,
					Key: m.Key, Value: m.Value, Headers: mh, Timestamp: m.Timestamp, TSType: int8(m.TimestampType)})
			}
			return dst
		})
		if rd != nil {
			rd.Close()
		}
	})
}
