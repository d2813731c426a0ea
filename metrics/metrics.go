// Package metrics is how kord reports what a running job does. Its parts
// keep plain counters and gauges (atomics a task adds to once per batch,
// never an allocation per record), and an exporter reads them when it is
// scraped, through [Collector]. kord's core imports no metrics SDK: the
// exporters sit at the edge like connectors (kordhttp serves Prometheus'
// text format through client_golang).
//
// Names follow Prometheus' conventions (kord_ prefix, base units, _total
// on counters). Labels are bounded: the job (kord_job: Prometheus keeps
// job and instance for its own target labels), a stage's name and kind,
// never a run id, a client name or a transactional id, which change with
// every recovery.
package metrics

// Kind says what a sample's value is.
type Kind uint8

const (
	// Counter only goes up (within a process): a total.
	Counter Kind = iota
	// Gauge is a value now.
	Gauge
)

// Label is a sample's label.
type Label struct{ Name, Value string }

// Sample is one value of one series.
type Sample struct {
	Name   string
	Help   string
	Kind   Kind
	Labels []Label
	Value  float64
}

// Collector gives its samples to emit, at scrape time. It may be called
// from any goroutine, while the job runs.
type Collector interface {
	Collect(emit func(Sample))
}
