package kafkaio_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kordproject/kord/internal/rdkbatch"
	"github.com/kordproject/kord/internal/rig/kafkatest"
	"github.com/kordproject/kord/kafkaio"
	"github.com/kordproject/kord/keyed"
	"github.com/kordproject/kord/keyed/connector"
	"github.com/kordproject/kord/producer"
	"github.com/kordproject/kord/serde"
)

// The benchmark suite's job (bench/peers/CONTRACT.md): its input event,
// of which it decodes uuid, seq and ts, and its result.
type (
	pathEvent struct {
		UUID string          `json:"uuid"`
		Seq  int64           `json:"seq"`
		TS   json.RawMessage `json:"ts"`
	}
	pathResult struct {
		UUID  string          `json:"uuid"`
		Seq   int64           `json:"seq"`
		Count int64           `json:"count"`
		TS    json.RawMessage `json:"ts"`
	}
	pathInput struct {
		UUID   string    `json:"uuid"`
		Seq    int64     `json:"seq"`
		Action string    `json:"action"`
		Page   string    `json:"page"`
		TS     time.Time `json:"ts"`
	}
)

// BenchmarkRecordPath runs the suite's job (key by partition or by uuid,
// count in a ValueState, one JSON result per event, exactly-once, a
// checkpoint a second, parallelism 2) over a bounded input of
// KORD_BENCH_EVENTS (200,000) JSON events of 10,000 users, on the real
// broker, and reports per record: the process's allocations
// (runtime.MemStats.Mallocs), its cgo calls (runtime.NumCgoCall: the
// consumer's, the producer's, and everything else in librdkafka's
// wrapper) and its CPU time. The broker is another process: none of its
// work is counted.
//
//	KORD_KAFKA_BROKERS=... go test -run XXX -bench RecordPath -benchtime 3x ./kafkaio/
//
// The source reads its consumer's queue in batches (internal/rdkbatch)
// and the sink queues each batch of records in one call
// (producer.Producer.ProduceBatch through internal/rdkproduce) unless built with the
// kordnobatch tag, which keeps both record by record (one Consumer.Poll
// and one Producer.Produce each): the two paths are two binaries. The
// benchmark names its path on a benchstat configuration line ("path:
// batch" or "path: record"); run the two binaries in turn and compare
// them by it:
//
//	go test -c -o /tmp/rp-batch ./kafkaio/
//	go test -c -tags kordnobatch -o /tmp/rp-nobatch ./kafkaio/
//	for i in $(seq 10); do for v in batch nobatch; do
//		/tmp/rp-$v -test.run XXX -test.bench BenchmarkRecordPath -test.count 1 >>/tmp/rp-$v.txt
//	done; done
//	benchstat -col path /tmp/rp-batch.txt /tmp/rp-nobatch.txt
func BenchmarkRecordPath(b *testing.B) {
	fmt.Printf("path: %s\n", map[bool]string{true: "batch", false: "record"}[rdkbatch.Enabled])
	c := kafkatest.Broker(b)
	const users = 10_000
	events := envInt(b, "KORD_BENCH_EVENTS", 200_000)
	in := c.CreateTopic(b, 12, nil)
	ctx := context.Background()
	p, err := producer.New(serde.String(), serde.JSON[pathInput](), producer.Brokers(strings.Split(c.Brokers, ",")...))
	if err != nil {
		b.Fatal(err)
	}
	seqs := make([]int64, users)
	start := time.Now()
	for i := range events {
		u := i % users
		id := fmt.Sprintf("%08x-0000-4000-8000-%012x", u, u*7919)
		if err := p.Produce(ctx, producer.Record[string, pathInput]{Topic: in, Key: id,
			Value: pathInput{UUID: id, Seq: seqs[u], Action: "click", Page: fmt.Sprintf("/item/%d", i%500), TS: start.Add(time.Duration(i))}}, nil); err != nil {
			b.Fatal(err)
		}
		seqs[u]++
	}
	if err := p.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	p.Close()
	for _, keyBy := range []bool{false, true} {
		b.Run(map[bool]string{false: "partition", true: "keyby"}[keyBy], func(b *testing.B) {
			var total int64
			var m0, m1 runtime.MemStats
			runtime.ReadMemStats(&m0)
			cgo0, cpu0 := runtime.NumCgoCall(), rusage(b)
			for b.Loop() {
				out := c.CreateTopic(b, 12, nil)
				client := mustClient(kafkaio.Brokers(strings.Split(c.Brokers, ",")...))
				j := keyed.NewJob(strings.ReplaceAll(out, ".", "-"), keyed.Dir(b.TempDir()), keyed.CheckpointInterval(time.Second))
				s := keyed.FromSource(j, "events", 2, connector.Source[pathEvent](kafkaio.NewSource(client, in, serde.JSON[pathEvent](), kafkaio.Bounded())))
				k := keyed.ByPartition(s)
				if keyBy {
					k = keyed.KeyBy("uuid", func(e pathEvent) []byte { return []byte(e.UUID) }, s)
				}
				res := keyed.ProcessValue(k, "count", 2, serde.Int64(), func(_ []byte, e pathEvent, n *keyed.ValueState[int64], out *keyed.Collector[pathResult]) error {
					v, _ := n.Get()
					v++
					n.Set(v)
					out.Emit(pathResult{UUID: e.UUID, Seq: e.Seq, Count: v, TS: e.TS})
					return nil
				})
				sink := kafkaio.NewSink(client, out, serde.JSON[pathResult](), kafkaio.Key(func(r pathResult) string { return r.UUID }, serde.String()))
				keyed.ToSink(res, "results", connector.Sink[pathResult](sink))
				if err := j.Run(ctx); err != nil { // closes the sink
					b.Fatal(err)
				}
				total += int64(events)
			}
			cgo1, cpu1 := runtime.NumCgoCall(), rusage(b)
			runtime.ReadMemStats(&m1)
			b.ReportMetric(float64(m1.Mallocs-m0.Mallocs)/float64(total), "allocs/record")
			b.ReportMetric(float64(m1.TotalAlloc-m0.TotalAlloc)/float64(total), "B/record")
			b.ReportMetric(float64(cgo1-cgo0)/float64(total), "cgo-calls/record")
			b.ReportMetric(float64((cpu1-cpu0).Nanoseconds())/float64(total), "cpu-ns/record")
			b.ReportMetric(float64(total)/b.Elapsed().Seconds(), "records/s")
		})
	}
}

// envInt is the integer in environment variable name, or def.
func envInt(tb testing.TB, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		tb.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

// rusage is the process's CPU time, user and system.
func rusage(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
