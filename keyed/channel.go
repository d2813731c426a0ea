package keyed

import (
	"errors"
	"math"
	"time"
)

// errStopped is what a send returns when the run stopped meanwhile.
var errStopped = errors.New("keyed: run stopped")

// element is one record in flight between tasks, with its key and key
// group computed once, at the source task.
type element[T any] struct {
	v   T
	key []byte
	kg  int32
	ts  int64 // the record's time, Unix milliseconds; noTime if none
}

// noTime is an element's ts when its record has no time, and a watermark
// that is none yet; endOfTime is the watermark after a bounded input's end.
const (
	noTime    = math.MinInt64
	endOfTime = math.MaxInt64
)

// timeMillis is t as an element's ts.
func timeMillis(t time.Time) int64 {
	if t.IsZero() {
		return noTime
	}
	return t.UnixMilli()
}

// message is what travels on a channel between two tasks: a batch of
// records, then optionally a barrier. A barrier is always sent after every
// record before it (it never overtakes one), in its own message or at the
// end of the batch it follows. A run ends by its context, after the final
// checkpoint: no end-of-input message is needed.
type message[T any] struct {
	from    int // the upstream task's index among the inbox's upstreams
	elems   []element[T]
	barrier uint64
	// wm is the sender's watermark after elems (Unix milliseconds; noTime
	// if it has none): no later record of the sender is meant to be older.
	// It travels in the message after the records, so it never overtakes
	// one.
	wm int64
	// idle: every partition of the sender is idle (Stream.Idleness): the
	// receiver leaves it out of its watermark until it sends otherwise.
	idle bool
}

// inbox is a task's one inbound queue. Each upstream holds credits: it may
// have at most Credits messages outstanding to this task, and gets one back
// when this task has processed (not merely received) one of its messages.
// A task that blocks an input during alignment keeps that input's messages
// aside, so the input's upstream runs out of credits and stops, while the
// other inputs flow: one blocked input backpressures only its own upstream.
// The queue's capacity covers every credit, so a send never blocks once a
// credit is held.
type inbox[T any] struct {
	ch      chan message[T]
	credits []chan struct{}
}

func newInbox[T any](upstreams, credits int) *inbox[T] {
	in := &inbox[T]{ch: make(chan message[T], upstreams*credits), credits: make([]chan struct{}, upstreams)}
	for u := range in.credits {
		in.credits[u] = make(chan struct{}, credits)
		for range credits {
			in.credits[u] <- struct{}{}
		}
	}
	return in
}

// send delivers m from upstream u once u holds a credit, or returns
// errStopped when stop closes first.
func (in *inbox[T]) send(stop <-chan struct{}, u int, m message[T]) error {
	select {
	case <-in.credits[u]:
	case <-stop:
		return errStopped
	}
	m.from = u
	in.ch <- m
	return nil
}

// done returns upstream u's credit for a processed message.
func (in *inbox[T]) done(u int) { in.credits[u] <- struct{}{} }

// outbox batches one task's output per downstream task. Its sends give up
// when stop (the run's end) closes.
type outbox[T any] struct {
	stop      <-chan struct{}
	dst       []*inbox[T]
	from      []int // this task's upstream index at each dst
	bufs      [][]element[T]
	batch     int
	lastFlush time.Time
	wm        int64   // this task's watermark (advance)
	sentWm    []int64 // the watermark each dst last got
	idle      bool    // this task's idleness (setIdle)
	sentIdle  []bool  // the idleness each dst last got
}

func newOutbox[T any](stop <-chan struct{}, dst []*inbox[T], from []int, batch int) *outbox[T] {
	o := &outbox[T]{stop: stop, dst: dst, from: from, bufs: make([][]element[T], len(dst)), batch: batch, lastFlush: time.Now(),
		wm: noTime, sentWm: make([]int64, len(dst)), sentIdle: make([]bool, len(dst))}
	for i := range o.bufs {
		o.bufs[i] = make([]element[T], 0, batch)
		o.sentWm[i] = noTime
	}
	return o
}

// advance raises the task's watermark to wm (never lowers it); it goes
// out with the next message to each downstream task, after the records
// before it.
func (o *outbox[T]) advance(wm int64) {
	o.wm = max(o.wm, wm)
}

// setIdle sets whether every partition of this task is idle; the change
// goes out with the next message to each downstream task.
func (o *outbox[T]) setIdle(idle bool) { o.idle = idle }

func (o *outbox[T]) add(d int, e element[T]) error {
	o.bufs[d] = append(o.bufs[d], e)
	if len(o.bufs[d]) >= o.batch {
		return o.flush(d)
	}
	return nil
}

// flush sends downstream d its pending records, and the watermark if it
// advanced since d last got it: a message with no records carries a
// watermark alone.
func (o *outbox[T]) flush(d int) error {
	if !o.due(d) {
		return nil
	}
	m := message[T]{elems: o.bufs[d], wm: o.wm, idle: o.idle}
	if len(m.elems) > 0 {
		o.bufs[d] = make([]element[T], 0, o.batch)
	} else {
		m.elems = nil
	}
	o.sentWm[d], o.sentIdle[d] = o.wm, o.idle
	return o.dst[d].send(o.stop, o.from[d], m)
}

// due reports whether flush(d) would send anything: records in a partial
// batch, or a watermark or idleness downstream d has not got.
func (o *outbox[T]) due(d int) bool {
	return len(o.bufs[d]) > 0 || o.sentWm[d] < o.wm || o.sentIdle[d] != o.idle
}

// pending reports whether a flush would send anything to some downstream.
func (o *outbox[T]) pending() bool {
	for d := range o.bufs {
		if o.due(d) {
			return true
		}
	}
	return false
}

func (o *outbox[T]) flushAll() error {
	o.lastFlush = time.Now()
	for d := range o.bufs {
		if err := o.flush(d); err != nil {
			return err
		}
	}
	return nil
}

// flushDue flushes partial batches older than timeout.
func (o *outbox[T]) flushDue(timeout time.Duration) error {
	if time.Since(o.lastFlush) < timeout {
		return nil
	}
	return o.flushAll()
}

// broadcast sends each downstream its pending records followed by the
// barrier.
func (o *outbox[T]) broadcast(barrier uint64) error {
	o.lastFlush = time.Now()
	for d := range o.dst {
		m := message[T]{elems: o.bufs[d], barrier: barrier, wm: o.wm, idle: o.idle}
		o.sentWm[d], o.sentIdle[d] = o.wm, o.idle
		if len(o.bufs[d]) > 0 {
			o.bufs[d] = make([]element[T], 0, o.batch)
		} else {
			m.elems = nil
		}
		if err := o.dst[d].send(o.stop, o.from[d], m); err != nil {
			return err
		}
	}
	return nil
}

// Collector sends an operator's results downstream, and tells it about the
// record it is processing (its context, as Flink's ProcessFunction.Context
// and Kafka Streams' ProcessorContext do).
type Collector[O any] struct {
	out    *outbox[O]
	err    error
	key    []byte
	ts     int64
	wm     int64
	timers *timers // nil unless the operator is a TimerOperator
}

// Emit sends v on. It blocks while downstream is backpressured, until the
// run stops.
func (c *Collector[O]) Emit(v O) {
	if c.err != nil {
		return
	}
	c.err = c.out.add(0, element[O]{v: v})
}

// Timestamp is the time of the record being processed, at millisecond
// precision (Kafka's): its Kafka timestamp, or what Stream.Timestamps
// extracted; the zero time if it has none.
func (c *Collector[O]) Timestamp() time.Time {
	if c.ts == noTime {
		return time.Time{}
	}
	return time.UnixMilli(c.ts)
}

// Watermark is the operator task's event-time watermark: the minimum of
// the watermarks its inputs sent (Stream.Watermarks), so that a record
// older than it is late. The zero time while some input has sent none (or
// none of the job's sources makes watermarks); far in the future once
// every bounded input ended. It never goes backwards within a run.
func (c *Collector[O]) Watermark() time.Time {
	if c.wm == noTime {
		return time.Time{}
	}
	return time.UnixMilli(c.wm)
}

// Key is the key of the record being processed, as Process gets it:
// read-only and valid only during the call.
func (c *Collector[O]) Key() []byte { return c.key }
