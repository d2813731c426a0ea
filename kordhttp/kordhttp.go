// Package kordhttp serves what running jobs are doing over HTTP, for a
// service to mount on its own server, as net/http/pprof's handlers are:
// their metrics in Prometheus' text format (through client_golang), a
// liveness check and a readiness check. kord starts no server of its own.
//
//	mux.Handle("/kord/", http.StripPrefix("/kord", kordhttp.Handler([]*keyed.Job{job})))
//
// Paths: / (a status page: each job's stages, tasks, last checkpoints and
// lag), /metrics, /healthz (200 while the process serves), /readyz (200
// while every job runs and has committed a checkpoint within [ReadyWithin],
// 503 otherwise, naming the job and why).
package kordhttp

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/kordproject/kord/keyed"
	"github.com/kordproject/kord/metrics"
)

// Opt configures Handler.
type Opt func(*config)

type config struct {
	ready      time.Duration
	collectors []metrics.Collector
	runtime    bool
}

// ReadyWithin sets how recent a job's last committed checkpoint must be
// for /readyz to answer 200. Default: a minute.
func ReadyWithin(d time.Duration) Opt { return func(c *config) { c.ready = d } }

// Collectors adds more collectors to /metrics beside the jobs'.
func Collectors(cs ...metrics.Collector) Opt {
	return func(c *config) { c.collectors = append(c.collectors, cs...) }
}

// WithoutRuntime leaves the Go runtime's and the process's metrics
// (go_*, process_*) out of /metrics, for a service that exports them
// itself.
func WithoutRuntime() Opt { return func(c *config) { c.runtime = false } }

// Handler serves jobs (see the package doc).
func Handler(jobs []*keyed.Job, opts ...Opt) http.Handler {
	cfg := config{ready: time.Minute, runtime: true}
	for _, o := range opts {
		o(&cfg)
	}
	cs := append([]metrics.Collector(nil), cfg.collectors...)
	for _, j := range jobs {
		cs = append(cs, j)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(Collector(cs...))
	if cfg.runtime {
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}))
	mux.HandleFunc("GET /{$}", cfg.status(jobs))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if why := notReady(jobs, cfg.ready, time.Now()); why != "" {
			http.Error(w, why, http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	return mux
}

// notReady says why the jobs are not ready at now, "" when they are.
func notReady(jobs []*keyed.Job, within time.Duration, now time.Time) string {
	var why []string
	for _, j := range jobs {
		st := j.Status()
		switch {
		case !st.Running:
			why = append(why, fmt.Sprintf("job %s is not running", j.Name()))
		case st.LastCommitted.IsZero():
			why = append(why, fmt.Sprintf("job %s has committed no checkpoint yet", j.Name()))
		case now.Sub(st.LastCommitted) > within:
			why = append(why, fmt.Sprintf("job %s last committed a checkpoint %v ago (ReadyWithin %v)", j.Name(), now.Sub(st.LastCommitted).Round(time.Millisecond), within))
		}
	}
	return strings.Join(why, "\n")
}

// Collector is a Prometheus collector of kord's collectors: at each
// scrape it reads their samples (an unchecked collector: the series are
// what the jobs have).
func Collector(cs ...metrics.Collector) prometheus.Collector { return collector(cs) }

type collector []metrics.Collector

func (collector) Describe(chan<- *prometheus.Desc) {}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	for _, k := range c {
		k.Collect(func(s metrics.Sample) {
			names := make([]string, len(s.Labels))
			values := make([]string, len(s.Labels))
			for i, l := range s.Labels {
				names[i], values[i] = l.Name, l.Value
			}
			desc := prometheus.NewDesc(s.Name, s.Help, names, nil)
			vt := prometheus.GaugeValue
			if s.Kind == metrics.Counter {
				vt = prometheus.CounterValue
			}
			m, err := prometheus.NewConstMetric(desc, vt, s.Value, values...)
			if err != nil {
				m = prometheus.NewInvalidMetric(desc, err)
			}
			ch <- m
		})
	}
}
