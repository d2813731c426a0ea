package checkpoint

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Mode is the checkpointing mode of a job (Flink CheckpointingMode). The
// zero Mode is invalid, so the mode is always chosen explicitly.
type Mode int

const (
	// ExactlyOnce aligns barriers: an input that delivered barrier n is
	// blocked until barrier n has arrived on every input that has not
	// finished (DESIGN.md invariant 4). Flink's aligned
	// SingleCheckpointBarrierHandler.
	ExactlyOnce Mode = iota + 1
	// AtLeastOnce never blocks: checkpoint n is snapshotted when barrier n
	// has arrived on every input that has not finished, so its state may
	// include records behind the barrier. Several checkpoints may be tracked
	// at once. Flink's CheckpointBarrierTracker.
	AtLeastOnce
)

var modeNames = [...]string{"", "exactly-once", "at-least-once"}

func (m Mode) String() string {
	if m > 0 && int(m) < len(modeNames) {
		return modeNames[m]
	}
	return fmt.Sprintf("mode(%d)", int(m))
}

// AlignKind is what the runtime must do for an AlignEffect.
type AlignKind int

const (
	// AlignBlock: stop taking from Input; the records behind barrier ID on
	// it belong to the next checkpoint.
	AlignBlock AlignKind = iota + 1
	// AlignUnblock: take from Input again; checkpoint ID ended (snapshotted
	// or aborted).
	AlignUnblock
	// AlignSnapshot: every input not finished delivered barrier ID; snapshot
	// the operator's state for checkpoint ID and forward barrier ID
	// downstream, before processing anything else. Alignment is the time
	// from the first barrier ID to this effect.
	AlignSnapshot
	// AlignAbort: checkpoint ID will not be snapshotted by this operator
	// (Reason says why); decline it and, downstream, cancel it. Alignment is
	// the time spent aligning it (zero if no barrier ID arrived).
	AlignAbort
	// AlignIgnore: an obsolete barrier or cancellation; nothing to do.
	AlignIgnore
	// AlignAllFinished: every input has ended; no further checkpoint can
	// complete here.
	AlignAllFinished
	// AlignError: the event was a caller bug (Reason says which) and was
	// rejected without changing the aligner's state. AlignEffect.Err turns
	// it into an error.
	AlignError
)

var alignKindNames = [...]string{"", "block", "unblock", "snapshot", "abort", "ignore", "all-finished", "error"}

func (k AlignKind) String() string {
	if k > 0 && int(k) < len(alignKindNames) {
		return alignKindNames[k]
	}
	return fmt.Sprintf("align-kind(%d)", int(k))
}

// AlignReason is why a checkpoint was aborted, a barrier ignored or an event
// rejected, from a fixed set.
type AlignReason int

const (
	AlignReasonNone AlignReason = iota
	// AlignSubsumed: a newer checkpoint started (exactly-once) or completed,
	// or a newer one was cancelled (Flink CHECKPOINT_DECLINED_SUBSUMED).
	AlignSubsumed
	// AlignCancelled: the coordinator cancelled the checkpoint (Flink
	// CHECKPOINT_DECLINED_ON_CANCELLATION_BARRIER).
	AlignCancelled
	// AlignObsolete: a barrier or cancellation for a checkpoint that already
	// completed, was aborted, or is older than the newest one started.
	AlignObsolete

	// Caller bugs (AlignError).

	// AlignBadInput: the input is out of range.
	AlignBadInput
	// AlignInputFinished: an event after the input's end-of-input.
	AlignInputFinished
	// AlignInputBlocked: an event taken from a blocked input (exactly-once).
	AlignInputBlocked
	// AlignOutOfOrder: a barrier whose id is not above the previous barrier
	// on the same input (ids start at 1 and increase on every channel).
	AlignOutOfOrder
)

var alignReasonNames = [...]string{"none", "subsumed", "cancelled", "obsolete", "bad-input", "input-finished", "input-blocked", "out-of-order"}

func (r AlignReason) String() string {
	if r >= 0 && int(r) < len(alignReasonNames) {
		return alignReasonNames[r]
	}
	return fmt.Sprintf("align-reason(%d)", int(r))
}

// NoInput is AlignEffect.Input for effects that concern no single input.
const NoInput = -1

// AlignEffect is one instruction to the runtime.
type AlignEffect struct {
	Kind      AlignKind
	Input     int    // Block, Unblock, Error, barrier Ignore: the input concerned; else NoInput
	ID        uint64 // the checkpoint concerned; 0 for AllFinished and record errors
	Reason    AlignReason
	Alignment time.Duration // Snapshot and Abort: first barrier to this effect
}

func (e AlignEffect) String() string {
	var b strings.Builder
	b.WriteString(e.Kind.String())
	if e.ID != 0 {
		b.WriteByte(' ')
		b.WriteString(strconv.FormatUint(e.ID, 10))
	}
	if e.Input != NoInput || e.Kind == AlignBlock || e.Kind == AlignUnblock || e.Kind == AlignError {
		b.WriteString(" input=")
		b.WriteString(strconv.Itoa(e.Input))
	}
	if e.Reason != AlignReasonNone {
		b.WriteString(" reason=")
		b.WriteString(e.Reason.String())
	}
	if e.Kind == AlignSnapshot || e.Kind == AlignAbort {
		b.WriteString(" align=")
		b.WriteString(e.Alignment.String())
	}
	return b.String()
}

// Err returns the caller bug an AlignError effect reports, nil for other
// kinds.
func (e AlignEffect) Err() error {
	if e.Kind != AlignError {
		return nil
	}
	if e.ID != 0 {
		return fmt.Errorf("checkpoint: aligner rejected barrier %d on input %d: %s", e.ID, e.Input, e.Reason)
	}
	return fmt.Errorf("checkpoint: aligner rejected event on input %d: %s", e.Input, e.Reason)
}

// tracked is a checkpoint some, not all, of whose barriers have arrived.
type tracked struct {
	id      uint64
	first   time.Time // arrival of its first barrier
	seen    []bool    // inputs that delivered its barrier
	arrived int       // inputs in seen that have not finished
}

// Aligner is the barrier handling of one operator instance with n inputs as
// a pure state machine: no goroutines, no IO, time passed in. The runtime
// feeds it what it takes from each input channel (records, barriers,
// end-of-input) and the coordinator's cancellations, and carries out the
// effects it returns, in order: a Snapshot comes before the Unblocks that
// follow it, so no record behind a barrier is processed before the
// snapshot. The runtime never takes from an input while Blocked reports
// it; an event it should not have taken comes back as an AlignError.
//
// Checkpoint n is pending from its first barrier until it is snapshotted or
// aborted. Exactly-once mode has at most one pending checkpoint (Flink's
// SingleCheckpointBarrierHandler: a newer barrier subsumes it); at-least-once
// mode may track several (Flink's CheckpointBarrierTracker: a newer one
// completing subsumes the older ones). In both modes an input that ended
// counts as aligned for every checkpoint, so end-of-input can complete one
// (Flink's checkpoints after tasks finish, FLIP-147).
//
// In at-least-once mode the pending list holds the checkpoints started since
// the last one completed, cancelled or subsumed. Flink caps it at 50; kord
// needs no cap, since its coordinator has one checkpoint in flight and
// cancels the ones it aborts.
//
// The two alignment phases of Flink's BarrierHandlerState (waiting for the
// first barrier, collecting barriers) are "no pending checkpoint" and "one
// pending" here; without unaligned checkpoints and alignment timeouts, the
// pending list is all the state there is.
type Aligner struct {
	mode     Mode
	finished []bool
	last     []uint64 // id of the newest barrier on each input
	open     int      // inputs not finished
	top      uint64   // newest checkpoint id started or cancelled
	pending  []tracked
	spare    [][]bool // seen slices for reuse
}

// NewAligner returns an aligner for an operator instance with inputs
// inputs, before any barrier.
func NewAligner(mode Mode, inputs int) (*Aligner, error) {
	if mode != ExactlyOnce && mode != AtLeastOnce {
		return nil, fmt.Errorf("checkpoint: aligner mode %v is neither exactly-once nor at-least-once", mode)
	}
	if inputs < 1 {
		return nil, fmt.Errorf("checkpoint: aligner needs at least one input, got %d", inputs)
	}
	return &Aligner{mode: mode, finished: make([]bool, inputs), last: make([]uint64, inputs), open: inputs}, nil
}

// Mode returns the aligner's mode.
func (a *Aligner) Mode() Mode { return a.mode }

// Inputs returns the number of inputs.
func (a *Aligner) Inputs() int { return len(a.finished) }

// Blocked reports whether the runtime must not take from input: in
// exactly-once mode, the input delivered the barrier of the pending
// checkpoint. Never true in at-least-once mode or for an out-of-range input.
func (a *Aligner) Blocked(input int) bool {
	return a.mode == ExactlyOnce && len(a.pending) > 0 && input >= 0 && input < len(a.finished) && a.pending[0].seen[input]
}

// Finished reports whether input delivered its end-of-input.
func (a *Aligner) Finished(input int) bool {
	return input >= 0 && input < len(a.finished) && a.finished[input]
}

// Pending returns the newest pending checkpoint, if any: the one being
// aligned in exactly-once mode.
func (a *Aligner) Pending() (uint64, bool) {
	if len(a.pending) == 0 {
		return 0, false
	}
	return a.pending[len(a.pending)-1].id, true
}

// Record checks a record taken from input. It returns nil, or an AlignError
// when the runtime should not have taken it: an out-of-range, finished or
// (exactly-once) blocked input.
func (a *Aligner) Record(input int) []AlignEffect {
	if r := a.reject(input); r != AlignReasonNone {
		return []AlignEffect{{Kind: AlignError, Input: input, Reason: r}}
	}
	return nil
}

// Barrier handles barrier id taken from input at now.
func (a *Aligner) Barrier(input int, id uint64, now time.Time) []AlignEffect {
	r := a.reject(input)
	if r == AlignReasonNone && id <= a.last[input] {
		r = AlignOutOfOrder
	}
	if r != AlignReasonNone {
		return []AlignEffect{{Kind: AlignError, Input: input, ID: id, Reason: r}}
	}
	a.last[input] = id
	var out []AlignEffect
	k := a.find(id)
	if k < 0 {
		if id <= a.top {
			return []AlignEffect{{Kind: AlignIgnore, Input: input, ID: id, Reason: AlignObsolete}}
		}
		if a.mode == ExactlyOnce && len(a.pending) > 0 {
			out = a.abort(out, len(a.pending), AlignSubsumed, now)
			out = a.end(out, len(a.pending))
		}
		a.top = id
		a.pending = append(a.pending, tracked{id: id, first: now, seen: a.newSeen()})
		k = len(a.pending) - 1
	}
	p := &a.pending[k]
	if p.arrived+1 == a.open {
		// The last barrier: its input is never blocked.
		return a.complete(out, k, now)
	}
	p.seen[input] = true
	p.arrived++
	if a.mode == ExactlyOnce {
		out = append(out, AlignEffect{Kind: AlignBlock, Input: input, ID: id})
	}
	return out
}

// EndOfInput handles the end of input at now. The input counts as aligned
// for every checkpoint from here on, which may complete the pending one;
// AllFinished follows the last input's end.
func (a *Aligner) EndOfInput(input int, now time.Time) []AlignEffect {
	if r := a.reject(input); r != AlignReasonNone {
		return []AlignEffect{{Kind: AlignError, Input: input, Reason: r}}
	}
	a.finished[input] = true
	a.open--
	for i := range a.pending {
		if a.pending[i].seen[input] {
			a.pending[i].arrived--
		}
	}
	var out []AlignEffect
	// The newest checkpoint now complete is snapshotted; older ones are
	// subsumed (Flink CheckpointBarrierTracker on end of partition).
	for k := len(a.pending) - 1; k >= 0; k-- {
		if a.pending[k].arrived == a.open {
			out = a.complete(out, k, now)
			break
		}
	}
	if a.open == 0 {
		out = append(out, AlignEffect{Kind: AlignAllFinished, Input: NoInput})
	}
	return out
}

// Cancel handles the coordinator's cancellation of checkpoint id at now:
// pending checkpoints older than id are aborted as subsumed, id itself as
// cancelled (also when none of its barriers has arrived yet, so that they
// are obsolete when they come), and the inputs they blocked are unblocked.
// A cancellation of an id neither pending nor newer than every id seen is
// obsolete.
func (a *Aligner) Cancel(id uint64, now time.Time) []AlignEffect {
	k := 0
	for k < len(a.pending) && a.pending[k].id < id {
		k++
	}
	var out []AlignEffect
	out = a.abort(out, k, AlignSubsumed, now)
	n := k
	switch {
	case k < len(a.pending) && a.pending[k].id == id:
		out = append(out, AlignEffect{Kind: AlignAbort, Input: NoInput, ID: id, Reason: AlignCancelled, Alignment: now.Sub(a.pending[k].first)})
		n = k + 1
	case id > a.top:
		out = append(out, AlignEffect{Kind: AlignAbort, Input: NoInput, ID: id, Reason: AlignCancelled})
	default:
		out = append(out, AlignEffect{Kind: AlignIgnore, Input: NoInput, ID: id, Reason: AlignObsolete})
	}
	out = a.end(out, n)
	a.top = max(a.top, id)
	return out
}

// reject returns why an event taken from input is a caller bug, if it is.
func (a *Aligner) reject(input int) AlignReason {
	switch {
	case input < 0 || input >= len(a.finished):
		return AlignBadInput
	case a.finished[input]:
		return AlignInputFinished
	case a.Blocked(input):
		return AlignInputBlocked
	}
	return AlignReasonNone
}

// find returns the index of pending checkpoint id, or -1.
func (a *Aligner) find(id uint64) int {
	for i := range a.pending {
		if a.pending[i].id == id {
			return i
		}
	}
	return -1
}

// complete snapshots pending[k], aborting the older pending checkpoints as
// subsumed, and ends them all.
func (a *Aligner) complete(out []AlignEffect, k int, now time.Time) []AlignEffect {
	p := &a.pending[k]
	grow := k + 1 // aborts and the snapshot
	if a.mode == ExactlyOnce {
		grow += p.arrived // unblocks
	}
	out = slices.Grow(out, grow)
	out = a.abort(out, k, AlignSubsumed, now)
	out = append(out, AlignEffect{Kind: AlignSnapshot, Input: NoInput, ID: p.id, Alignment: now.Sub(p.first)})
	return a.end(out, k+1)
}

// abort appends an Abort for each of pending[:k].
func (a *Aligner) abort(out []AlignEffect, k int, r AlignReason, now time.Time) []AlignEffect {
	for i := range k {
		p := &a.pending[i]
		out = append(out, AlignEffect{Kind: AlignAbort, Input: NoInput, ID: p.id, Reason: r, Alignment: now.Sub(p.first)})
	}
	return out
}

// end removes pending[:k], appending the Unblocks they release in
// exactly-once mode (only pending[0] can block), in ascending input order.
func (a *Aligner) end(out []AlignEffect, k int) []AlignEffect {
	if k == 0 {
		return out
	}
	if a.mode == ExactlyOnce {
		p := &a.pending[0]
		for i, s := range p.seen {
			if s && !a.finished[i] {
				out = append(out, AlignEffect{Kind: AlignUnblock, Input: i, ID: p.id})
			}
		}
	}
	for i := range k {
		a.spare = append(a.spare, a.pending[i].seen)
	}
	n := copy(a.pending, a.pending[k:])
	clear(a.pending[n:])
	a.pending = a.pending[:n]
	return out
}

// newSeen returns a cleared per-input slice, reusing an ended checkpoint's.
func (a *Aligner) newSeen() []bool {
	if n := len(a.spare); n > 0 {
		s := a.spare[n-1]
		a.spare[n-1] = nil
		a.spare = a.spare[:n-1]
		clear(s)
		return s
	}
	return make([]bool, len(a.finished))
}
