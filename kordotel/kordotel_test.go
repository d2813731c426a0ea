package kordotel_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/kordproject/kord/internal/rig/testjob"
	"github.com/kordproject/kord/keyed"
	"github.com/kordproject/kord/keyed/connector"
	"github.com/kordproject/kord/kordotel"
	"github.com/kordproject/kord/metrics"
	"github.com/kordproject/kord/partitioner"
	"github.com/kordproject/kord/vfs"
)

// TestProducer: a job's figures read by an OpenTelemetry SDK reader. Every
// sample the job collects is a data point, with its labels as attributes
// and its value; counters are cumulative monotonic sums without _total,
// gauges gauges; units follow the names' suffixes.
func TestProducer(t *testing.T) {
	const parts, n = 2, 300
	src := keyed.NewMemorySource[testjob.Event]("events", parts, false)
	for i := range n {
		u := fmt.Sprintf("user-%d", i%10)
		src.Append(partitioner.KeyPartition([]byte(u), parts), []byte(u), testjob.Event{UUID: u, Seq: int64(i / 10)})
	}
	sink := keyed.NewMemorySink[testjob.Result]()
	j := keyed.NewJob("counts", keyed.FS(vfs.NewMem()), keyed.Dir("/ckpt"), keyed.CheckpointInterval(10*time.Millisecond))
	s := keyed.FromSource(j, "events", 1, connector.Source[testjob.Event](src))
	out := keyed.Process(keyed.ByPartition(s), "count", 1, func() keyed.Operator[testjob.Event, testjob.Result] { return &testjob.Counter{} })
	keyed.ToSink(out, "results", connector.Sink[testjob.Result](sink))

	reader := sdkmetric.NewManualReader(sdkmetric.WithProducer(kordotel.Producer(j)))
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer provider.Shutdown(context.Background())

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- j.Run(ctx) }()
	require.Eventually(t, func() bool { return len(sink.Committed()) == n }, 30*time.Second, 5*time.Millisecond)
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	running := find(t, rm, "kord_job_running")
	require.Equal(t, 1.0, running.Data.(metricdata.Gauge[float64]).DataPoints[0].Value)
	cancel()
	require.NoError(t, <-done)

	// Stopped, the figures hold still: each sample is a data point.
	require.NoError(t, reader.Collect(context.Background(), &rm))
	var samples []metrics.Sample
	j.Collect(func(s metrics.Sample) { samples = append(samples, s) })
	require.NotEmpty(t, samples)
	for _, s := range samples {
		name := s.Name
		if s.Kind == metrics.Counter {
			name = strings.TrimSuffix(name, "_total")
		}
		m := find(t, rm, name)
		var points []metricdata.DataPoint[float64]
		if s.Kind == metrics.Counter {
			sum, ok := m.Data.(metricdata.Sum[float64])
			require.True(t, ok, "%s is a sum", name)
			require.True(t, sum.IsMonotonic)
			require.Equal(t, metricdata.CumulativeTemporality, sum.Temporality)
			points = sum.DataPoints
		} else {
			g, ok := m.Data.(metricdata.Gauge[float64])
			require.True(t, ok, "%s is a gauge", name)
			points = g.DataPoints
		}
		found := false
		for _, p := range points {
			match := p.Attributes.Len() == len(s.Labels)
			for _, l := range s.Labels {
				v, ok := p.Attributes.Value(attributeKey(l.Name))
				match = match && ok && v.AsString() == l.Value
			}
			if match {
				require.Equal(t, s.Value, p.Value, "%s %v", name, s.Labels)
				found = true
			}
		}
		require.True(t, found, "%s %v has no data point", name, s.Labels)
	}
	in := find(t, rm, "kord_stage_records_in").Data.(metricdata.Sum[float64])
	require.Len(t, in.DataPoints, 3) // events, count, results
	require.Equal(t, "s", find(t, rm, "kord_checkpoint_last_duration_seconds").Unit)
	require.Equal(t, "By", find(t, rm, "kord_checkpoint_last_size_bytes").Unit)
}

func find(t *testing.T, rm metricdata.ResourceMetrics, name string) metricdata.Metrics {
	t.Helper()
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == name {
				require.Equal(t, kordotel.Scope, sm.Scope.Name)
				return m
			}
		}
	}
	t.Fatalf("no metric %s", name)
	return metricdata.Metrics{}
}

func attributeKey(name string) attribute.Key { return attribute.Key(name) }
