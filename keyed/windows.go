package keyed

import (
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/kordproject/kord/keyed/internal/channel"
	"github.com/kordproject/kord/serde"
)

// Windows assigns each record of a keyed stream to event-time windows by
// its time (Collector.Timestamp): tumbling or sliding, aligned to the Unix
// epoch (Flink's TumblingEventTimeWindows and SlidingEventTimeWindows;
// Kafka Streams' TimeWindows), or sessions (Session). A window
// [Start, End) fires once the operator task's watermark reaches End - 1 ms,
// and its state stays until the watermark passes End - 1 ms + the allowed
// lateness: a record that comes meanwhile updates the window and fires it
// again; a record all of whose windows are gone is late (WindowAggregate's
// late function).
type Windows struct {
	size, slide time.Duration
	gap         time.Duration // Session
	lateness    time.Duration
}

// Tumbling is windows of size that do not overlap: every record is in
// exactly one.
func Tumbling(size time.Duration) Windows { return Windows{size: size, slide: size} }

// Sliding is windows of size starting every slide: a record is in
// size/slide of them.
func Sliding(size, slide time.Duration) Windows { return Windows{size: size, slide: slide} }

// Session is per-key session windows with an inactivity gap (Flink's
// EventTimeSessionWindows; Kafka Streams' SessionWindows): a record at t
// opens the window [t, t + gap), and windows of a key that overlap or
// touch merge into one, their accumulators merged with the Aggregator's
// Merge (required). A session fires when the watermark passes its end, so
// a key quiet for gap closes it.
func Session(gap time.Duration) Windows { return Windows{gap: gap} }

// AllowedLateness keeps each window's state for d after it fired, so that
// a record up to d behind the watermark still counts (Flink's
// allowedLateness; Kafka Streams' grace period). Default 0.
func (w Windows) AllowedLateness(d time.Duration) Windows {
	w.lateness = d
	return w
}

func (w Windows) validate() error {
	if w.gap != 0 || w.size == 0 {
		switch {
		case w.gap < time.Millisecond || w.gap%time.Millisecond != 0:
			return fmt.Errorf("session gap %v: want whole milliseconds, at least 1 ms", w.gap)
		case w.lateness < 0:
			return fmt.Errorf("allowed lateness %v: want 0 or more", w.lateness)
		}
		return nil
	}
	switch {
	case w.size < time.Millisecond || w.slide < time.Millisecond:
		return fmt.Errorf("window size %v and slide %v: want at least 1 ms", w.size, w.slide)
	case w.size%time.Millisecond != 0 || w.slide%time.Millisecond != 0:
		return fmt.Errorf("window size %v and slide %v: want whole milliseconds (record times are Kafka's milliseconds)", w.size, w.slide)
	case w.slide > w.size:
		return fmt.Errorf("window slide %v longer than its size %v: records between windows would belong to none", w.slide, w.size)
	case w.lateness < 0:
		return fmt.Errorf("allowed lateness %v: want 0 or more", w.lateness)
	}
	return nil
}

func (w Windows) session() bool { return w.size == 0 }

// starts returns the start (Unix ms) of every window holding time t (ms).
func (w Windows) starts(t int64, out []int64) []int64 {
	size, slide := w.size.Milliseconds(), w.slide.Milliseconds()
	last := t - mod(t, slide)
	for s := last; s > t-size; s -= slide {
		out = append(out, s)
	}
	return out
}

// mod is the modulus of a by b > 0, never negative (times before 1970).
func mod(a, b int64) int64 {
	m := a % b
	if m < 0 {
		m += b
	}
	return m
}

// Window is one window of event time: [Start, End).
type Window struct {
	Start, End time.Time
}

// Aggregator folds a window's records into an accumulator, one record at
// a time (Flink's AggregateFunction; Kafka Streams' Initializer and
// Aggregator): the window keeps only the accumulator, not its records.
// Merge combines the accumulators of two session windows that merge (a's
// window is the earlier); only Session windows need it.
type Aggregator[T, A any] struct {
	Init  func() A
	Add   func(acc A, v T) A
	Merge func(a, b A) A
}

// WindowAggregate adds a keyed operator stage that aggregates each key's
// records per event-time window: the accumulator (saved with codec, as
// keyed state) of every window a record falls in is updated with agg, and
// when a window fires, result's value goes downstream. Windows and their
// timers are keyed state, so a crash, a restore and a new parallelism
// keep them, and each firing is in the committed output once.
//
// A record whose windows are all gone (the watermark passed them and
// their allowed lateness) is late: it is counted (Job.LateRecords) and,
// if late is not nil and returns true, what late returns goes downstream
// in its place (a side output: route it with the sink, kafkaio.SideOutput
// say); none is dropped without being counted. Records without a time (see
// Stream.Timestamps) fail the job.
//
// Parallelism as Process: 0 is the default, the partition count at most
// the CPUs.
func WindowAggregate[K, T, A, O any](k *KeyedStream[K, T], name string, parallelism int, w Windows, codec serde.Serde[A], agg Aggregator[T, A],
	result func(key K, win Window, acc A) O, late func(key K, v T) (O, bool)) *Stream[O] {
	j, keyOf := k.j, k.keyOf
	if err := w.validate(); err != nil {
		j.errs = append(j.errs, fmt.Errorf("keyed: operator %q: %w", name, err))
	}
	if codec == nil {
		j.errs = append(j.errs, fmt.Errorf("keyed: operator %q: a window's state needs a codec", name))
	}
	if agg.Init == nil || agg.Add == nil || result == nil {
		j.errs = append(j.errs, fmt.Errorf("keyed: operator %q: the aggregator's Init and Add and the result function are required", name))
	}
	if j.eventTime == nil {
		j.eventTime = map[string]bool{}
	}
	j.eventTime[name] = true
	if w.session() {
		if agg.Merge == nil {
			j.errs = append(j.errs, fmt.Errorf("keyed: operator %q: session windows merge: the aggregator's Merge is required", name))
		}
		return Process(k, name, parallelism, func() Operator[T, O] {
			return &sessionOp[K, T, A, O]{windowing: windowing[K, T, A, O]{w: w, codec: codec, agg: agg, keyOf: keyOf, result: result, late: late, lateCount: &j.lateRecords}}
		})
	}
	return Process(k, name, parallelism, func() Operator[T, O] {
		return &windowOp[K, T, A, O]{windowing: windowing[K, T, A, O]{w: w, codec: codec, agg: agg, keyOf: keyOf, result: result, late: late, lateCount: &j.lateRecords}}
	})
}

// WindowApply adds a keyed operator stage that hands each window's
// records, in the order they came, to fn when the window fires (Flink's
// ProcessWindowFunction): for what needs them all, an exact percentile
// say. The records are keyed state (saved with codec) until the window is
// gone, so it costs memory by records, where WindowAggregate keeps one
// accumulator per window. records is that state: read it, never modify it
// (sort a copy); fn may keep nothing of it, nor of key, past the call.
// Lateness, late records and parallelism (0: the partition count, at
// most the CPUs) as WindowAggregate.
func WindowApply[K, T, O any](k *KeyedStream[K, T], name string, parallelism int, w Windows, codec serde.Serde[T],
	fn func(key K, win Window, records []T) O, late func(key K, v T) (O, bool)) *Stream[O] {
	agg := Aggregator[T, []T]{
		Init: func() []T { return nil },
		// Appending never writes below a slice's length, which is all a
		// snapshot's copy of the state sees (as ListState.Add).
		Add:   func(acc []T, v T) []T { return append(acc, v) },
		Merge: func(a, b []T) []T { return append(a, b...) },
	}
	if codec == nil {
		k.j.errs = append(k.j.errs, fmt.Errorf("keyed: operator %q: a window's state needs a codec", name))
	}
	var result func(K, Window, []T) O
	if fn != nil {
		result = func(key K, win Window, records []T) O { return fn(key, win, slices.Clip(records)) }
	}
	return WindowAggregate(k, name, parallelism, w, serde.Serde[[]T](listCodec[T]{c: codec}), agg, result, late)
}

// listCodec saves a list with its elements' codec.
type listCodec[T any] struct{ c serde.Serde[T] }

func (l listCodec[T]) Encode(dst []byte, v []T) ([]byte, error) {
	out, _, err := appendList(dst, nil, l.c, v)
	return out, err
}

func (l listCodec[T]) Decode(b []byte) ([]T, error) { return decodeList(b, l.c) }
func (l listCodec[T]) Fingerprint() string          { return "list(" + l.c.Fingerprint() + ")" }

// WriterSchema and Resolve make a list's codec a serde.Resolver when its
// elements' is one: resolution is the elements'.
func (l listCodec[T]) WriterSchema() string { return writerSchema(l.c) }

func (l listCodec[T]) Resolve(writer string) (string, func([]byte) ([]T, error), error) {
	fp, c, err := resolveInner(l.c, writer)
	if err != nil {
		return "", nil, err
	}
	return "list(" + fp + ")", listCodec[T]{c: c}.Decode, nil
}

// LateRecords returns how many times a window operator (WindowAggregate,
// WindowApply) or a join (IntervalJoin, TableJoin) found a record late
// since the job was declared, whether or not it went
// on as side output. It is a count of this process's work, replays after a
// restart included, not of the committed output.
func (j *Job) LateRecords() int64 { return j.lateRecords.Load() }

// windowOp is WindowAggregate's operator: per key, the accumulator of each
// window by its start (Unix ms), and two event-time timers per window:
// its firing at End - 1 ms and its cleanup at End - 1 ms + lateness (one
// timer when the lateness is 0).
type windowOp[K, T, A, O any] struct {
	windowing[K, T, A, O]
	accs   *MapState[int64, A]
	starts []int64
}

// windowing is what the window operators share: the windows, how to fold
// and report them, and what to do with a late record.
type windowing[K, T, A, O any] struct {
	w         Windows
	codec     serde.Serde[A]
	agg       Aggregator[T, A]
	keyOf     func([]byte) K
	result    func(K, Window, A) O
	late      func(K, T) (O, bool)
	lateCount *atomic.Int64
}

// lateRecord counts v of key as late and emits the late function's side
// output for it, if any.
func (o *windowing[K, T, A, O]) lateRecord(key []byte, v T, out *Collector[O]) {
	o.lateCount.Add(1)
	if o.late != nil {
		if side, ok := o.late(o.keyOf(key), v); ok {
			out.Emit(side)
		}
	}
}

func (o *windowOp[K, T, A, O]) Open(b *Backend) (err error) {
	o.accs, err = Map(b, "windows", serde.Int64(), o.codec)
	return err
}

func (o *windowOp[K, T, A, O]) window(start int64) Window {
	return Window{Start: time.UnixMilli(start), End: time.UnixMilli(start + o.w.size.Milliseconds())}
}

func (o *windowOp[K, T, A, O]) Process(key []byte, v T, out *Collector[O]) error {
	if out.ts == channel.NoTime {
		return fmt.Errorf("a record without a time in a window operator (see Stream.Timestamps)")
	}
	wm, size, lateness := out.wm, o.w.size.Milliseconds(), o.w.lateness.Milliseconds()
	o.starts = o.w.starts(out.ts, o.starts[:0])
	taken := false
	for _, s := range o.starts {
		fire := s + size - 1
		if wm != channel.NoTime && fire+lateness <= wm {
			continue // gone: fired, and its lateness passed
		}
		taken = true
		acc, existed := o.accs.Get(s)
		if !existed {
			acc = o.agg.Init()
		}
		acc = o.agg.Add(acc, v)
		o.accs.Put(s, acc)
		if wm != channel.NoTime && fire <= wm {
			// Fired already, within its lateness: fire again, updated.
			out.Emit(o.result(o.keyOf(key), o.window(s), acc))
		} else if !existed {
			out.RegisterTimer(EventTime, time.UnixMilli(fire))
		}
		if lateness > 0 && !existed {
			// A window's timers are registered with its accumulator: an
			// accumulator that exists has them.
			out.RegisterTimer(EventTime, time.UnixMilli(fire+lateness))
		}
	}
	if !taken {
		o.lateRecord(key, v, out)
	}
	return out.err
}

func (o *windowOp[K, T, A, O]) OnTimer(key []byte, t Timer, out *Collector[O]) error {
	// A timer is a window's firing (End - 1 ms) or its cleanup (End - 1 ms
	// + lateness), or both: the window's start follows from the time,
	// with no need to look through the key's windows.
	at, size, lateness := t.Time.UnixMilli(), o.w.size.Milliseconds(), o.w.lateness.Milliseconds()
	if s := at - size + 1; o.aligned(s) {
		if acc, ok := o.accs.Get(s); ok {
			out.Emit(o.result(o.keyOf(key), o.window(s), acc))
			if lateness == 0 {
				o.accs.Delete(s)
			}
		}
	}
	if s := at - size + 1 - lateness; lateness > 0 && o.aligned(s) {
		o.accs.Delete(s)
	}
	return out.err
}

// aligned reports whether s (Unix ms) is a window start.
func (o *windowOp[K, T, A, O]) aligned(s int64) bool { return mod(s, o.w.slide.Milliseconds()) == 0 }

// session is one session window's state: its end (Unix ms, exclusive)
// and accumulator, kept by its start.
type session[A any] struct {
	End int64
	Acc A
}

// sessionCodec saves a session: its end, then the accumulator.
type sessionCodec[A any] struct{ c serde.Serde[A] }

func (s sessionCodec[A]) Encode(dst []byte, v session[A]) ([]byte, error) {
	return encodeStamped(dst, v.End, s.c, v.Acc)
}

func (s sessionCodec[A]) Decode(b []byte) (session[A], error) {
	end, acc, err := decodeStamped(b, s.c, "session window")
	return session[A]{End: end, Acc: acc}, err
}

func (s sessionCodec[A]) Fingerprint() string { return "session(" + s.c.Fingerprint() + ")" }

// WriterSchema and Resolve make a session's codec a serde.Resolver when
// its accumulator's is one: resolution is the accumulator's.
func (s sessionCodec[A]) WriterSchema() string { return writerSchema(s.c) }

func (s sessionCodec[A]) Resolve(writer string) (string, func([]byte) (session[A], error), error) {
	fp, c, err := resolveInner(s.c, writer)
	if err != nil {
		return "", nil, err
	}
	return "session(" + fp + ")", sessionCodec[A]{c: c}.Decode, nil
}

// sessionOp is WindowAggregate's operator for Session windows: per key,
// its sessions by start, which never overlap or touch (they would have
// merged), and per session a firing timer at End - 1 ms and a cleanup
// timer at End - 1 ms + lateness. When sessions merge, the timers of the
// ones that are gone are deleted, unless a remaining session needs the
// same time.
type sessionOp[K, T, A, O any] struct {
	windowing[K, T, A, O]
	sessions *MapState[int64, session[A]]
	merged   []int64 // scratch: the starts of the sessions a record merges
	ends     []int64 // scratch: their ends
}

func (o *sessionOp[K, T, A, O]) Open(b *Backend) (err error) {
	o.sessions, err = Map(b, "sessions", serde.Int64(), serde.Serde[session[A]](sessionCodec[A]{c: o.codec}))
	return err
}

func (o *sessionOp[K, T, A, O]) Process(key []byte, v T, out *Collector[O]) error {
	if out.ts == channel.NoTime {
		return fmt.Errorf("a record without a time in a window operator (see Stream.Timestamps)")
	}
	wm, lateness := out.wm, o.w.lateness.Milliseconds()
	start, end := out.ts, out.ts+o.w.gap.Milliseconds()
	// Every session that overlaps or touches [start, end) merges with it
	// (Flink's TimeWindow.intersects: start <= other end, end >= other
	// start).
	o.merged = o.merged[:0]
	for s, ss := range o.sessions.All() {
		if s <= end && ss.End >= start {
			o.merged = append(o.merged, s)
			start, end = min(start, s), max(end, ss.End)
		}
	}
	fire := end - 1
	if wm != channel.NoTime && fire+lateness <= wm {
		// Gone even merged: late (nothing merged: a merged session would
		// still be kept, its cleanup ahead of the watermark).
		o.lateRecord(key, v, out)
		return out.err
	}
	slices.Sort(o.merged)
	acc := o.agg.Init()
	o.ends = o.ends[:0]
	for i, s := range o.merged {
		ss, _ := o.sessions.Get(s)
		if i == 0 {
			acc = ss.Acc
		} else {
			acc = o.agg.Merge(acc, ss.Acc)
		}
		o.ends = append(o.ends, ss.End)
		o.sessions.Delete(s)
	}
	acc = o.agg.Add(acc, v)
	o.sessions.Put(start, session[A]{End: end, Acc: acc})
	// The timers of merged sessions that no session needs any more.
	for _, e := range o.ends {
		for _, t := range []int64{e - 1, e - 1 + lateness} {
			if !o.needed(t, lateness) {
				out.DeleteTimer(EventTime, time.UnixMilli(t))
			}
		}
	}
	if wm != channel.NoTime && fire <= wm {
		// Fired already, within its lateness: fire again, updated.
		out.Emit(o.result(o.keyOf(key), Window{Start: time.UnixMilli(start), End: time.UnixMilli(end)}, acc))
	} else {
		out.RegisterTimer(EventTime, time.UnixMilli(fire))
	}
	if lateness > 0 {
		out.RegisterTimer(EventTime, time.UnixMilli(fire+lateness))
	}
	return out.err
}

// needed reports whether a session of the current key fires or is cleaned
// up at t.
func (o *sessionOp[K, T, A, O]) needed(t, lateness int64) bool {
	for _, ss := range o.sessions.All() {
		if ss.End-1 == t || ss.End-1+lateness == t {
			return true
		}
	}
	return false
}

func (o *sessionOp[K, T, A, O]) OnTimer(key []byte, t Timer, out *Collector[O]) error {
	at, lateness := t.Time.UnixMilli(), o.w.lateness.Milliseconds()
	var gone []int64
	for s, ss := range o.sessions.All() {
		if ss.End-1 == at {
			out.Emit(o.result(o.keyOf(key), Window{Start: time.UnixMilli(s), End: time.UnixMilli(ss.End)}, ss.Acc))
		}
		if ss.End-1+lateness == at {
			gone = append(gone, s)
		}
	}
	for _, s := range gone {
		o.sessions.Delete(s)
	}
	return out.err
}
