package timerq

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestQueueOrder: entries come out by time, whether pushed one by one or
// rebuilt at once, and Due holds exactly while the earliest is due.
func TestQueueOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var ats []int64
	for range 500 {
		ats = append(ats, r.Int64N(100))
	}
	want := slices.Sorted(slices.Values(ats))
	var pushed, rebuilt Queue
	for _, at := range ats {
		pushed.Push(Entry{At: at})
	}
	rebuilt.Push(Entry{At: -1}) // replaced by Rebuild
	rebuilt.Rebuild(func(add func(Entry)) {
		for _, at := range ats {
			add(Entry{At: at})
		}
	})
	for _, q := range []*Queue{&pushed, &rebuilt} {
		if q.Len() != len(ats) {
			t.Fatalf("Len = %d, want %d", q.Len(), len(ats))
		}
		if q.Due(want[0] - 1) {
			t.Fatalf("due before the earliest time %d", want[0])
		}
		var got []int64
		for q.Due(100) {
			got = append(got, q.Pop().At)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("popped %v, want %v", got, want)
		}
	}
}
