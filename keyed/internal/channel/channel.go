// Package channel is how records travel between the tasks of a kord run:
// batches of elements, then optionally a barrier, on a FIFO per (upstream
// task, downstream task), with credit-based flow control (DESIGN.md, "Data
// flow"). A barrier never overtakes a record, nor a record a barrier, and
// watermarks travel behind the records they follow.
package channel

import (
	"errors"
	"math"
	"sync/atomic"
	"time"
)

// ErrStopped is what a send returns when the run stopped meanwhile.
var ErrStopped = errors.New("keyed: run stopped")

// Element is one record in flight between tasks, with its key and key
// group computed once, at the source task.
type Element[T any] struct {
	V   T
	Key []byte
	KG  int32
	TS  int64 // the record's time, Unix milliseconds; NoTime if none
}

// NoTime is an Element's TS when its record has no time, and a watermark
// that is none yet; EndOfTime is the watermark after a bounded input's end.
const (
	NoTime    = math.MinInt64
	EndOfTime = math.MaxInt64
)

// TimeMillis is t as an Element's TS.
func TimeMillis(t time.Time) int64 {
	if t.IsZero() {
		return NoTime
	}
	return t.UnixMilli()
}

// Message is what travels on a channel between two tasks: a batch of
// records, then optionally a barrier. A barrier is always sent after every
// record before it (it never overtakes one), in its own Message or at the
// end of the batch it follows. A run ends by its context, after the final
// checkpoint: no end-of-input Message is needed.
type Message[T any] struct {
	From    int // the upstream task's index among the inbox's upstreams
	Elems   []Element[T]
	Barrier uint64
	// WM is the sender's watermark after Elems (Unix milliseconds; NoTime
	// if it has none): no later record of the sender is meant to be older.
	// It travels in the message after the records, so it never overtakes
	// one.
	WM int64
	// Idle: every partition of the sender is idle (keyed's
	// Stream.Idleness): the receiver leaves it out of its watermark until
	// it sends otherwise.
	Idle bool
}

// Inbox is a task's one inbound queue. Each upstream holds credits: it may
// have at most Credits messages outstanding to this task, and gets one back
// when this task has processed (not merely received) one of its messages.
// A task that blocks an input during alignment keeps that input's messages
// aside, so the input's upstream runs out of credits and stops, while the
// other inputs flow: one blocked input backpressures only its own upstream.
// The queue's capacity covers every credit, so a send never blocks once a
// credit is held.
type Inbox[T any] struct {
	C       chan Message[T]
	credits []chan struct{}
}

func NewInbox[T any](upstreams, credits int) *Inbox[T] {
	in := &Inbox[T]{C: make(chan Message[T], upstreams*credits), credits: make([]chan struct{}, upstreams)}
	for u := range in.credits {
		in.credits[u] = make(chan struct{}, credits)
		for range credits {
			in.credits[u] <- struct{}{}
		}
	}
	return in
}

// Send delivers m from upstream u once u holds a credit, or returns
// ErrStopped when stop closes first.
func (in *Inbox[T]) Send(stop <-chan struct{}, u int, m Message[T]) error {
	select {
	case <-in.credits[u]:
	case <-stop:
		return ErrStopped
	}
	m.From = u
	in.C <- m
	return nil
}

// Done returns upstream u's credit for a processed message.
func (in *Inbox[T]) Done(u int) { in.credits[u] <- struct{}{} }

// Upstreams is the number of upstream tasks.
func (in *Inbox[T]) Upstreams() int { return len(in.credits) }

// Outbox batches one task's output per downstream task. Its sends give up
// when stop (the run's end) closes.
type Outbox[T any] struct {
	stop      <-chan struct{}
	dst       []*Inbox[T]
	from      []int // this task's upstream index at each dst
	bufs      [][]Element[T]
	batch     int
	lastFlush time.Time
	wm        int64   // this task's watermark (Advance)
	sentWm    []int64 // the watermark each dst last got
	idle      bool    // this task's idleness (SetIdle)
	sentIdle  []bool  // the idleness each dst last got
	blocked   *atomic.Int64
}

// CountBlocked adds the time the outbox's sends wait for a credit to c
// (nanoseconds): the task's backpressure.
func (o *Outbox[T]) CountBlocked(c *atomic.Int64) { o.blocked = c }

// send sends m to downstream d, counting the time it waits for a credit.
func (o *Outbox[T]) send(d int, m Message[T]) error {
	in, u := o.dst[d], o.from[d]
	select {
	case <-in.credits[u]:
		m.From = u
		in.C <- m
		return nil
	default:
	}
	began := time.Now()
	err := in.Send(o.stop, u, m)
	if o.blocked != nil {
		o.blocked.Add(int64(time.Since(began)))
	}
	return err
}

func NewOutbox[T any](stop <-chan struct{}, dst []*Inbox[T], from []int, batch int) *Outbox[T] {
	o := &Outbox[T]{stop: stop, dst: dst, from: from, bufs: make([][]Element[T], len(dst)), batch: batch, lastFlush: time.Now(),
		wm: NoTime, sentWm: make([]int64, len(dst)), sentIdle: make([]bool, len(dst))}
	for i := range o.bufs {
		o.bufs[i] = make([]Element[T], 0, batch)
		o.sentWm[i] = NoTime
	}
	return o
}

// Advance raises the task's watermark to wm (never lowers it); it goes
// out with the next message to each downstream task, after the records
// before it.
func (o *Outbox[T]) Advance(wm int64) {
	o.wm = max(o.wm, wm)
}

// SetIdle sets whether every partition of this task is idle; the change
// goes out with the next message to each downstream task.
func (o *Outbox[T]) SetIdle(idle bool) { o.idle = idle }

func (o *Outbox[T]) Add(d int, e Element[T]) error {
	o.bufs[d] = append(o.bufs[d], e)
	if len(o.bufs[d]) >= o.batch {
		return o.Flush(d)
	}
	return nil
}

// Flush sends downstream d its pending records, and the watermark if it
// advanced since d last got it: a message with no records carries a
// watermark alone.
func (o *Outbox[T]) Flush(d int) error {
	if !o.Due(d) {
		return nil
	}
	m := Message[T]{Elems: o.bufs[d], WM: o.wm, Idle: o.idle}
	if len(m.Elems) > 0 {
		o.bufs[d] = make([]Element[T], 0, o.batch)
	} else {
		m.Elems = nil
	}
	o.sentWm[d], o.sentIdle[d] = o.wm, o.idle
	return o.send(d, m)
}

// Due reports whether Flush(d) would send anything: records in a partial
// batch, or a watermark or idleness downstream d has not got.
func (o *Outbox[T]) Due(d int) bool {
	return len(o.bufs[d]) > 0 || o.sentWm[d] < o.wm || o.sentIdle[d] != o.idle
}

// Pending reports whether a flush would send anything to some downstream.
func (o *Outbox[T]) Pending() bool {
	for d := range o.bufs {
		if o.Due(d) {
			return true
		}
	}
	return false
}

func (o *Outbox[T]) FlushAll() error {
	o.lastFlush = time.Now()
	for d := range o.bufs {
		if err := o.Flush(d); err != nil {
			return err
		}
	}
	return nil
}

// FlushDue flushes partial batches older than timeout.
func (o *Outbox[T]) FlushDue(timeout time.Duration) error {
	if time.Since(o.lastFlush) < timeout {
		return nil
	}
	return o.FlushAll()
}

// Broadcast sends each downstream its pending records followed by the
// barrier.
func (o *Outbox[T]) Broadcast(barrier uint64) error {
	o.lastFlush = time.Now()
	for d := range o.dst {
		m := Message[T]{Elems: o.bufs[d], Barrier: barrier, WM: o.wm, Idle: o.idle}
		o.sentWm[d], o.sentIdle[d] = o.wm, o.idle
		if len(o.bufs[d]) > 0 {
			o.bufs[d] = make([]Element[T], 0, o.batch)
		} else {
			m.Elems = nil
		}
		if err := o.send(d, m); err != nil {
			return err
		}
	}
	return nil
}

// Blocker tells which inputs are blocked for barrier alignment
// (internal/align's Aligner).
type Blocker interface {
	Blocked(input int) bool
}

// Stash holds, per input, the messages that arrived while the input was
// blocked for alignment, in order. Their credits are returned only when
// they are processed, so a blocked input's upstream stops after Credits
// messages.
type Stash[T any] [][]Message[T]

// NewStash returns an empty stash for inputs inputs.
func NewStash[T any](inputs int) Stash[T] { return make(Stash[T], inputs) }

// Pop returns the oldest stashed message of an input no longer blocked.
func (s Stash[T]) Pop(b Blocker) (Message[T], bool) {
	for u := range s {
		if len(s[u]) > 0 && !b.Blocked(u) {
			m := s[u][0]
			s[u] = s[u][1:]
			return m, true
		}
	}
	return Message[T]{}, false
}

// Keep stashes m if its input is blocked and reports whether it did. (An
// unblocked input's stash is always empty here: Pop drains it first.)
func (s Stash[T]) Keep(b Blocker, m Message[T]) bool {
	if !b.Blocked(m.From) {
		return false
	}
	s[m.From] = append(s[m.From], m)
	return true
}
