// Package kordotel exports what running jobs are doing through
// OpenTelemetry: [Producer] hands a reader of the OpenTelemetry SDK the
// samples of kord's collectors (keyed.Job, and anything else that is a
// [metrics.Collector]) at each collection, as kordhttp serves them to
// Prometheus. kord's core imports no metrics SDK; this package is the
// edge where one is met.
//
//	reader := sdkmetric.NewPeriodicReader(exporter, sdkmetric.WithProducer(kordotel.Producer(job)))
//	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
//
// The metrics keep the names /metrics gives them, but for the _total of
// a counter, which OpenTelemetry's names leave to the exporter (its
// Prometheus exporter adds it back). A counter is a cumulative monotonic
// sum from when Producer was made; a gauge a gauge. Each sample's labels
// become its attributes.
package kordotel

import (
	"context"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/kordproject/kord/metrics"
)

// Scope is the instrumentation scope of kord's metrics.
const Scope = "github.com/kordproject/kord"

// Producer returns an OpenTelemetry producer of the collectors' samples,
// for a reader (sdkmetric.WithProducer).
func Producer(cs ...metrics.Collector) sdkmetric.Producer {
	return &producer{cs: cs, start: time.Now()}
}

type producer struct {
	cs    []metrics.Collector
	start time.Time
}

// Produce implements sdkmetric.Producer: one collection of every
// collector, each metric's samples its data points.
func (p *producer) Produce(ctx context.Context) ([]metricdata.ScopeMetrics, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	now := time.Now()
	var order []string
	byName := map[string]*metricdata.Metrics{}
	for _, c := range p.cs {
		c.Collect(func(s metrics.Sample) {
			name := s.Name
			if s.Kind == metrics.Counter {
				name = strings.TrimSuffix(name, "_total")
			}
			m := byName[name]
			if m == nil {
				m = &metricdata.Metrics{Name: name, Description: s.Help, Unit: unitOf(name)}
				if s.Kind == metrics.Counter {
					m.Data = metricdata.Sum[float64]{Temporality: metricdata.CumulativeTemporality, IsMonotonic: true}
				} else {
					m.Data = metricdata.Gauge[float64]{}
				}
				byName[name] = m
				order = append(order, name)
			}
			dp := metricdata.DataPoint[float64]{Attributes: attributesOf(s.Labels), StartTime: p.start, Time: now, Value: s.Value}
			switch d := m.Data.(type) {
			case metricdata.Sum[float64]:
				d.DataPoints = append(d.DataPoints, dp)
				m.Data = d
			case metricdata.Gauge[float64]:
				dp.StartTime = time.Time{}
				d.DataPoints = append(d.DataPoints, dp)
				m.Data = d
			}
		})
	}
	sm := metricdata.ScopeMetrics{Scope: instrumentation.Scope{Name: Scope}}
	for _, name := range order {
		sm.Metrics = append(sm.Metrics, *byName[name])
	}
	return []metricdata.ScopeMetrics{sm}, nil
}

// unitOf is the UCUM unit of a metric named in Prometheus' way.
func unitOf(name string) string {
	switch {
	case strings.HasSuffix(name, "_seconds"):
		return "s"
	case strings.HasSuffix(name, "_bytes"):
		return "By"
	case strings.HasSuffix(name, "_records"):
		return "{record}"
	}
	return ""
}

func attributesOf(ls []metrics.Label) attribute.Set {
	kv := make([]attribute.KeyValue, len(ls))
	for i, l := range ls {
		kv[i] = attribute.String(l.Name, l.Value)
	}
	return attribute.NewSet(kv...)
}
