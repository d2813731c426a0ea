package keyed

import (
	"fmt"
	"testing"

	"github.com/kordproject/kord/keyed/internal/keygroup"
)

// timerKeys returns n distinct 36-byte keys and their key groups.
func timerKeys(n, maxP int) ([][]byte, []int) {
	keys, kgs := make([][]byte, n), make([]int, n)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "%08x-0000-4000-8000-%012x", i, i)
		kgs[i] = keygroup.Of(keys[i], maxP)
	}
	return keys, kgs
}

// BenchmarkTimers1M: a million keys each holding one event-time timer
// (128 key groups, one task): registering them, snapshotting and encoding
// the timer state, and firing them all. Each figure is per timer.
//
//	go test -run XXX -bench BenchmarkTimers1M -benchtime 3x ./keyed/
func BenchmarkTimers1M(b *testing.B) {
	const n, maxP = 1_000_000, 128
	keys, kgs := timerKeys(n, maxP)
	var register, snapshot, fire float64
	var bytes int
	for b.Loop() {
		be, err := newBackend("op", maxP, keygroup.Range{Start: 0, End: maxP - 1})
		if err != nil {
			b.Fatal(err)
		}
		tm, err := newTimers(be)
		if err != nil {
			b.Fatal(err)
		}
		t0 := b.Elapsed()
		for i, k := range keys {
			be.setCurrentKey(k, kgs[i])
			tm.register(EventTime, int64(i))
		}
		t1 := b.Elapsed()
		snap := be.takeSnapshot()
		files, err := snap.Encode("0123456789abcdef", 1, 2)
		if err != nil {
			b.Fatal(err)
		}
		snap.Release()
		t2 := b.Elapsed()
		fired := 0
		if err := tm.fire(EventTime, n, func([]byte, int64) error { fired++; return nil }); err != nil {
			b.Fatal(err)
		}
		t3 := b.Elapsed()
		if fired != n {
			b.Fatalf("fired %d of %d", fired, n)
		}
		register += float64(t1 - t0)
		snapshot += float64(t2 - t1)
		fire += float64(t3 - t2)
		bytes = 0
		for _, f := range files {
			bytes += len(f)
		}
	}
	per := float64(b.N) * n
	b.ReportMetric(register/per, "register-ns/timer")
	b.ReportMetric(snapshot/per, "snapshot-ns/timer")
	b.ReportMetric(fire/per, "fire-ns/timer")
	b.ReportMetric(float64(bytes)/n, "snapshot-B/timer")
}
