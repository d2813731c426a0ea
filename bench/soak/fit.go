package main

import (
	"fmt"
	"math"
)

// csvHeader names the columns of sample.csv; a kill is a line "kill,t".
const csvHeader = "t,life,life_t,rss_mib,hwm_mib,fds,goroutines,handles,disk_mib,reported,heap_mib"

func (s sample) csv() string {
	return fmt.Sprintf("%.1f,%d,%.1f,%.2f,%.2f,%.0f,%.0f,%.0f,%.4f,%t,%.2f", s.t, s.life, s.lifeT, s.rss, s.hwm, s.fds, s.goroutines, s.handles, s.disk, s.haveReports, s.heap)
}

// sample is one look at the job process.
type sample struct {
	t           float64 // seconds since the run began
	life        int     // the incarnation: 0 for the first process, +1 per restart
	lifeT       float64 // seconds since this incarnation began
	rss, hwm    float64 // MiB: VmRSS, VmHWM
	fds         float64 // entries of /proc/PID/fd
	goroutines  float64 // runtime.NumGoroutine, as the job reports it (-stats)
	handles     float64 // cluster.OpenHandles, as the job reports it
	heap        float64 // MiB: the Go heap's objects, as the job reports it (RSS less it: librdkafka and the runtime)
	disk        float64 // MiB: the checkpoint directory's files
	haveReports bool    // goroutines and handles were reported in this incarnation
}

// pooledSlope is the least-squares slope of y against t shared by every
// incarnation, each with an intercept of its own (a fixed-effects fit):
// Σ(t-t̄ᵢ)(y-ȳᵢ) / Σ(t-t̄ᵢ)², the means taken per incarnation. A process
// that starts again at its fresh size after each SIGKILL then shows no
// slope from the restarts themselves, only from growth within each life.
// Only the samples keep accepts count. ok is false with fewer than two
// distinct times in any incarnation kept.
func pooledSlope(ss []sample, y func(sample) float64, keep func(sample) bool) (slope float64, ok bool) {
	type acc struct{ n, t, y float64 }
	means := map[int]*acc{}
	for _, s := range ss {
		if !keep(s) {
			continue
		}
		a := means[s.life]
		if a == nil {
			a = &acc{}
			means[s.life] = a
		}
		a.n++
		a.t += s.t
		a.y += y(s)
	}
	var num, den float64
	for _, s := range ss {
		if !keep(s) {
			continue
		}
		a := means[s.life]
		dt := s.t - a.t/a.n
		num += dt * (y(s) - a.y/a.n)
		den += dt * dt
	}
	if den == 0 || math.IsNaN(num) {
		return 0, false
	}
	return num / den, true
}
