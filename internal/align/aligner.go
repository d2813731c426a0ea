package align

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/kordproject/kord/checkpoint"
)

// Kind is what the runtime must do for an Effect.
type Kind int

const (
	// Block: stop taking from Input; the records behind barrier ID on
	// it belong to the next checkpoint.
	Block Kind = iota + 1
	// Unblock: take from Input again; checkpoint ID ended (snapshotted
	// or aborted).
	Unblock
	// Snapshot: every input not finished delivered barrier ID; snapshot
	// the operator's state for checkpoint ID and forward barrier ID
	// downstream, before processing anything else. Alignment is the time
	// from the first barrier ID to this effect.
	Snapshot
	// Abort: checkpoint ID will not be snapshotted by this operator
	// (Reason says why); decline it and, downstream, cancel it. Alignment is
	// the time spent aligning it (zero if no barrier ID arrived).
	Abort
	// Ignore: an obsolete barrier or cancellation; nothing to do.
	Ignore
	// AllFinished: every input has ended; no further checkpoint can
	// complete here.
	AllFinished
	// Error: the event was a caller bug (Reason says which) and was
	// rejected without changing the aligner's state. Effect.Err turns
	// it into an error.
	Error
)

var kindNames = [...]string{"", "block", "unblock", "snapshot", "abort", "ignore", "all-finished", "error"}

func (k Kind) String() string {
	if k > 0 && int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("align-kind(%d)", int(k))
}

// Reason is why a checkpoint was aborted, a barrier ignored or an event
// rejected, from a fixed set.
type Reason int

const (
	NoReason Reason = iota
	// Subsumed: a newer checkpoint started (exactly-once) or completed,
	// or a newer one was cancelled (Flink CHECKPOINT_DECLINED_SUBSUMED).
	Subsumed
	// Cancelled: the coordinator cancelled the checkpoint (Flink
	// CHECKPOINT_DECLINED_ON_CANCELLATION_BARRIER).
	Cancelled
	// Obsolete: a barrier or cancellation for a checkpoint that already
	// completed, was aborted, or is older than the newest one started.
	Obsolete

	// Caller bugs (Error).

	// BadInput: the input is out of range.
	BadInput
	// InputFinished: an event after the input's end-of-input.
	InputFinished
	// InputBlocked: an event taken from a blocked input (exactly-once).
	InputBlocked
	// OutOfOrder: a barrier whose id is not above the previous barrier
	// on the same input (ids start at 1 and increase on every channel).
	OutOfOrder
)

var reasonNames = [...]string{"none", "subsumed", "cancelled", "obsolete", "bad-input", "input-finished", "input-blocked", "out-of-order"}

func (r Reason) String() string {
	if r >= 0 && int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return fmt.Sprintf("align-reason(%d)", int(r))
}

// NoInput is Effect.Input for effects that concern no single input.
const NoInput = -1

// Effect is one instruction to the runtime.
type Effect struct {
	Kind      Kind
	Input     int    // Block, Unblock, Error, barrier Ignore: the input concerned; else NoInput
	ID        uint64 // the checkpoint concerned; 0 for AllFinished and record errors
	Reason    Reason
	Alignment time.Duration // Snapshot and Abort: first barrier to this effect
}

func (e Effect) String() string {
	var b strings.Builder
	b.WriteString(e.Kind.String())
	if e.ID != 0 {
		b.WriteByte(' ')
		b.WriteString(strconv.FormatUint(e.ID, 10))
	}
	if e.Input != NoInput || e.Kind == Block || e.Kind == Unblock || e.Kind == Error {
		b.WriteString(" input=")
		b.WriteString(strconv.Itoa(e.Input))
	}
	if e.Reason != NoReason {
		b.WriteString(" reason=")
		b.WriteString(e.Reason.String())
	}
	if e.Kind == Snapshot || e.Kind == Abort {
		b.WriteString(" align=")
		b.WriteString(e.Alignment.String())
	}
	return b.String()
}

// Err returns the caller bug an Error effect reports, nil for other
// kinds.
func (e Effect) Err() error {
	if e.Kind != Error {
		return nil
	}
	if e.ID != 0 {
		return fmt.Errorf("align: rejected barrier %d on input %d: %s", e.ID, e.Input, e.Reason)
	}
	return fmt.Errorf("align: rejected event on input %d: %s", e.Input, e.Reason)
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
// it; an event it should not have taken comes back as an Error.
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
	mode     checkpoint.Mode
	finished []bool
	last     []uint64 // id of the newest barrier on each input
	open     int      // inputs not finished
	top      uint64   // newest checkpoint id started or cancelled
	pending  []tracked
	spare    [][]bool // seen slices for reuse
}

// New returns an aligner for an operator instance with inputs
// inputs, before any barrier.
func New(mode checkpoint.Mode, inputs int) (*Aligner, error) {
	if mode != checkpoint.ExactlyOnce && mode != checkpoint.AtLeastOnce {
		return nil, fmt.Errorf("align: mode %v is neither exactly-once nor at-least-once", mode)
	}
	if inputs < 1 {
		return nil, fmt.Errorf("align: needs at least one input, got %d", inputs)
	}
	return &Aligner{mode: mode, finished: make([]bool, inputs), last: make([]uint64, inputs), open: inputs}, nil
}

// Mode returns the aligner's mode.
func (a *Aligner) Mode() checkpoint.Mode { return a.mode }

// Inputs returns the number of inputs.
func (a *Aligner) Inputs() int { return len(a.finished) }

// Blocked reports whether the runtime must not take from input: in
// exactly-once mode, the input delivered the barrier of the pending
// checkpoint. Never true in at-least-once mode or for an out-of-range input.
func (a *Aligner) Blocked(input int) bool {
	return a.mode == checkpoint.ExactlyOnce && len(a.pending) > 0 && input >= 0 && input < len(a.finished) && a.pending[0].seen[input]
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

// Record checks a record taken from input. It returns nil, or an Error
// when the runtime should not have taken it: an out-of-range, finished or
// (exactly-once) blocked input.
func (a *Aligner) Record(input int) []Effect {
	if r := a.reject(input); r != NoReason {
		return []Effect{{Kind: Error, Input: input, Reason: r}}
	}
	return nil
}

// Barrier handles barrier id taken from input at now.
func (a *Aligner) Barrier(input int, id uint64, now time.Time) []Effect {
	r := a.reject(input)
	if r == NoReason && id <= a.last[input] {
		r = OutOfOrder
	}
	if r != NoReason {
		return []Effect{{Kind: Error, Input: input, ID: id, Reason: r}}
	}
	a.last[input] = id
	var out []Effect
	k := a.find(id)
	if k < 0 {
		if id <= a.top {
			return []Effect{{Kind: Ignore, Input: input, ID: id, Reason: Obsolete}}
		}
		if a.mode == checkpoint.ExactlyOnce && len(a.pending) > 0 {
			out = a.abort(out, len(a.pending), Subsumed, now)
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
	if a.mode == checkpoint.ExactlyOnce {
		out = append(out, Effect{Kind: Block, Input: input, ID: id})
	}
	return out
}

// EndOfInput handles the end of input at now. The input counts as aligned
// for every checkpoint from here on, which may complete the pending one;
// AllFinished follows the last input's end.
func (a *Aligner) EndOfInput(input int, now time.Time) []Effect {
	if r := a.reject(input); r != NoReason {
		return []Effect{{Kind: Error, Input: input, Reason: r}}
	}
	a.finished[input] = true
	a.open--
	for i := range a.pending {
		if a.pending[i].seen[input] {
			a.pending[i].arrived--
		}
	}
	var out []Effect
	// The newest checkpoint now complete is snapshotted; older ones are
	// subsumed (Flink CheckpointBarrierTracker on end of partition).
	for k := len(a.pending) - 1; k >= 0; k-- {
		if a.pending[k].arrived == a.open {
			out = a.complete(out, k, now)
			break
		}
	}
	if a.open == 0 {
		out = append(out, Effect{Kind: AllFinished, Input: NoInput})
	}
	return out
}

// Cancel handles the coordinator's cancellation of checkpoint id at now:
// pending checkpoints older than id are aborted as subsumed, id itself as
// cancelled (also when none of its barriers has arrived yet, so that they
// are obsolete when they come), and the inputs they blocked are unblocked.
// A cancellation of an id neither pending nor newer than every id seen is
// obsolete.
func (a *Aligner) Cancel(id uint64, now time.Time) []Effect {
	k := 0
	for k < len(a.pending) && a.pending[k].id < id {
		k++
	}
	var out []Effect
	out = a.abort(out, k, Subsumed, now)
	n := k
	switch {
	case k < len(a.pending) && a.pending[k].id == id:
		out = append(out, Effect{Kind: Abort, Input: NoInput, ID: id, Reason: Cancelled, Alignment: now.Sub(a.pending[k].first)})
		n = k + 1
	case id > a.top:
		out = append(out, Effect{Kind: Abort, Input: NoInput, ID: id, Reason: Cancelled})
	default:
		out = append(out, Effect{Kind: Ignore, Input: NoInput, ID: id, Reason: Obsolete})
	}
	out = a.end(out, n)
	a.top = max(a.top, id)
	return out
}

// reject returns why an event taken from input is a caller bug, if it is.
func (a *Aligner) reject(input int) Reason {
	switch {
	case input < 0 || input >= len(a.finished):
		return BadInput
	case a.finished[input]:
		return InputFinished
	case a.Blocked(input):
		return InputBlocked
	}
	return NoReason
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
func (a *Aligner) complete(out []Effect, k int, now time.Time) []Effect {
	p := &a.pending[k]
	grow := k + 1 // aborts and the snapshot
	if a.mode == checkpoint.ExactlyOnce {
		grow += p.arrived // unblocks
	}
	out = slices.Grow(out, grow)
	out = a.abort(out, k, Subsumed, now)
	out = append(out, Effect{Kind: Snapshot, Input: NoInput, ID: p.id, Alignment: now.Sub(p.first)})
	return a.end(out, k+1)
}

// abort appends an Abort for each of pending[:k].
func (a *Aligner) abort(out []Effect, k int, r Reason, now time.Time) []Effect {
	for i := range k {
		p := &a.pending[i]
		out = append(out, Effect{Kind: Abort, Input: NoInput, ID: p.id, Reason: r, Alignment: now.Sub(p.first)})
	}
	return out
}

// end removes pending[:k], appending the Unblocks they release in
// exactly-once mode (only pending[0] can block), in ascending input order.
func (a *Aligner) end(out []Effect, k int) []Effect {
	if k == 0 {
		return out
	}
	if a.mode == checkpoint.ExactlyOnce {
		p := &a.pending[0]
		for i, s := range p.seen {
			if s && !a.finished[i] {
				out = append(out, Effect{Kind: Unblock, Input: i, ID: p.id})
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
