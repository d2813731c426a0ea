package main

import (
	"math"
	"testing"
	"time"
)

// TestTimeOutput: a run whose output becomes visible a commit a second,
// 1,000 offsets each, from 2.05 s to 11.05 s (10,000 in all), then idles
// while the verifier catches up: the steady and whole-run rates, the
// first output, the CPU times at the end of the output (not at the end of
// verification) and a series that adds up to the events.
func TestTimeOutput(t *testing.T) {
	start := time.Unix(1_000_000, 0)
	var samples []sample
	for ms := 100; ms <= 20_000; ms += 100 {
		at := time.Duration(ms) * time.Millisecond
		var off int64 // commits at 2.05 s, 3.05 s, ... 11.05 s
		if at > 2050*time.Millisecond {
			off = 1000 * min(int64((at-2050*time.Millisecond)/time.Second)+1, 10)
		}
		samples = append(samples, sample{at: start.Add(at), offsets: off, cpu: at / 2, brokerCPU: at / 4})
	}
	var f figures
	timeOutput(&f, samples, start, 10_000, true, time.Second)
	near := func(name string, got, want float64) {
		t.Helper()
		if math.Abs(got-want) > want*0.01 {
			t.Errorf("%s: got %v, want %v", name, got, want)
		}
	}
	near("steady events/s", f.SteadyEventsPerSec, 1000)
	near("events/s", f.EventsPerSec, 10_000/11.1)
	near("first output s", f.FirstOutputSec, 2.1)
	near("CPU s", f.CPUSec, 11.1/2)
	near("broker CPU s", f.BrokerCPUSec, 11.1/4-1)
	var sum float64
	for _, r := range f.Series {
		sum += r * f.SeriesStepSec
	}
	near("series total", sum, 10_000)
	near("series at 5.25 s", f.Series[20], 4000)
	near("series at 5.5 s", f.Series[21], 0)
	if got := len(f.Series); got != 45 {
		t.Errorf("series of %d steps, want 45 (to 11.25 s)", got)
	}
}
