package operations_test

import (
	"bufio"
	"context"
	"fmt"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/kordproject/kord/kafkaio"
	"github.com/kordproject/kord/keyed"
	"github.com/kordproject/kord/kordhttp"
	"github.com/kordproject/kord/kordotel"
	"github.com/kordproject/kord/kordtest"
	"github.com/kordproject/kord/producer"
	"github.com/kordproject/kord/runlog"
	"github.com/kordproject/kord/serde"
)

// A job on the in-process cluster, its figures served by kordhttp on a
// test server, and /metrics, /healthz and /readyz read back once the job
// has processed its input.
func Example_metrics() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cluster, err := kordtest.NewCluster(kordtest.Topic("clicks", 2), kordtest.Topic("click-counts", 2))
	if err != nil {
		log.Fatal(err)
	}
	defer cluster.Close()
	produce(ctx, cluster, "clicks", "ana", "bo", "ana", "cy", "ana", "bo")
	client, err := cluster.Client()
	if err != nil {
		log.Fatal(err)
	}
	dir, _ := os.MkdirTemp("", "click-counts-")
	defer os.RemoveAll(dir)

	job := keyed.NewJob("click-counts", keyed.Dir(dir), keyed.CheckpointInterval(100*time.Millisecond))
	clicks := keyed.FromSource(job, "clicks", 0, kafkaio.NewSource(client, "clicks", serde.String(), kafkaio.Bounded()))
	counts := keyed.ProcessValue(keyed.ByPartition(clicks), "count", 0, serde.Int64(),
		func(user []byte, _ string, n *keyed.ValueState[int64], out *keyed.Collector[int64]) error {
			c, _ := n.Get()
			n.Set(c + 1)
			out.Emit(c + 1)
			return nil
		})
	keyed.ToSink(counts, "counts", kafkaio.NewSink(client, "click-counts", serde.Int64()))

	// snippet:mount
	// The service's own server, with kord's paths under /kord/.
	mux := http.NewServeMux()
	mux.Handle("/kord/", http.StripPrefix("/kord", kordhttp.Handler([]*keyed.Job{job})))
	srv := httptest.NewServer(mux) // http.ListenAndServe(":8080", mux) in a service
	defer srv.Close()
	// snippet:end

	if err := job.Run(ctx); err != nil {
		log.Fatal(err)
	}

	// snippet:scrape
	resp, err := http.Get(srv.URL + "/kord/metrics")
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	lines := bufio.NewScanner(resp.Body)
	for lines.Scan() {
		l := lines.Text()
		if strings.HasPrefix(l, "kord_stage_records_in_total{") || strings.HasPrefix(l, "kord_commit_lag_records{") {
			fmt.Println(l)
		}
	}
	// snippet:end
	for _, path := range []string{"/kord/healthz", "/kord/readyz"} {
		r, err := http.Get(srv.URL + path)
		if err != nil {
			log.Fatal(err)
		}
		b := new(strings.Builder)
		bufio.NewReader(r.Body).WriteTo(b)
		r.Body.Close()
		fmt.Printf("%s: %d %s", path, r.StatusCode, b)
	}

	// The same figures through OpenTelemetry: a manual reader here, a
	// periodic reader with an exporter in a service.
	// snippet:otel
	reader := sdkmetric.NewManualReader(sdkmetric.WithProducer(kordotel.Producer(job)))
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer provider.Shutdown(ctx)
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		log.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if sum, ok := m.Data.(metricdata.Sum[float64]); ok && m.Name == "kord_stage_records_in" {
				for _, dp := range sum.DataPoints {
					stage, _ := dp.Attributes.Value("stage")
					fmt.Printf("otel %s{stage=%s} %v\n", m.Name, stage.AsString(), dp.Value)
				}
			}
		}
	}
	// snippet:end

	// Output:
	// kord_commit_lag_records{kord_job="click-counts",stage="counts",topic="clicks"} 0
	// kord_stage_records_in_total{kind="operator",kord_job="click-counts",stage="count"} 6
	// kord_stage_records_in_total{kind="sink",kord_job="click-counts",stage="counts"} 6
	// kord_stage_records_in_total{kind="source",kord_job="click-counts",stage="clicks"} 6
	// /kord/healthz: 200 ok
	// /kord/readyz: 503 job click-counts is not running
	// otel kord_stage_records_in{stage=clicks} 6
	// otel kord_stage_records_in{stage=count} 6
	// otel kord_stage_records_in{stage=counts} 6
}

// produce writes one record per user, keyed by the user, with kord's producer.
func produce(ctx context.Context, c *kordtest.Cluster, topic string, users ...string) {
	p, err := producer.New(serde.String(), serde.String(), producer.Brokers(c.Brokers()...))
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()
	for _, u := range users {
		if err := p.Produce(ctx, producer.Record[string, string]{Topic: topic, Key: u, Value: "click"}, nil); err != nil {
			log.Fatal(err)
		}
	}
	if err := p.Flush(ctx); err != nil {
		log.Fatal(err)
	}
}

// A job as a service runs it: its log as JSON lines, a restart strategy,
// its figures on :8080, and SIGTERM for a graceful stop. Not run: it needs
// a broker.
func Example_service() {
	// snippet:service
	logger := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	client, err := kafkaio.NewClient(kafkaio.Brokers("kafka-1:9092", "kafka-2:9092"))
	if err != nil {
		log.Fatal(err)
	}
	job := keyed.NewJob("click-counts",
		keyed.Logger(logger), // the job's log, and its sources' and sink's clients'
		keyed.RestartStrategy(keyed.ExponentialBackoff(10, time.Second, time.Minute)),
		keyed.StopTimeout(30*time.Second)) // the final checkpoint on SIGTERM must commit within it
	clicks := keyed.FromSource(job, "clicks", 0, kafkaio.NewSource(client, "clicks", serde.String()))
	counts := keyed.ProcessValue(keyed.ByPartition(clicks), "count", 0, serde.Int64(),
		func(user []byte, _ string, n *keyed.ValueState[int64], out *keyed.Collector[int64]) error {
			c, _ := n.Get()
			n.Set(c + 1)
			out.Emit(c + 1)
			return nil
		})
	keyed.ToSink(counts, "counts", kafkaio.NewSink(client, "click-counts", serde.Int64()))

	srv, err := kordhttp.Serve(":8080", []*keyed.Job{job}, kordhttp.ReadyWithin(2*time.Minute))
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := job.Run(ctx); err != nil { // nil after a stop whose final checkpoint committed
		logger.Error("job failed", "err", err)
		os.Exit(1)
	}
	// snippet:end
}

// runlog keeps a run's log lines in memory, and sums up the warnings and
// errors in one line, for a command-line program that prints the log only
// when asked.
func Example_runlog() {
	// snippet:runlog
	book := runlog.New("click-counts", nil) // nil: no line is written as it comes
	logger := book.Logger()                 // keyed.Logger(logger), kafkaio.Logger(logger)
	logger.Info("keyed: recovery", "decision", "fresh start")
	logger.Warn("librdkafka: Connect to ipv4#127.0.0.1:9092 failed: Connection refused")
	logger.Warn("librdkafka: Connect to ipv4#127.0.0.1:9092 failed: Connection refused")
	fmt.Println(book.Summary())
	// snippet:end

	// Output:
	// click-counts: the Kafka clients logged 0 errors and 2 warnings; the last: librdkafka: Connect to ipv4#127.0.0.1:9092 failed: Connection refused
}
