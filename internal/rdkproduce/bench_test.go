//go:build cgo && !kordnobatch

package rdkproduce_test

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kordproject/kord/internal/rdkproduce"
	"github.com/kordproject/kord/internal/rig/kafkatest"
)

// BenchmarkProduce compares enqueueing the same records with the
// per-record Produce loop (a kafka.Message each, as kord's producer builds
// it) and with one Write per batch of 1000, on a producer with delivery
// reports off (the exactly-once sink's setting, producer.CommitReports),
// with two headers per record and with none. Only the enqueue is timed:
// each round's flush to the in-process cluster is not. It reports
// records/s and ns/record of enqueue, and Go allocations per record.
//
//	go test -run XXX -bench Produce -benchtime 200x ./internal/rdkproduce/
func BenchmarkProduce(b *testing.B) {
	c := kafkatest.Fake(b)
	const batch, parts = 1000, 6
	topic := c.CreateTopic(b, parts, nil)
	for _, hdrs := range []bool{true, false} {
		recs := make([]rdkproduce.Record, batch)
		ts := time.UnixMilli(1_700_000_000_000)
		for i := range recs {
			recs[i] = rdkproduce.Record{Topic: topic, Partition: int32(i % parts),
				Key:       []byte(fmt.Sprintf("key-%08d", i)),
				Value:     []byte(strings.Repeat("v", 100)),
				Timestamp: ts.Add(time.Duration(i) * time.Millisecond)}
			if hdrs {
				recs[i].Headers = []kafka.Header{{Key: "kord.a", Value: []byte("1")}, {Key: "kord.b", Value: []byte("two")}}
			}
		}
		b.Run(fmt.Sprintf("headers=%t/Produce", hdrs), func(b *testing.B) {
			enqueue(b, c.Brokers, func(p *kafka.Producer, _ *rdkproduce.Writer) {
				for i := range recs {
					r := &recs[i]
					m := &kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &r.Topic, Partition: r.Partition},
						Key: r.Key, Value: r.Value, Headers: r.Headers, Timestamp: r.Timestamp}
					if err := p.Produce(m, nil); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
		b.Run(fmt.Sprintf("headers=%t/Write", hdrs), func(b *testing.B) {
			enqueue(b, c.Brokers, func(_ *kafka.Producer, w *rdkproduce.Writer) {
				if n, err := w.Write(recs); err != nil || n != len(recs) {
					b.Fatal(n, err)
				}
			})
		})
	}
}

// enqueue times b.N rounds of one batch of 1000 records enqueued by fn.
func enqueue(b *testing.B, brokers string, fn func(*kafka.Producer, *rdkproduce.Writer)) {
	const batch = 1000
	p := newProducer(b, brokers, kafka.ConfigMap{"go.delivery.reports": false, "queue.buffering.max.messages": 2 * batch, "linger.ms": 100}, true)
	w := newWriter(b, p)
	var ms runtime.MemStats
	var mallocs uint64
	var took time.Duration
	b.ResetTimer()
	for range b.N {
		runtime.ReadMemStats(&ms)
		before := ms.Mallocs
		start := time.Now()
		fn(p, w)
		took += time.Since(start)
		runtime.ReadMemStats(&ms)
		mallocs += ms.Mallocs - before
		b.StopTimer()
		for p.Flush(100) > 0 {
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(b.N*batch)/took.Seconds(), "records/s")
	b.ReportMetric(float64(took.Nanoseconds())/float64(b.N*batch), "ns/record")
	b.ReportMetric(float64(mallocs)/float64(b.N*batch), "allocs/record")
}
