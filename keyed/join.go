package keyed

import (
	"errors"
	"fmt"
	"github.com/kordproject/kord/keyed/internal/channel"
	"slices"
	"time"

	"github.com/kordproject/kord/serde"
)

// CoOperator is a keyed operator of two inputs keyed alike (Flink's
// KeyedCoProcessFunction): ProcessLeft is called for each record of the
// left stream, ProcessRight for each of the right, one at a time, with
// the keyed state of the record's key. Both inputs share the operator's
// state and timers (a CoOperator that also has OnTimer, as
// TimerOperator's, gets timers). One instance exists per parallel task;
// it is used by one goroutine.
type CoOperator[L, R, O any] interface {
	// Open registers the operator's state on b (keyed.Value, List, Map).
	Open(b *Backend) error
	// ProcessLeft handles one record of the left input; key as in
	// Operator.Process.
	ProcessLeft(key []byte, v L, out *Collector[O]) error
	// ProcessRight handles one record of the right input.
	ProcessRight(key []byte, v R, out *Collector[O]) error
}

// CoTimerOperator is a CoOperator with timers, as TimerOperator is an
// Operator with timers.
type CoTimerOperator[L, R, O any] interface {
	CoOperator[L, R, O]
	// OnTimer is called when timer t of key fires.
	OnTimer(key []byte, t Timer, out *Collector[O]) error
}

// either is one record of a two-input stage: the left input's (right
// false) or the right's.
type either[L, R any] struct {
	l     L
	r     R
	right bool
}

// CoProcess adds a keyed stage of two inputs with the same key type: each
// record of left and of right goes, by its key, to the task that owns the
// key's group, where one CoOperator from newOp handles both inputs with
// one keyed state and one set of timers (Flink's connect and
// KeyedCoProcessFunction; the base of IntervalJoin and TableJoin).
// Barriers align across both inputs, and the task's watermark is the
// least of both inputs'.
//
// Both streams are keyed with KeyBy (or KeyByString): then they are
// co-partitioned whatever their sources, as both are shuffled by one
// hash of the key. Or both with ByPartition: then their topics must be
// co-partitioned by their producers (the same partition count, and one
// placement of keys, kord's or Kafka's default partitioner on both), and
// a run whose topics' partition counts differ is refused, naming both.
// One of each is refused. Parallelism as Process.
func CoProcess[K, L, R, O any](left *KeyedStream[K, L], right *KeyedStream[K, R], name string, parallelism int, newOp func() CoOperator[L, R, O]) *Stream[O] {
	j := left.j
	if right.j != j {
		j.errs = append(j.errs, fmt.Errorf("keyed: CoProcess %q of streams of jobs %q and %q: a stream belongs to one job", name, j.name, right.j.name))
	}
	if left.byPartition != right.byPartition {
		j.errs = append(j.errs, fmt.Errorf("keyed: CoProcess %q: one input is keyed by partition (ByPartition), the other by KeyBy: key both with KeyBy (a shuffle), or both with ByPartition on co-partitioned topics", name))
	}
	k := &KeyedStream[K, either[L, R]]{j: j, byPartition: left.byPartition && right.byPartition, keyOf: left.keyOf}
	if left.key != nil && right.key != nil {
		lk, rk := left.key, right.key
		k.key = func(e either[L, R], recordKey []byte) []byte {
			if e.right {
				return rk(e.r, recordKey)
			}
			return lk(e.l, recordKey)
		}
		// The checkpoint records the key's name: both, when they differ.
		k.keyName = left.keyName
		if right.keyName != left.keyName {
			k.keyName = left.keyName + "+" + right.keyName
		}
	}
	for _, s := range left.streams {
		k.streams = append(k.streams, &mapped[L, either[L, R]]{up: s, f: func(v L) either[L, R] { return either[L, R]{l: v} }})
	}
	for _, s := range right.streams {
		k.streams = append(k.streams, &mapped[R, either[L, R]]{up: s, f: func(v R) either[L, R] { return either[L, R]{r: v, right: true} }})
	}
	return Process(k, name, parallelism, func() Operator[either[L, R], O] {
		op := newOp()
		if t, ok := op.(CoTimerOperator[L, R, O]); ok {
			return &coTimerOp[L, R, O]{coOp[L, R, O]{op}, t}
		}
		return &coOp[L, R, O]{op}
	})
}

// coOp runs a CoOperator as the Operator of its inputs' union.
type coOp[L, R, O any] struct{ op CoOperator[L, R, O] }

func (c *coOp[L, R, O]) Open(b *Backend) error { return c.op.Open(b) }

func (c *coOp[L, R, O]) Process(key []byte, v either[L, R], out *Collector[O]) error {
	if v.right {
		return c.op.ProcessRight(key, v.r, out)
	}
	return c.op.ProcessLeft(key, v.l, out)
}

type coTimerOp[L, R, O any] struct {
	coOp[L, R, O]
	t CoTimerOperator[L, R, O]
}

func (c *coTimerOp[L, R, O]) OnTimer(key []byte, t Timer, out *Collector[O]) error {
	return c.t.OnTimer(key, t, out)
}

// IntervalJoin adds a keyed stage that joins each record l of left with
// each record r of right of the same key whose event time lies within
// [lower, upper] of l's: l.time+lower <= r.time <= l.time+upper, both
// bounds included (Flink's interval join; lower may be negative, and
// must not exceed upper). join's result goes downstream once per pair,
// with the later of the two times.
//
// Both inputs need event time (Stream.Timestamps, Stream.Watermarks).
// Each record waits in keyed state (codecs lc and rc) only as long as a
// record of the other input could still match it: a left record until the
// watermark passes its time+upper, a right one until it passes its
// time-lower; then it is deleted, so the buffered state follows the
// watermark, not the input's length. A record older than the watermark
// when it comes is late: it is counted (Job.LateRecords) and joins
// nothing, as in Flink. Keying and parallelism as CoProcess.
func IntervalJoin[K, L, R, O any](left *KeyedStream[K, L], right *KeyedStream[K, R], name string, parallelism int, lower, upper time.Duration,
	lc serde.Serde[L], rc serde.Serde[R], join func(key K, l L, r R) O) *Stream[O] {
	j := left.j
	if lower > upper {
		j.errs = append(j.errs, fmt.Errorf("keyed: IntervalJoin %q: lower bound %v above the upper %v", name, lower, upper))
	}
	if join == nil || lc == nil || rc == nil {
		j.errs = append(j.errs, fmt.Errorf("keyed: IntervalJoin %q: nil join function or codec", name))
	}
	keyOf := left.keyOf
	late := &j.lateRecords
	return CoProcess(left, right, name, parallelism, func() CoOperator[L, R, O] {
		return &intervalJoin[K, L, R, O]{lower: lower.Milliseconds(), upper: upper.Milliseconds(), lc: lc, rc: rc, join: join, keyOf: keyOf, late: late}
	})
}

// intervalJoin buffers each input per key and event time (ms): map state
// from a time to the records of that time, in arrival order.
type intervalJoin[K, L, R, O any] struct {
	lower, upper int64
	lc           serde.Serde[L]
	rc           serde.Serde[R]
	join         func(K, L, R) O
	keyOf        func([]byte) K
	late         interface{ Add(int64) int64 }
	left         *MapState[int64, []L]
	right        *MapState[int64, []R]
}

// The names of the join's buffers, "left" and "right" of the operator's
// state files.
const (
	joinLeftState  = "left"
	joinRightState = "right"
)

func (ij *intervalJoin[K, L, R, O]) Open(b *Backend) (err error) {
	if ij.left, err = Map(b, joinLeftState, serde.Int64(), serde.Serde[[]L](listCodec[L]{c: ij.lc})); err != nil {
		return err
	}
	ij.right, err = Map(b, joinRightState, serde.Int64(), serde.Serde[[]R](listCodec[R]{c: ij.rc}))
	return err
}

var errNoEventTime = errors.New("an interval join needs event time: the record has none (give its source Timestamps, or a record time)")

// isLate reports whether a record of time ts came after the watermark
// passed it, counting it if so.
func (ij *intervalJoin[K, L, R, O]) isLate(ts int64, out *Collector[O]) bool {
	if ts == channel.NoTime {
		out.err = errNoEventTime
		return true
	}
	if out.wm == channel.NoTime || ts >= out.wm {
		return false
	}
	ij.late.Add(1)
	return true
}

func (ij *intervalJoin[K, L, R, O]) ProcessLeft(key []byte, v L, out *Collector[O]) error {
	tl := out.ts
	if ij.isLate(tl, out) {
		return out.err
	}
	ls, _ := ij.left.Get(tl)
	ij.left.Put(tl, append(ls[:len(ls):len(ls)], v)) // a new slice: a snapshot may share the old
	k := ij.keyOf(key)
	for tr, rs := range ij.right.All() {
		if tr >= tl+ij.lower && tr <= tl+ij.upper {
			for _, r := range rs {
				emitAt(out, max(tl, tr), ij.join(k, v, r))
			}
		}
	}
	// Free it once no right record can match: the watermark past
	// tl+upper (a right record at the watermark's time is not late yet).
	out.RegisterTimer(EventTime, time.UnixMilli(tl+ij.upper+1))
	return out.err
}

func (ij *intervalJoin[K, L, R, O]) ProcessRight(key []byte, v R, out *Collector[O]) error {
	tr := out.ts
	if ij.isLate(tr, out) {
		return out.err
	}
	rs, _ := ij.right.Get(tr)
	ij.right.Put(tr, append(rs[:len(rs):len(rs)], v))
	k := ij.keyOf(key)
	for tl, ls := range ij.left.All() {
		if tr >= tl+ij.lower && tr <= tl+ij.upper {
			for _, l := range ls {
				emitAt(out, max(tl, tr), ij.join(k, l, v))
			}
		}
	}
	out.RegisterTimer(EventTime, time.UnixMilli(tr-ij.lower+1))
	return out.err
}

// OnTimer frees, at watermark t, the records no later record can match.
func (ij *intervalJoin[K, L, R, O]) OnTimer(key []byte, t Timer, out *Collector[O]) error {
	at := t.Time.UnixMilli()
	var done []int64
	for tl := range ij.left.All() {
		if tl+ij.upper+1 <= at {
			done = append(done, tl)
		}
	}
	for _, tl := range done {
		ij.left.Delete(tl)
	}
	done = done[:0]
	for tr := range ij.right.All() {
		if tr-ij.lower+1 <= at {
			done = append(done, tr)
		}
	}
	for _, tr := range done {
		ij.right.Delete(tr)
	}
	return nil
}

// emitAt emits v with time ts, then puts the collector's time back.
func emitAt[O any](out *Collector[O], ts int64, v O) {
	was := out.ts
	out.ts = ts
	out.Emit(v)
	out.ts = was
}

// testBackendBuilt, when not nil, is told of each operator task's backend
// as a run builds it (tests only: export_test.go's WatchEmpty).
var testBackendBuilt func(j *Job, operator string, b *Backend)

// TableJoin adds a keyed stage that joins each record of stream with the
// row of its key in table, a changelog (a compacted topic read through
// serde.Nullable: a nil row is a deletion), materialized as keyed state
// (Kafka Streams' stream-table join on a versioned table, Flink's
// event-time temporal join). A stream record at time t meets the row as it
// was at t: the latest table record of its key with a time at or before
// t, or none (found false) when there is none or it is a deletion; join
// says what goes downstream, if anything (ok false: nothing, an inner
// join's miss). The result has the stream record's time.
//
// The row as of t is known once the watermark passes t, so each stream
// record waits in keyed state (codec sc) until then. That is what makes
// the result the same after a crash and a replay: a lookup at arrival
// would depend on which input the task happened to read first, and a
// replay reads them in another interleaving. Both inputs need event time
// (Stream.Timestamps, Stream.Watermarks). Rows (codec tc) are kept while a
// stream record could still need them: every row newer than the
// watermark, and the latest at or before it unless a deletion; so a
// deleted key leaves nothing. A stream record older than the watermark is
// late: counted (Job.LateRecords) and joined with nothing, as
// IntervalJoin's. A late table record still updates the table. Keying and
// parallelism as CoProcess.
func TableJoin[K, T, V, O any](stream *KeyedStream[K, T], table *KeyedStream[K, *V], name string, parallelism int,
	sc serde.Serde[T], tc serde.Serde[V], join func(key K, v T, row V, found bool) (O, bool)) *Stream[O] {
	j := stream.j
	if join == nil || sc == nil || tc == nil {
		j.errs = append(j.errs, fmt.Errorf("keyed: TableJoin %q: nil join function or codec", name))
	}
	keyOf := stream.keyOf
	late := &j.lateRecords
	return CoProcess(stream, table, name, parallelism, func() CoOperator[T, *V, O] {
		return &tableJoin[K, T, V, O]{sc: sc, tc: tc, join: join, keyOf: keyOf, late: late}
	})
}

// tableJoin keeps, per key, the stream records waiting for the watermark
// (time → records) and the table's versions (time → row, nil a deletion).
type tableJoin[K, T, V, O any] struct {
	sc       serde.Serde[T]
	tc       serde.Serde[V]
	join     func(K, T, V, bool) (O, bool)
	keyOf    func([]byte) K
	late     interface{ Add(int64) int64 }
	waiting  *MapState[int64, []T]
	versions *MapState[int64, *V]
}

func (tj *tableJoin[K, T, V, O]) Open(b *Backend) (err error) {
	if tj.waiting, err = Map(b, "waiting", serde.Int64(), serde.Serde[[]T](listCodec[T]{c: tj.sc})); err != nil {
		return err
	}
	tj.versions, err = Map(b, "rows", serde.Int64(), serde.Serde[*V](rowCodec[V]{tj.tc}))
	return err
}

func (tj *tableJoin[K, T, V, O]) ProcessLeft(key []byte, v T, out *Collector[O]) error {
	t := out.ts
	if t == channel.NoTime {
		return errNoEventTime
	}
	if out.wm != channel.NoTime && t < out.wm {
		tj.late.Add(1)
		return nil
	}
	ws, _ := tj.waiting.Get(t)
	tj.waiting.Put(t, append(ws[:len(ws):len(ws)], v))
	// Once the watermark passes t, no table record at or before t is to
	// come (one at the watermark's time is not late yet: hence +1).
	out.RegisterTimer(EventTime, time.UnixMilli(t+1))
	return out.err
}

func (tj *tableJoin[K, T, V, O]) ProcessRight(key []byte, row *V, out *Collector[O]) error {
	t := out.ts
	if t == channel.NoTime {
		return errNoEventTime
	}
	tj.versions.Put(t, row)
	out.RegisterTimer(EventTime, time.UnixMilli(t+1)) // to drop what it replaces
	return out.err
}

// OnTimer joins the records older than at, then drops the versions no
// later record can meet.
func (tj *tableJoin[K, T, V, O]) OnTimer(key []byte, tm Timer, out *Collector[O]) error {
	at := tm.Time.UnixMilli()
	var due []int64
	for t := range tj.waiting.All() {
		if t < at {
			due = append(due, t)
		}
	}
	slices.Sort(due)
	k := tj.keyOf(key)
	for _, t := range due {
		row, found := tj.rowAt(t)
		ws, _ := tj.waiting.Get(t)
		for _, v := range ws {
			var zero V
			r := zero
			if found {
				r = *row
			}
			if o, ok := tj.join(k, v, r, found); ok {
				emitAt(out, t, o)
			}
		}
		tj.waiting.Delete(t)
	}
	// Of the versions before at only the latest can still be met; a
	// deletion not even that.
	var older []int64
	for t := range tj.versions.All() {
		if t < at {
			older = append(older, t)
		}
	}
	slices.Sort(older)
	for i, t := range older {
		if i < len(older)-1 {
			tj.versions.Delete(t)
		} else if row, _ := tj.versions.Get(t); row == nil {
			tj.versions.Delete(t)
		}
	}
	return out.err
}

// rowAt returns the row as of time t: the latest version at or before t,
// unless a deletion.
func (tj *tableJoin[K, T, V, O]) rowAt(t int64) (*V, bool) {
	best, have := int64(0), false
	for vt := range tj.versions.All() {
		if vt <= t && (!have || vt > best) {
			best, have = vt, true
		}
	}
	if !have {
		return nil, false
	}
	row, _ := tj.versions.Get(best)
	return row, row != nil
}

// rowCodec keeps a table row or a deletion in keyed state: a 0 byte for a
// deletion, 1 and the row's encoding otherwise.
type rowCodec[V any] struct{ c serde.Serde[V] }

func (r rowCodec[V]) Encode(dst []byte, v *V) ([]byte, error) {
	if v == nil {
		return append(dst, 0), nil
	}
	return r.c.Encode(append(dst, 1), *v)
}

func (r rowCodec[V]) Decode(b []byte) (*V, error) {
	if len(b) == 0 || b[0] > 1 {
		return nil, errors.New("keyed: a table row's state: no 0 or 1 byte first")
	}
	if b[0] == 0 {
		if len(b) != 1 {
			return nil, errors.New("keyed: a table row's state: bytes after a deletion")
		}
		return nil, nil
	}
	v, err := r.c.Decode(b[1:])
	if err != nil {
		return nil, err
	}
	return &v, nil
}

func (r rowCodec[V]) Fingerprint() string { return "row(" + r.c.Fingerprint() + ")" }
