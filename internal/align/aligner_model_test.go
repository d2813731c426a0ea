package align

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kordproject/kord/checkpoint"
)

// alignModel is a deliberately plain reference for Aligner (in the manner of
// raft's quorum/quick_test.go): it keeps the whole history of accepted
// events and the outcome decided for each checkpoint, and recomputes
// everything else (finished inputs, pending checkpoints, arrivals, blocked
// inputs) from them by brute force on every question.
type alignModel struct {
	mode    checkpoint.Mode
	n       int
	history []modelEvent
	outcome map[uint64]Kind // Snapshot or Abort, once decided
}

type modelEvent struct {
	kind    string // "barrier", "end", "cancel"
	input   int
	id      uint64
	at      time.Time
	counted bool // barrier: not obsolete
}

func (m *alignModel) finished(i int) bool {
	for _, e := range m.history {
		if e.kind == "end" && e.input == i {
			return true
		}
	}
	return false
}

func (m *alignModel) allFinished() bool {
	for i := range m.n {
		if !m.finished(i) {
			return false
		}
	}
	return true
}

func (m *alignModel) lastBarrier(i int) uint64 {
	var last uint64
	for _, e := range m.history {
		if e.kind == "barrier" && e.input == i {
			last = max(last, e.id)
		}
	}
	return last
}

// top is the newest id any barrier or cancellation carried.
func (m *alignModel) top() uint64 {
	var top uint64
	for _, e := range m.history {
		if e.kind == "barrier" || e.kind == "cancel" {
			top = max(top, e.id)
		}
	}
	return top
}

// arrived is the set of inputs whose barrier c counted.
func (m *alignModel) arrived(c uint64) map[int]bool {
	s := map[int]bool{}
	for _, e := range m.history {
		if e.kind == "barrier" && e.counted && e.id == c {
			s[e.input] = true
		}
	}
	return s
}

// first is when checkpoint c's first counted barrier arrived.
func (m *alignModel) first(c uint64) (time.Time, bool) {
	for _, e := range m.history {
		if e.kind == "barrier" && e.counted && e.id == c {
			return e.at, true
		}
	}
	return time.Time{}, false
}

// pending lists, ascending, the checkpoints with a counted barrier and no
// outcome yet.
func (m *alignModel) pending() []uint64 {
	var ids []uint64
	for _, e := range m.history {
		if e.kind == "barrier" && e.counted && !slices.Contains(ids, e.id) {
			if _, decided := m.outcome[e.id]; !decided {
				ids = append(ids, e.id)
			}
		}
	}
	slices.Sort(ids)
	return ids
}

func (m *alignModel) blocked(i int) bool {
	if m.mode != checkpoint.ExactlyOnce {
		return false
	}
	for _, c := range m.pending() {
		if m.arrived(c)[i] {
			return true
		}
	}
	return false
}

func (m *alignModel) reject(i int) Reason {
	switch {
	case i < 0 || i >= m.n:
		return BadInput
	case m.finished(i):
		return InputFinished
	case m.blocked(i):
		return InputBlocked
	}
	return NoReason
}

// decide records the outcome of c and returns its effect.
func (m *alignModel) decide(c uint64, kind Kind, r Reason, now time.Time) Effect {
	m.outcome[c] = kind
	e := Effect{Kind: kind, Input: NoInput, ID: c, Reason: r}
	if t, ok := m.first(c); ok {
		e.Alignment = now.Sub(t)
	}
	return e
}

// settle snapshots the newest pending checkpoint whose barrier is on every
// input that has not finished, and aborts the pending ones older than it.
func (m *alignModel) settle(now time.Time) []Effect {
	pend := m.pending()
	for k := len(pend) - 1; k >= 0; k-- {
		c := pend[k]
		arr := m.arrived(c)
		complete := true
		for i := range m.n {
			if !arr[i] && !m.finished(i) {
				complete = false
			}
		}
		if !complete {
			continue
		}
		var out []Effect
		for _, older := range pend[:k] {
			out = append(out, m.decide(older, Abort, Subsumed, now))
		}
		return append(out, m.decide(c, Snapshot, NoReason, now))
	}
	return nil
}

func (m *alignModel) record(i int) []Effect {
	if r := m.reject(i); r != NoReason {
		return []Effect{{Kind: Error, Input: i, Reason: r}}
	}
	return nil
}

func (m *alignModel) barrier(i int, c uint64, now time.Time) []Effect {
	r := m.reject(i)
	if r == NoReason && c <= m.lastBarrier(i) {
		r = OutOfOrder
	}
	if r != NoReason {
		return []Effect{{Kind: Error, Input: i, ID: c, Reason: r}}
	}
	var out []Effect
	pend := m.pending()
	switch {
	case slices.Contains(pend, c):
	case c <= m.top():
		m.history = append(m.history, modelEvent{kind: "barrier", input: i, id: c, at: now})
		return []Effect{{Kind: Ignore, Input: i, ID: c, Reason: Obsolete}}
	case m.mode == checkpoint.ExactlyOnce:
		for _, p := range pend {
			out = append(out, m.decide(p, Abort, Subsumed, now))
		}
	}
	m.history = append(m.history, modelEvent{kind: "barrier", input: i, id: c, at: now, counted: true})
	return append(out, m.settle(now)...)
}

func (m *alignModel) end(i int, now time.Time) []Effect {
	if r := m.reject(i); r != NoReason {
		return []Effect{{Kind: Error, Input: i, Reason: r}}
	}
	m.history = append(m.history, modelEvent{kind: "end", input: i, at: now})
	out := m.settle(now)
	if m.allFinished() {
		out = append(out, Effect{Kind: AllFinished, Input: NoInput})
	}
	return out
}

func (m *alignModel) cancel(c uint64, now time.Time) []Effect {
	var out []Effect
	pend := m.pending()
	for _, p := range pend {
		if p < c {
			out = append(out, m.decide(p, Abort, Subsumed, now))
		}
	}
	switch {
	case slices.Contains(pend, c) || c > m.top():
		out = append(out, m.decide(c, Abort, Cancelled, now))
	default:
		out = append(out, Effect{Kind: Ignore, Input: NoInput, ID: c, Reason: Obsolete})
	}
	m.history = append(m.history, modelEvent{kind: "cancel", id: c, at: now})
	return out
}

// TestAlignerMatchesModel feeds the Aligner and the model the same random
// event sequences, valid and invalid, in both modes, and compares after
// every event: the checkpoints snapshotted and aborted (in order, with
// reasons and alignment times), ignored and rejected events, the blocked
// and finished inputs and the pending checkpoint. It also checks that the
// Block and Unblock effects, applied in order, track Blocked exactly, and
// that an Unblock never precedes the Snapshot or Abort that releases it.
func TestAlignerMatchesModel(t *testing.T) {
	seen := map[string]int{}
	seeds := uint64(2000)
	if testing.Short() {
		seeds = 200
	}
	for _, mode := range []checkpoint.Mode{checkpoint.ExactlyOnce, checkpoint.AtLeastOnce} {
		for seed := range seeds {
			compareWithModel(t, mode, seed, seen)
		}
	}
	// The generator must reach every outcome, or the comparison proves
	// little.
	for _, k := range []string{
		"snapshot", "abort/subsumed", "abort/cancelled", "ignore/obsolete", "all-finished",
		"error/bad-input", "error/input-finished", "error/input-blocked", "error/out-of-order",
		"block", "unblock",
	} {
		require.Positive(t, seen[k], "no %s effect generated", k)
	}
	t.Logf("effects generated: %v", seen)
}

func compareWithModel(t *testing.T, mode checkpoint.Mode, seed uint64, seen map[string]int) {
	rng := rand.New(rand.NewPCG(seed, uint64(mode)))
	n := 1 + rng.IntN(4)
	a, err := New(mode, n)
	require.NoError(t, err)
	m := &alignModel{mode: mode, n: n, outcome: map[uint64]Kind{}}
	mirror := make([]bool, n) // blocked inputs as the Block/Unblock effects say
	now := time.Unix(0, 0)
	var trace []string
	pickInput := func() int {
		if rng.IntN(10) > 0 {
			var ok []int
			for i := range n {
				if !m.finished(i) && !m.blocked(i) {
					ok = append(ok, i)
				}
			}
			if len(ok) > 0 {
				return ok[rng.IntN(len(ok))]
			}
		}
		return rng.IntN(n+2) - 1
	}
	pickID := func(input int) uint64 {
		top := m.top()
		if rng.IntN(6) == 0 || input < 0 || input >= n {
			return uint64(rng.IntN(int(top) + 3))
		}
		lo := m.lastBarrier(input) + 1
		return lo + uint64(rng.IntN(int(top+3-min(lo, top+2))))
	}
	for step := range 1 + rng.IntN(60) {
		if m.allFinished() && rng.IntN(4) == 0 {
			break // little is left to test once every input ended
		}
		now = now.Add(time.Duration(rng.IntN(5)) * time.Millisecond)
		var got, want []Effect
		var ev string
		switch r := rng.IntN(24); {
		case r < 11:
			i := pickInput()
			id := pickID(i)
			ev = fmt.Sprintf("barrier %d input=%d", id, i)
			got, want = a.Barrier(i, id, now), m.barrier(i, id, now)
		case r < 19:
			i := pickInput()
			ev = fmt.Sprintf("record input=%d", i)
			got, want = a.Record(i), m.record(i)
		case r < 21:
			i := pickInput()
			ev = fmt.Sprintf("end input=%d", i)
			got, want = a.EndOfInput(i, now), m.end(i, now)
		default:
			id := uint64(rng.IntN(int(m.top()) + 3))
			ev = fmt.Sprintf("cancel %d", id)
			got, want = a.Cancel(id, now), m.cancel(id, now)
		}
		trace = append(trace, fmt.Sprintf("%s at=%v", ev, now.Sub(time.Unix(0, 0))))
		where := lazy(func() string {
			return fmt.Sprintf("mode %v seed %d step %d, inputs=%d, trace:\n%s\ngot %v", mode, seed, step, n, strings.Join(trace, "\n"), got)
		})

		var outcomes []Effect
		ended := map[uint64]bool{}
		for _, e := range got {
			key := e.Kind.String()
			if e.Reason != NoReason {
				key += "/" + e.Reason.String()
			}
			seen[key]++
			switch e.Kind {
			case Block:
				require.False(t, mirror[e.Input], "block of a blocked input: %s", where)
				mirror[e.Input] = true
			case Unblock:
				require.True(t, mirror[e.Input], "unblock of an unblocked input: %s", where)
				require.True(t, ended[e.ID], "unblock before its checkpoint ended: %s", where)
				mirror[e.Input] = false
			default:
				if e.Kind == Snapshot || e.Kind == Abort {
					ended[e.ID] = true
				}
				outcomes = append(outcomes, e)
			}
		}
		require.Equal(t, want, outcomes, "%v", where)
		for i := range n {
			require.Equal(t, m.blocked(i), a.Blocked(i), "blocked(%d): %s", i, where)
			require.Equal(t, mirror[i], a.Blocked(i), "effects vs Blocked(%d): %s", i, where)
			require.Equal(t, m.finished(i), a.Finished(i), "finished(%d): %s", i, where)
		}
		pend := m.pending()
		id, ok := a.Pending()
		require.Equal(t, len(pend) > 0, ok, "pending: %s", where)
		if ok {
			require.Equal(t, pend[len(pend)-1], id, "pending: %s", where)
		}
		if mode == checkpoint.ExactlyOnce {
			require.LessOrEqual(t, len(pend), 1, "exactly-once tracks one checkpoint: %s", where)
		}
	}
}

// lazy formats a failure message only when it is printed.
type lazy func() string

func (f lazy) String() string { return f() }
