package keyed

import (
	"fmt"
	"time"

	"github.com/kordproject/kord/keyed/internal/timerq"
	"github.com/kordproject/kord/serde"
)

// TimerKind says what clock a timer follows.
type TimerKind uint8

const (
	// EventTime timers fire when the operator task's watermark reaches
	// their time (Flink's TimerService.registerEventTimeTimer).
	EventTime TimerKind = iota + 1
	// ProcessingTime timers fire when the wall clock reaches their time
	// (Flink's registerProcessingTimeTimer; Kafka Streams' punctuators
	// with WALL_CLOCK_TIME).
	ProcessingTime
)

func (k TimerKind) String() string {
	switch k {
	case EventTime:
		return "event time"
	case ProcessingTime:
		return "processing time"
	}
	return fmt.Sprintf("TimerKind(%d)", uint8(k))
}

// Timer is a timer that fired: its clock and its time.
type Timer struct {
	Kind TimerKind
	Time time.Time
}

// TimerOperator is an Operator with timers (Flink's KeyedProcessFunction
// onTimer). Process and OnTimer register and delete timers of the current
// key through their Collector (RegisterTimer, DeleteTimer). Each
// registration fires once: an event-time timer when the task's watermark
// reaches its time, a processing-time timer when the wall clock does, with
// the timer's key current (its keyed state, and out's Key) and
// out.Timestamp the timer's time. Registering a key's timer again for the
// same time and clock changes nothing.
//
// Timers are keyed state: snapshotted with the key group, restored after a
// crash and at another parallelism, so a timer fires once in the committed
// output whatever fails (a timer that fired in an epoch that did not commit
// is restored and fires again, as the epoch's records are replayed).
type TimerOperator[T, O any] interface {
	Operator[T, O]
	// OnTimer is called when timer t of key fires.
	OnTimer(key []byte, t Timer, out *Collector[O]) error
}

// timer state names: "__" is kord's (validateName refuses it to users).
const (
	eventTimersState      = "__timers-event"
	processingTimersState = "__timers-processing"
)

// timers is an operator task's timer service: each clock's timers as keyed
// map state (time in Unix milliseconds → 1), the truth that snapshots and
// restores, and a queue per clock for finding the next due, rebuilt from
// the state after a restore. A queue entry whose timer is no longer in the
// state (deleted, or a duplicate of one that fired) is dropped when it
// comes up.
type timers struct {
	b     *Backend
	state map[TimerKind]*MapState[int64, int64]
	queue map[TimerKind]*timerq.Queue
}

// newTimers registers the timer states on b: before a restore, as any
// state.
func newTimers(b *Backend) (*timers, error) {
	t := &timers{b: b, state: map[TimerKind]*MapState[int64, int64]{}, queue: map[TimerKind]*timerq.Queue{}}
	for kind, name := range map[TimerKind]string{EventTime: eventTimersState, ProcessingTime: processingTimersState} {
		enc := func(dst, scratch []byte, m map[int64]int64) ([]byte, []byte, error) {
			return appendMap(dst, scratch, serde.Int64(), serde.Int64(), m)
		}
		dec := func(b []byte) (map[int64]int64, error) { return decodeMap(b, serde.Int64(), serde.Int64()) }
		s, err := registerState(b, name, kindMap, "key="+serde.Int64().Fingerprint()+";value="+serde.Int64().Fingerprint(), enc, dec)
		if err != nil {
			return nil, err
		}
		t.state[kind] = &MapState[int64, int64]{s: s}
		t.queue[kind] = &timerq.Queue{}
	}
	return t, nil
}

// rebuild fills the queues from the timer states (after a restore).
func (t *timers) rebuild() {
	for kind, st := range t.state {
		t.queue[kind].Rebuild(func(add func(timerq.Entry)) {
			st.s.each(func(kg int, key string, m map[int64]int64) {
				for at := range m {
					add(timerq.Entry{At: at, Key: key, KG: kg})
				}
			})
		})
	}
}

// register adds a timer of the backend's current key.
func (t *timers) register(kind TimerKind, at int64) {
	key, kg := t.b.currentKey()
	st := t.state[kind]
	if st.Contains(at) {
		return
	}
	st.Put(at, 1)
	t.queue[kind].Push(timerq.Entry{At: at, Key: string(key), KG: kg})
}

// remove deletes a timer of the backend's current key.
func (t *timers) remove(kind TimerKind, at int64) {
	t.state[kind].Delete(at)
}

// fire calls fn, with the timer's key current, for every timer of kind
// due at now (Unix milliseconds), oldest first, deleting each from the
// state before its call; timers fn registers that are due fire too.
func (t *timers) fire(kind TimerKind, now int64, fn func(key []byte, at int64) error) error {
	q := t.queue[kind]
	for q.Due(now) {
		e := q.Pop()
		key := []byte(e.Key)
		t.b.setCurrentKey(key, e.KG)
		st := t.state[kind]
		if !st.Contains(e.At) {
			continue // deleted, or a duplicate entry of one that fired
		}
		st.Delete(e.At)
		if err := fn(key, e.At); err != nil {
			return err
		}
	}
	return nil
}

// RegisterTimer registers a timer of the current key (the record's, or
// the firing timer's) on clock kind at time at, to fire once (see
// TimerOperator). It fails the task if the operator is no TimerOperator.
func (c *Collector[O]) RegisterTimer(kind TimerKind, at time.Time) {
	if c.err != nil {
		return
	}
	if err := c.checkTimers(kind); err != nil {
		c.err = err
		return
	}
	c.timers.register(kind, at.UnixMilli())
}

// DeleteTimer deletes the current key's timer on clock kind at time at, if
// it is registered and has not fired.
func (c *Collector[O]) DeleteTimer(kind TimerKind, at time.Time) {
	if c.err != nil {
		return
	}
	if err := c.checkTimers(kind); err != nil {
		c.err = err
		return
	}
	c.timers.remove(kind, at.UnixMilli())
}

func (c *Collector[O]) checkTimers(kind TimerKind) error {
	if c.timers == nil {
		return fmt.Errorf("keyed: a timer registered by an operator that has no OnTimer (it is no keyed.TimerOperator)")
	}
	if kind != EventTime && kind != ProcessingTime {
		return fmt.Errorf("keyed: timer of unknown kind %v", kind)
	}
	return nil
}
