package keyed

import (
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/kordproject/kord/checkpoint"
	"github.com/kordproject/kord/internal/align"
	"github.com/kordproject/kord/internal/layout"
	"github.com/kordproject/kord/internal/statefile"
	"github.com/kordproject/kord/keyed/connector"
	"github.com/kordproject/kord/keyed/internal/channel"
)

// sourceTask reads its partitions and hands records on (emit: through
// chained functions to the exchanges its stage feeds); it injects barriers
// when triggered.
type sourceTask[T any] struct {
	r         *run
	task      int
	auxiliary bool // Stream.Auxiliary: idle from the start, its end not waited for
	topic     string
	reader    connector.Reader[T]
	emit      emit[T]
	batch     []channel.Element[T] // what a poll read, to emit; reused
	out       outputs
	trig      chan trigger
	positions []connector.Position
	epoch     uint64
	dead      connector.DeadLetterSink  // nil when the sink takes no dead letters
	adds      chan []connector.Position // discovered partitions for this task
	name      string                    // the source's name
	instance  int                       // this task's index among the source's
	restored  bool                      // its positions come from a restored checkpoint
	read      int64                     // records read this run
	extract   func(v T, recordTime time.Time) time.Time
	// Watermarks (Stream.Watermarks): the newest time seen per partition.
	watermarks bool
	lateness   int64 // milliseconds
	newest     map[int32]int64
	// Idleness: when each partition last had a record (or was assigned),
	// and when a silent one was last asked whether records wait past its
	// position, and the answer.
	idleness time.Duration
	heard    map[int32]time.Time
	asked    map[int32]time.Time
	behind   map[int32]bool
	st       *stageStats // the stage's figures
	ts       *taskStats  // the task's
	// marks, for the reading side of a hop: per partition, each writer's
	// latest watermark mark; the partition's watermark (newest, lateness
	// 0) is their least once every writer was heard.
	marks map[int32]map[string]int64
}

// mark takes a hop's watermark mark for partition p.
func (s *sourceTask[T]) mark(p int32, m *connector.HopMark) {
	ws := s.marks[p]
	if ws == nil {
		ws = map[string]int64{}
		s.marks[p] = ws
	}
	ws[m.Writer] = max(ws[m.Writer], m.Watermark)
	if len(ws) < m.Writers {
		return
	}
	least := int64(channel.EndOfTime)
	for _, wm := range ws {
		least = min(least, wm)
	}
	if t, ok := s.newest[p]; !ok || least > t {
		s.newest[p] = least
	}
}

// idle reports whether partition p has been silent for the idleness time
// and has no records waiting past the reader's position (BacklogReader,
// asked at most once per idleness time).
func (s *sourceTask[T]) idle(ctx context.Context, p int32, now time.Time) bool {
	if s.idleness <= 0 {
		return false
	}
	heard, ok := s.heard[p]
	if !ok {
		s.heard[p] = now
		return false
	}
	if now.Sub(heard) < s.idleness {
		return false
	}
	br, ok := s.reader.(connector.BacklogReader)
	if !ok {
		return true
	}
	if now.Sub(s.asked[p]) >= s.idleness {
		s.asked[p] = now
		behind, err := br.Behind(ctx, p)
		if err != nil {
			// Unknown: hold the watermark, as a partition with a backlog
			// does.
			s.r.log.Warn("keyed: idleness: has the partition records waiting?", "topic", s.topic, "partition", p, "err", err)
			behind = true
		}
		s.behind[p] = behind
	}
	return !s.behind[p]
}

// watermark is the task's watermark now: the oldest of its partitions'
// newest times, less the allowed out-of-orderness (Flink's
// BoundedOutOfOrdernessWatermarks, per partition as its Kafka source
// does); noTime while a partition has had no record. A task with no
// partition holds nothing back.
//
// Idle partitions (Stream.Idleness) are left out; idle reports that every
// partition is: the task then holds nothing back downstream.
func (s *sourceTask[T]) watermark(ctx context.Context) (wm int64, idle bool) {
	if len(s.positions) == 0 {
		return channel.EndOfTime, false
	}
	wm, idle = channel.EndOfTime, true
	now := time.Now()
	for _, p := range s.positions {
		if s.idle(ctx, p.Partition, now) {
			continue
		}
		idle = false
		t, ok := s.newest[p.Partition]
		if !ok {
			return channel.NoTime, false
		}
		wm = min(wm, t-s.lateness)
	}
	if idle {
		return channel.NoTime, true
	}
	return wm, false
}

// discoverer lists a source's partitions every interval and hands new ones
// to the source tasks (KeyBy mode), or fails the job (partition mode).
type discoverer[T any] struct {
	r           *run
	src         *sourceOf[T]
	tasks       []*sourceTask[T]
	byPartition bool
	known       []int32 // ascending
}

func (d *discoverer[T]) run(ctx context.Context, interval time.Duration) {
	defer d.r.wg.Done()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if err := d.once(ctx); err != nil {
			if ctx.Err() == nil {
				d.r.fail(fmt.Errorf("keyed: source %q: partition discovery: %w", d.src.name, err))
			}
			return
		}
	}
}

// once lists the partitions and assigns the new ones. A failed listing is
// logged and tried again at the next interval.
func (d *discoverer[T]) once(rctx context.Context) error {
	ctx, cancel := context.WithTimeout(rctx, 30*time.Second)
	defer cancel()
	parts, err := d.src.src.Partitions(ctx)
	if err != nil {
		d.r.log.Warn("keyed: partition discovery", "source", d.src.name, "topic", d.src.topic(), "err", err)
		return nil
	}
	sort.Slice(parts, func(a, b int) bool { return parts[a] < parts[b] })
	known := make(map[int32]bool, len(d.known))
	for _, p := range d.known {
		known[p] = true
	}
	var fresh []int32
	for _, p := range parts {
		if !known[p] {
			fresh = append(fresh, p)
		}
	}
	if len(fresh) == 0 {
		return nil
	}
	if d.byPartition {
		return fmt.Errorf("topic %s grew from %d to %d partitions: in partition mode a key group is a partition and the job cannot follow; run it under a new name, or key it with KeyBy", d.src.topic(), len(d.known), len(parts))
	}
	startFn := d.src.src.Start
	if ns, ok := d.src.src.(connector.NewPartitionStarter); ok {
		startFn = ns.StartNew
	}
	start, err := startFn(ctx, fresh)
	if err != nil {
		d.r.log.Warn("keyed: partition discovery: start offsets", "source", d.src.name, "topic", d.src.topic(), "partitions", fresh, "err", err)
		return nil
	}
	at := map[int32]int64{}
	for _, p := range start {
		at[p.Partition] = p.Offset
	}
	// The same rule as at start: partition k of the sorted list goes to
	// task k % parallelism.
	per := make([][]connector.Position, len(d.tasks))
	for k, p := range parts {
		if !known[p] {
			t := k % len(d.tasks)
			per[t] = append(per[t], connector.Position{Partition: p, Offset: at[p]})
		}
	}
	for t, ps := range per {
		if len(ps) == 0 {
			continue
		}
		select {
		case d.tasks[t].adds <- ps:
		case <-ctx.Done():
			return nil
		}
	}
	d.r.log.Info("keyed: new partitions", "source", d.src.name, "topic", d.src.topic(), "partitions", fresh)
	d.known = parts
	return nil
}

// add assigns discovered partitions to this task's reader, together with
// its current ones at their current offsets; the next barrier records them.
func (s *sourceTask[T]) add(ctx context.Context, pos map[int32]int64, ps []connector.Position) error {
	for _, p := range ps {
		if _, dup := pos[p.Partition]; dup {
			continue
		}
		s.positions = append(s.positions, p)
		pos[p.Partition] = p.Offset
	}
	all := make([]connector.Position, len(s.positions))
	for i, p := range s.positions {
		all[i] = connector.Position{Partition: p.Partition, Offset: pos[p.Partition]}
	}
	if err := s.reader.Assign(ctx, all); err != nil {
		return fmt.Errorf("adding partitions %v: %w", ps, err)
	}
	return nil
}

// testHookTick, when set, is called on every tick of an operator task.
var testHookTick func()

// idleWait is how long a source task's poll waits for a first record when
// the task has nothing to flush. BufferTimeout bounds how long a partial
// batch waits, so a task holding one polls that often; one holding none
// has no reason to wake as often, and waking every 5 ms kept an idle job
// at about a sixth of a core (bench/RESULTS.md, "The idle tenth, and an
// idle job's wakeups"). A trigger, a stop and the idleness check wait for
// the poll, so the wait stays short beside the checkpoint interval and the
// idleness time: a quarter of each, at most 100 ms (Kafka Streams' poll.ms
// default, StreamsConfig), never below BufferTimeout.
func idleWait(cfg config, idleness time.Duration) time.Duration {
	interval := cfg.Checkpoint.Interval
	w := min(interval/4, 100*time.Millisecond)
	if idleness > 0 {
		w = min(w, idleness/4)
	}
	return max(cfg.BufferTimeout, w)
}

// offsetsAt names the task's partitions at the positions pos, for logs.
func (s *sourceTask[T]) offsetsAt(pos map[int32]int64) []string {
	offsets := make([]string, 0, len(s.positions))
	for _, p := range s.positions {
		offsets = append(offsets, fmt.Sprintf("%s[%d]@%d", s.topic, p.Partition, pos[p.Partition]))
	}
	return offsets
}

// deadLetter hands an undecodable record to the sink's dead letters under
// epoch, or fails the job naming it when the sink takes none.
func (s *sourceTask[T]) deadLetter(ctx context.Context, epoch uint64, b *connector.BadRecord) error {
	if s.dead == nil {
		return fmt.Errorf("a record cannot be processed and the job's sink takes no dead letters (a dead-letter topic would take it): %w", b.Err)
	}
	if err := s.dead.DeadLetter(ctx, epoch, *b); err != nil {
		return fmt.Errorf("dead letter for %s[%d] offset %d: %w", b.Topic, b.Partition, b.Offset, err)
	}
	s.r.j.deadLetters.Add(1)
	return nil
}

func (s *sourceTask[T]) run(ctx context.Context) error {
	defer s.reader.Close()
	if s.auxiliary {
		s.out.SetIdle(true) // holds no watermark back, from the start
	}
	pos := make(map[int32]int64, len(s.positions))
	for _, p := range s.positions {
		pos[p.Partition] = p.Offset
	}
	timeout := s.r.cfg.BufferTimeout
	idle := idleWait(s.r.cfg, s.idleness)
	exhausted := false
	// bootstrapped: for an auxiliary source task, that it read its input
	// to the end it had when it began; for another, that every auxiliary
	// one did.
	bootstrapped := false
	// stopped: the final barrier is out. The task reads no more, but
	// answers triggers until the run ends: a final checkpoint that aborts
	// (with TolerableFailures) is triggered again.
	stopped := false
	// epoch is the checkpoint that will cover what is read next: the one
	// after the last barrier this task emitted.
	epoch := s.epoch
	for {
		var t trigger
		got := false
		if exhausted || stopped {
			select {
			case t = <-s.trig:
				got = true
			case <-ctx.Done():
				return nil
			}
		} else if !s.auxiliary && !bootstrapped {
			// Until the auxiliary inputs are read: barriers only.
			select {
			case t = <-s.trig:
				got = true
			case ps := <-s.adds:
				if err := s.add(ctx, pos, ps); err != nil {
					return err
				}
				continue
			case <-s.r.bootstrapped:
				bootstrapped = true
				continue
			case <-ctx.Done():
				return nil
			}
		} else {
			select {
			case t = <-s.trig:
				got = true
			case ps := <-s.adds:
				if err := s.add(ctx, pos, ps); err != nil {
					return err
				}
				continue
			case <-ctx.Done():
				return nil
			default:
			}
		}
		if got {
			if err := s.barrier(ctx, t, pos); err != nil {
				return err
			}
			epoch = t.id + 1
			stopped = stopped || t.final
			continue
		}
		wait := timeout
		if !s.out.Pending() {
			wait = idle
		}
		recs, done, err := s.reader.Poll(ctx, s.r.cfg.BatchSize, wait)
		if err != nil {
			return err
		}
		if err := s.records(ctx, recs, pos, epoch); err != nil {
			return err
		}
		if s.auxiliary && !bootstrapped && len(recs) < s.r.cfg.BatchSize {
			if bootstrapped, err = s.caughtUp(ctx, done); err != nil {
				return err
			}
			if bootstrapped {
				// What it read goes downstream before any other source
				// reads: an inbox is one FIFO, so a stage meets these
				// records before the first of the others'.
				if err := s.out.FlushAll(); err != nil {
					return err
				}
				if s.r.auxPending.Add(-1) == 0 {
					close(s.r.bootstrapped)
				}
			}
		}
		if err := s.out.FlushDue(timeout); err != nil {
			return err
		}
		if done && !exhausted {
			exhausted = true
			if err := s.ended(ctx, pos); err != nil {
				return err
			}
		}
	}
}

// caughtUp reports whether an auxiliary source task has read every
// partition to its end (done: its bounded input ended; otherwise a reader
// that is no connector.BacklogReader counts as caught up once a poll
// comes back short).
func (s *sourceTask[T]) caughtUp(ctx context.Context, done bool) (bool, error) {
	br, ok := s.reader.(connector.BacklogReader)
	if done || !ok {
		return true, nil
	}
	for _, p := range s.positions {
		behind, err := br.Behind(ctx, p.Partition)
		if err != nil {
			return false, err
		}
		if behind {
			return false, nil
		}
	}
	return true, nil
}

// barrier emits checkpoint t's barrier after every record routed before
// it, and acks the checkpoint with the offsets next to read and the
// reader's operator state.
func (s *sourceTask[T]) barrier(ctx context.Context, t trigger, pos map[int32]int64) error {
	offs := make([]checkpoint.PartitionOffset, 0, len(s.positions))
	var times []checkpoint.PartitionTime // what the partitions' watermarks stand on
	further, _ := s.reader.(connector.PositionReader)
	for _, p := range s.positions {
		if further != nil {
			if at := further.Position(p.Partition); at > pos[p.Partition] {
				pos[p.Partition] = at // past entries that carry no record
			}
		}
		offs = append(offs, checkpoint.PartitionOffset{Topic: s.topic, Partition: p.Partition, Offset: pos[p.Partition]})
		if t, ok := s.newest[p.Partition]; ok {
			times = append(times, checkpoint.PartitionTime{Topic: s.topic, Partition: p.Partition, Time: t})
		}
	}
	files, putErr, err := s.r.writeOpState(ctx, s.reader, s.name, s.instance, t.id)
	if err != nil {
		return err
	}
	if err := s.out.Broadcast(t.id); err != nil {
		return err
	}
	s.r.ack(ack{task: s.task, id: t.id, offsets: offs, times: times, files: files, err: putErr})
	return nil
}

// records hands a poll's records on as one batch (a bad one to the dead
// letters, under epoch), then the watermark that follows them; pos moves
// past each.
func (s *sourceTask[T]) records(ctx context.Context, recs []connector.SourceRecord[T], pos map[int32]int64, epoch uint64) error {
	s.read += int64(len(recs))
	for i := range recs {
		rec := &recs[i]
		if rec.Mark != nil {
			if s.marks == nil {
				return Permanent(fmt.Errorf("keyed: source %q: %s[%d] offset %d: a hop's watermark mark from a source that is no hop", s.name, s.topic, rec.Partition, rec.Offset))
			}
			s.mark(rec.Partition, rec.Mark)
			pos[rec.Partition] = rec.Offset + 1
			continue
		}
		if rec.Bad != nil {
			if err := s.deadLetter(ctx, epoch, rec.Bad); err != nil {
				return err
			}
			pos[rec.Partition] = rec.Offset + 1
			continue
		}
		ts := rec.Timestamp
		if s.extract != nil {
			ts = s.extract(rec.Value, rec.Timestamp)
			if ts.IsZero() || ts.Before(time.Unix(0, 0)) {
				// Kafka Streams' FailOnInvalidTimestamp: the decoded value
				// has no bytes left to dead-letter.
				return Permanent(fmt.Errorf("keyed: source %q: %s[%d] offset %d: the timestamp extractor gave %v, not a time from 1970 on (the record's own timestamp: %v)",
					s.name, s.topic, rec.Partition, rec.Offset, ts, rec.Timestamp))
			}
		}
		// The record's Kafka key and partition go along: a partition-mode
		// exchange keys by them.
		ms := channel.TimeMillis(ts)
		s.batch = append(s.batch, channel.Element[T]{V: rec.Value, Key: rec.Key, KG: rec.Partition, TS: ms})
		pos[rec.Partition] = rec.Offset + 1
		if s.watermarks && s.marks == nil && ms != channel.NoTime {
			if t, ok := s.newest[rec.Partition]; !ok || ms > t {
				s.newest[rec.Partition] = ms
			}
		}
		if s.idleness > 0 {
			s.heard[rec.Partition] = time.Now()
		}
	}
	if len(s.batch) > 0 {
		s.st.in.Add(int64(len(s.batch)))
		s.ts.in.Add(int64(len(s.batch)))
		err := s.emit(s.batch)
		clear(s.batch) // no value kept alive by the reused buffer
		s.batch = s.batch[:0]
		if err != nil {
			return err
		}
	}
	if s.watermarks {
		wm, idle := s.watermark(ctx)
		s.out.Advance(wm)
		if wm > s.ts.wm.Load() && wm != channel.EndOfTime {
			s.ts.wm.Store(wm) // an idle task's, NoTime, is not shown
		}
		s.out.SetIdle(idle)
	}
	return nil
}

// ended follows the end of a bounded input: every record and the last
// watermark go out, and the coordinator hears of it.
func (s *sourceTask[T]) ended(ctx context.Context, pos map[int32]int64) error {
	s.r.ended(s.read, s.restored, s.offsetsAt(pos))
	if s.watermarks {
		s.out.Advance(channel.EndOfTime) // a bounded input's end: every time has passed
	}
	if err := s.out.FlushAll(); err != nil {
		return err
	}
	select {
	case s.r.exhausted <- s.task:
	case <-ctx.Done():
	}
	return nil
}

// opTask runs one operator instance.
type opTask[T, O any] struct {
	r        *run
	task     int
	name     string // the stage's
	instance int    // the task's index in the stage
	in       *channel.Inbox[T]
	al       *align.Aligner
	cancels  chan uint64
	op       Operator[T, O]
	b        *Backend
	emit     emit[O]
	direct   *channel.Outbox[O] // instead of emit: the stage feeds the sink alone
	sides    map[any]any        // side outputs' emit functions, by tag
	out      outputs
	col      *Collector[O]
	// restoredWm is the restored checkpoint's watermark (noTime if none):
	// the task's starts there.
	restoredWm int64
	// final is the latest event time the task has made final: its
	// watermark, and once every input ended (EndOfTime) the watermark
	// before that or the latest event-time timer the end fired, whichever
	// is later (what a checkpoint after the end records; see ack.final).
	final  int64
	timers *timers     // a TimerOperator's; nil otherwise
	st     *stageStats // the stage's figures
	ts     *taskStats  // the task's
}

// counted adds what the task emitted since it last counted to its stage's
// figures.
func (t *opTask[T, O]) counted() {
	if t.col.n > 0 {
		t.st.out.Add(t.col.n)
		t.col.n = 0
	}
}

// fireTimers fires the task's timers on clock kind that are due at now.
func (t *opTask[T, O]) fireTimers(kind TimerKind, now int64) error {
	if t.timers == nil || now == channel.NoTime {
		return nil
	}
	top := t.op.(TimerOperator[T, O])
	col := t.col
	return t.timers.fire(kind, now, func(key []byte, at int64) error {
		if kind == EventTime {
			t.final = max(t.final, at)
		}
		col.key, col.ts = key, at
		if err := top.OnTimer(key, Timer{Kind: kind, Time: time.UnixMilli(at)}, col); err != nil {
			return fmt.Errorf("key %q: %v timer at %v: %w", key, kind, time.UnixMilli(at).UTC(), err)
		}
		return col.err
	})
}

func (t *opTask[T, O]) run(ctx context.Context) error {
	col := &Collector[O]{emit: t.emit, direct: t.direct, sides: t.sides, wm: t.restoredWm, timers: t.timers}
	t.col = col
	// The watermark of each input (upstream task): the task's is their
	// minimum, and never goes backwards.
	inWm := make([]int64, t.in.Upstreams())
	inIdle := make([]bool, t.in.Upstreams())
	for u := range inWm {
		inWm[u] = channel.NoTime
	}
	stash := channel.NewStash[T](t.in.Upstreams())
	timeout := t.r.cfg.BufferTimeout
	tick := time.NewTicker(timeout)
	defer tick.Stop()
	// The tick fires processing-time timers and flushes a partial batch:
	// without timers it runs only while a flush would send something (see
	// idleWait for why an idle task should not wake every BufferTimeout).
	ticking := true
	for {
		m, got := stash.Pop(t.al)
		if !got {
			if want := t.timers != nil || t.out.Pending(); want != ticking {
				if want {
					tick.Reset(timeout)
				} else {
					tick.Stop()
				}
				ticking = want
			}
			select {
			case m = <-t.in.C:
				if stash.Keep(t.al, m) {
					continue
				}
			case <-tick.C:
				if testHookTick != nil {
					testHookTick()
				}
				err := t.fireTimers(ProcessingTime, time.Now().UnixMilli())
				t.counted()
				if err != nil {
					return err
				}
				if err := t.out.FlushDue(timeout); err != nil {
					return err
				}
				continue
			case id := <-t.cancels:
				if err := t.apply(ctx, t.al.Cancel(id, time.Now())); err != nil {
					return err
				}
				continue
			case <-ctx.Done():
				return nil
			}
		}
		if err := t.process(m, inWm, inIdle); err != nil {
			return err
		}
		var effs []align.Effect
		if m.Barrier > 0 {
			effs = t.al.Barrier(m.From, m.Barrier, time.Now())
		}
		t.in.Done(m.From)
		if err := t.apply(ctx, effs); err != nil {
			return err
		}
		if err := t.out.FlushDue(timeout); err != nil {
			return err
		}
	}
}

// process hands m's records to the operator, then takes m's watermark
// and idleness into its input's (inWm, inIdle): a task watermark that
// advances fires the event-time timers due, and goes downstream after
// what they emitted.
func (t *opTask[T, O]) process(m channel.Message[T], inWm []int64, inIdle []bool) error {
	defer t.counted()
	t.st.in.Add(int64(len(m.Elems)))
	t.ts.in.Add(int64(len(m.Elems)))
	col := t.col
	for i := range m.Elems {
		e := &m.Elems[i]
		t.b.setCurrentKey(e.Key, int(e.KG))
		col.key, col.ts = e.Key, e.TS
		if err := t.op.Process(e.Key, e.V, col); err != nil {
			return fmt.Errorf("key %q: %w", e.Key, err)
		}
		if col.err != nil {
			return col.err
		}
	}
	if m.WM <= inWm[m.From] && m.Idle == inIdle[m.From] {
		return nil
	}
	inWm[m.From], inIdle[m.From] = max(inWm[m.From], m.WM), m.Idle
	if wm := max(col.wm, activeMin(inWm, inIdle)); wm > col.wm {
		col.wm = wm
		if wm != channel.EndOfTime {
			t.final = max(t.final, wm)
		}
		if err := t.fireTimers(EventTime, wm); err != nil {
			return err
		}
		t.out.Advance(wm)
		t.ts.wm.Store(wm)
	}
	t.out.SetIdle(allIdle(inIdle))
	return nil
}

func (t *opTask[T, O]) apply(ctx context.Context, effs []align.Effect) error {
	for _, e := range effs {
		switch e.Kind {
		case align.Snapshot:
			t.r.align.add(e.Alignment)
			if err := t.out.Broadcast(e.ID); err != nil {
				return err
			}
			// Operator state (a ProcessBroadcast stage's broadcast
			// state): taken and written at the barrier, small.
			opFiles, putErr, err := t.r.writeOpState(ctx, t.op, t.name, t.instance, e.ID)
			if err != nil {
				return err
			}
			snap := t.b.takeSnapshot()
			refs := t.b.operatorRefs()
			wm, final := t.col.wm, t.final
			t.r.bg.Add(1)
			go func(id uint64) {
				defer t.r.bg.Done()
				files, err := t.writeSnapshot(ctx, snap, id)
				files = append(files, opFiles...)
				t.r.ack(ack{task: t.task, id: id, files: files, refs: refs, err: cmp.Or(putErr, err), wm: wm, final: final, opTask: true})
			}(e.ID)
		case align.Error:
			return e.Err()
		}
	}
	return nil
}

// writeSnapshot encodes the snapshot and writes its files durably, under
// the run's context ctx.
func (t *opTask[T, O]) writeSnapshot(ctx context.Context, snap *snapshot, id uint64) ([]checkpoint.FileRef, error) {
	defer snap.Release()
	files, err := snap.Encode(t.r.runID, id, 1)
	if err != nil {
		return nil, err
	}
	if err := t.r.point(pointDuringSnapshotWrite); err != nil {
		return nil, err
	}
	refs, err := checkpoint.PutAll(ctx, t.r.store, files)
	if err != nil {
		return nil, err
	}
	return refs, nil
}

// sinkTask aligns the operator tasks' outputs and writes them to the sink,
// each record under the checkpoint that will carry it.
type sinkTask[O any] struct {
	r       *run
	task    int
	in      *channel.Inbox[O]
	al      *align.Aligner
	cancels chan uint64
	sink    connector.Sink[O]
	epoch   uint64
	name    string
	// timed: the sink as a connector.Timed, nil if it is not one; wm its
	// watermark so far (starting from the restored checkpoint's).
	timed connector.Timed[O]
	wm    int64
	// batch: the sink as a connector.BatchWriter, nil if it is not one;
	// vs the batch it is handed, reused.
	batch connector.BatchWriter[O]
	vs    []O
	// elems: the sink as a hop's (elemSink), nil if it is none.
	elems elemSink[O]
	st    *stageStats // the stage's figures
	ts    *taskStats  // the task's
}

func (t *sinkTask[O]) run(ctx context.Context) error {
	stash := channel.NewStash[O](t.in.Upstreams())
	inWm, inIdle := make([]int64, t.in.Upstreams()), make([]bool, t.in.Upstreams())
	for u := range inWm {
		inWm[u] = channel.NoTime
	}
	if t.timed != nil && t.wm != channel.NoTime {
		t.timed.Advance(t.wm)
	}
	if t.elems != nil {
		t.elems.advance(t.wm)
	}
	for {
		m, got := stash.Pop(t.al)
		if !got {
			select {
			case m = <-t.in.C:
				if stash.Keep(t.al, m) {
					continue
				}
			case id := <-t.cancels:
				t.al.Cancel(id, time.Now())
				continue
			case <-ctx.Done():
				return nil
			}
		}
		if err := t.write(ctx, m, inWm, inIdle); err != nil {
			return err
		}
		var effs []align.Effect
		if m.Barrier > 0 {
			effs = t.al.Barrier(m.From, m.Barrier, time.Now())
		}
		t.in.Done(m.From)
		for _, e := range effs {
			switch e.Kind {
			case align.Snapshot:
				t.r.align.add(e.Alignment)
				t.epoch = e.ID + 1
				if t.elems != nil {
					// The hop's marks go with the checkpoint's records.
					if err := t.elems.mark(ctx, e.ID); err != nil {
						return err
					}
				}
				files, putErr, err := t.r.writeOpState(ctx, t.sink, t.name, 0, e.ID)
				if err != nil {
					return err
				}
				t.r.ack(ack{task: t.task, id: e.ID, files: files, err: putErr})
			case align.Error:
				return e.Err()
			}
		}
	}
}

// write hands m's records to the sink, then, to a Timed sink, the sink
// task's watermark when m advances it (as an operator task takes its
// inputs' watermarks: opTask.process).
func (t *sinkTask[O]) write(ctx context.Context, m channel.Message[O], inWm []int64, inIdle []bool) error {
	t.ts.in.Add(int64(len(m.Elems)))
	t.st.in.Add(int64(len(m.Elems)))
	if t.elems != nil {
		if err := t.elems.writeElems(ctx, t.epoch, m.Elems); err != nil {
			return err
		}
		if t.advance(m, inWm, inIdle) {
			t.elems.advance(t.wm)
		}
		return nil
	}
	if t.timed == nil && t.batch != nil {
		vs := t.vs[:0]
		for i := range m.Elems {
			vs = append(vs, m.Elems[i].V)
		}
		err := t.batch.WriteBatch(ctx, t.epoch, vs)
		clear(vs) // the records go with their message
		t.vs = vs
		if err != nil {
			return err
		}
		t.advance(m, inWm, inIdle) // for its figures only
		return nil
	}
	if t.timed == nil {
		for i := range m.Elems {
			if err := t.sink.Write(ctx, t.epoch, m.Elems[i].V); err != nil {
				return err
			}
		}
		t.advance(m, inWm, inIdle) // for its figures only
		return nil
	}
	for i := range m.Elems {
		if err := t.timed.WriteAt(ctx, t.epoch, m.Elems[i].V, m.Elems[i].TS); err != nil {
			return err
		}
	}
	if t.advance(m, inWm, inIdle) {
		t.timed.Advance(t.wm)
	}
	return nil
}

// advance takes m's watermark and idleness into its input's, and reports
// whether the task's watermark, the least of its active inputs', rose.
func (t *sinkTask[O]) advance(m channel.Message[O], inWm []int64, inIdle []bool) bool {
	if m.WM <= inWm[m.From] && m.Idle == inIdle[m.From] {
		return false
	}
	inWm[m.From], inIdle[m.From] = max(inWm[m.From], m.WM), m.Idle
	if wm := activeMin(inWm, inIdle); wm > t.wm {
		t.wm = wm
		t.ts.wm.Store(wm)
		return true
	}
	return false
}

// opStateName is the operator part of the name of an operator-state file:
// the source's or sink's name, then ".operator-state"; the key-group field
// of the name is the instance index.
func opStateName(name string) string { return name + "." + opStateSuffix }

// opStateSuffix is the state slot of an operator-state file: a keyed
// stage's (ProcessBroadcast's broadcast state) sits beside its keyed
// states, so no keyed state takes the name.
const opStateSuffix = "operator-state"

// writeOpState writes, if v keeps operator state, instance's snapshot for
// checkpoint id as an Avro file (one entry per element, keyed by its
// index), and returns its reference. Two failures differ: the
// connector's own (SnapshotState: it could not take its state, a file
// sink's part file not made durable, say) fails the run, as its other
// errors do; the checkpoint storage's (putErr) declines the checkpoint
// only, as a keyed state file's does, within TolerableFailures: the
// connector took its state and carries it to the next checkpoint
// (connector.OperatorState).
func (r *run) writeOpState(ctx context.Context, v any, name string, instance int, id uint64) (files []checkpoint.FileRef, putErr, err error) {
	st, ok := v.(connector.OperatorState)
	if !ok {
		return nil, nil, nil
	}
	var elems [][]byte
	if fs, ok := v.(connector.FinalState); ok && id == r.finalID.Load() {
		elems, err = fs.SnapshotFinal(id)
	} else {
		elems, err = st.SnapshotState(id)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("operator state of %s[%d]: %w", name, instance, err)
	}
	entries := make([]statefile.Entry, len(elems))
	for k, e := range elems {
		entries[k] = statefile.Entry{Key: binary.BigEndian.AppendUint32(nil, uint32(k)), Value: e}
	}
	data, err := statefile.EncodeKeyGroup(entries)
	if err != nil {
		return nil, nil, fmt.Errorf("operator state of %s[%d]: %w", name, instance, err)
	}
	files, putErr = checkpoint.PutAll(ctx, r.store, map[string][]byte{layout.StateFileName(r.runID, id, opStateName(name), instance): data})
	if putErr != nil {
		putErr = fmt.Errorf("operator state of %s[%d]: %w", name, instance, putErr)
	}
	return files, putErr, nil
}

// checkOpStateNames refuses a checkpoint holding operator state of a
// source or sink this job has no part named after: renaming a source or
// sink would otherwise restore it empty, silently (as a renamed keyed
// state is refused: StateMismatchError).
func checkOpStateNames(j *Job, rs *restoreState) error {
	if rs.fresh {
		return nil
	}
	parts := map[string]bool{}
	for _, s := range j.sinks() {
		parts[s.sinkName()] = true
	}
	for _, s := range j.sources {
		parts[s.sourceName()] = true
	}
	for _, o := range j.ops {
		parts[o.stageName()] = true
	}
	for n := range rs.files {
		pn, ok := layout.ParseName(n)
		if !ok || pn.Kind != layout.KindState {
			continue
		}
		if name, ok := strings.CutSuffix(pn.Operator, opStateName("")); ok && !parts[name] {
			return fmt.Errorf("keyed: checkpoint %s holds the operator state of a source or sink named %q, and the job has none of that name: renamed? Give it its old name back, or run the job under a new name to start over",
				rs.meta.Ref(), name)
		}
	}
	return nil
}

// restoreOpState gives v, if it keeps operator state and a checkpoint is
// restored, the elements of every instance's snapshot in instance order.
func restoreOpState(rs *restoreState, v any, name string) error {
	st, ok := v.(connector.OperatorState)
	if !ok || rs.fresh {
		return nil
	}
	// One checkpoint's files, or on several processes every checkpoint the
	// run's partitions' records name (connector.ScaledState), in order.
	sets := []map[string][]byte{rs.files}
	for _, sr := range rs.scaled {
		sets = append(sets, sr.files)
	}
	var elems [][]byte
	for _, files := range sets {
		names := make([]string, 0, len(files))
		for n := range files {
			names = append(names, n)
		}
		sort.Strings(names) // instance order: the index is zero-padded
		for _, n := range names {
			pn, ok := layout.ParseName(n)
			if !ok || pn.Kind != layout.KindState || pn.Operator != opStateName(name) {
				continue
			}
			entries, err := statefile.DecodeKeyGroup(n, files[n])
			if err != nil {
				return fmt.Errorf("operator state of %s: %w", name, err)
			}
			for _, e := range entries {
				elems = append(elems, e.Value)
			}
		}
	}
	if err := st.RestoreState(elems); err != nil {
		return fmt.Errorf("operator state of %s: restore %s: %w", name, rs.meta.Ref(), err)
	}
	return nil
}

// allIdle reports whether every input is idle.
func allIdle(idle []bool) bool {
	for _, i := range idle {
		if !i {
			return false
		}
	}
	return true
}

// activeMin is the oldest watermark of the inputs that are not idle, and
// noTime when every input is idle (nothing to go by).
func activeMin(wms []int64, idle []bool) int64 {
	m, any := int64(channel.EndOfTime), false
	for u, wm := range wms {
		if !idle[u] {
			m, any = min(m, wm), true
		}
	}
	if !any {
		return channel.NoTime
	}
	return m
}
