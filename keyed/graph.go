package keyed

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/kordproject/kord/keyed/internal/channel"
	"github.com/kordproject/kord/keyed/internal/keygroup"
)

// The declared graph. Stages run tasks: sources and keyed stages (the sink
// runs one task of its own). A stage's records reach the next stage through
// an exchange: a key-group shuffle into a keyed stage, or the sink's
// input. Between a stage and an exchange, Map, Filter and FlatMap are
// chained: they run in the upstream task, as Flink chains operators, with
// no channel hop and no goroutine of their own. A stage may feed several
// exchanges (fan-out), and an exchange take several stages (union).
//
// Only the plan (plan.go) knows the run mode; the pieces below know their
// own types and nothing else.

// emit hands a batch of elements on from a task: through the chained
// functions, to an exchange's outbox. A batch, not a record: each chained
// function and the routing run as a loop over it. (A call per record cost
// the one-stage job 8 to 17 % of its rate, and a chained MapValues about
// 30 ns per event: the key's hash, a cache miss on the key's bytes, no
// longer overlapped the next record's; BenchmarkStages.) The callee may
// neither keep es nor change its elements (a fan-out hands the same batch
// to each inlet); the caller may reuse it after the call.
type emit[T any] func(es []channel.Element[T]) error

// stageNode is a stage, type-erased: what exchanges count and the plan
// resolves.
type stageNode interface {
	stageName() string
	// tasks is the stage's parallelism in the run being built.
	tasks() int
}

// outlet is where a stream's records come from: a stage's output,
// possibly through chained functions.
type outlet[T any] interface {
	// attach sends the records on to in as well.
	attach(in inlet[T])
	// origins are the stages whose tasks emit the records: one, or
	// several after Union.
	origins() []stageNode
}

// inlet takes records of type T from the tasks of a stage.
type inlet[T any] interface {
	// target is the exchange the records end in, past any chained
	// functions.
	target() exchange
	// connect gives one upstream task its emit function for this inlet,
	// adding the outbox it sends through to outs. Called once per task of
	// every stage attached, after the run opened the exchange.
	connect(r *run, outs *outputs) emit[T]
}

// exchange is where records cross from the tasks of the stages that feed
// it to the tasks downstream.
type exchange interface {
	// feed records that s's tasks send here.
	feed(s stageNode)
	// upstreams is how many tasks send here in the run being built.
	upstreams() int
	// partitionMode says the records keep their source partition as
	// their key group (ByPartition).
	partitionMode() bool
}

// feeders is an exchange's record of the stages that feed it.
type feeders []stageNode

func (f *feeders) feed(s stageNode) { *f = append(*f, s) }

func (f *feeders) upstreams() int {
	n := 0
	for _, s := range *f {
		n += s.tasks()
	}
	return n
}

// keyedExchange is a keyed stage's input: each record goes to the task
// owning its key group, its key computed here (KeyBy), or taken from the
// record's Kafka key with the partition as the key group (ByPartition).
type keyedExchange[T any] struct {
	feeders
	key         func(v T, recordKey []byte) []byte
	keyName     string // KeyBy's; "" with ByPartition
	byPartition bool
	broadcast   func(T) bool // ProcessBroadcast's: records for every task
	// The run being built: the downstream tasks' inboxes, the key groups,
	// and the next upstream index to give out.
	in   []*channel.Inbox[T]
	maxP int
	next int
}

func (x *keyedExchange[T]) target() exchange { return x }

// open makes the inboxes of the p downstream tasks for a run.
func (x *keyedExchange[T]) open(p, maxP, credits int) {
	x.in = make([]*channel.Inbox[T], p)
	for d := range x.in {
		x.in[d] = channel.NewInbox[T](x.upstreams(), credits)
	}
	x.maxP, x.next = maxP, 0
}

func (x *keyedExchange[T]) connect(r *run, outs *outputs) emit[T] {
	from := make([]int, len(x.in))
	for d := range from {
		from[d] = x.next
	}
	x.next++
	ob := channel.NewOutbox(r.stop, x.in, from, r.cfg.BatchSize)
	*outs = append(*outs, ob)
	maxP, p, key, byPartition, bc := x.maxP, len(x.in), x.key, x.byPartition, x.broadcast
	var firstKG []int32
	if bc != nil {
		firstKG = broadcastTo(maxP, p)
	}
	return func(es []channel.Element[T]) error {
		for i := range es {
			e := &es[i]
			if bc != nil && bc(e.V) {
				// To every task, in the range of each (no key is current
				// while it is handled).
				for d, kg := range firstKG {
					if err := ob.Add(d, channel.Element[T]{V: e.V, KG: kg, TS: e.TS}); err != nil {
						return err
					}
				}
				continue
			}
			// In partition mode the source set Key (the record's) and
			// KG (its partition); otherwise the key is computed here.
			k, kg := e.Key, int(e.KG)
			if !byPartition {
				k = key(e.V, e.Key)
				kg = keygroup.Of(k, maxP)
			}
			if err := ob.Add(keygroup.OperatorIndex(kg, maxP, p), channel.Element[T]{V: e.V, Key: k, KG: int32(kg), TS: e.TS}); err != nil {
				return err
			}
		}
		return nil
	}
}

// sinkExchange is the sink task's input.
type sinkExchange[O any] struct {
	feeders
	in   *channel.Inbox[O]
	next int
}

func (x *sinkExchange[O]) target() exchange { return x }

func (x *sinkExchange[O]) open(credits int) {
	x.in, x.next = channel.NewInbox[O](x.upstreams(), credits), 0
}

func (x *sinkExchange[O]) connect(r *run, outs *outputs) emit[O] {
	ob := x.outbox(r, outs)
	return func(es []channel.Element[O]) error {
		for i := range es {
			if err := ob.Add(0, es[i]); err != nil {
				return err
			}
		}
		return nil
	}
}

// outbox is one upstream task's outbox to the sink task.
func (x *sinkExchange[O]) outbox(r *run, outs *outputs) *channel.Outbox[O] {
	ob := channel.NewOutbox(r.stop, []*channel.Inbox[O]{x.in}, []int{x.next}, r.cfg.BatchSize)
	x.next++
	*outs = append(*outs, ob)
	return ob
}

// broadcastSide is the broadcast input of a ProcessBroadcast stage. Its
// records go to every task of the stage, so they keep no partition as
// their key group: the exchange it ends in is not in partition mode for
// them, and a source that feeds only broadcast inputs is read whole by
// every process of a job on several (Job.checkScaled).
type broadcastSide[T any] struct{ up outlet[T] }

func (b broadcastSide[T]) attach(in inlet[T])   { b.up.attach(broadcastIn[T]{in}) }
func (b broadcastSide[T]) origins() []stageNode { return b.up.origins() }

type broadcastIn[T any] struct{ inlet[T] }

func (b broadcastIn[T]) target() exchange { return broadcastTarget{b.inlet.target()} }

// broadcastTarget is the exchange a broadcast input ends in, as its
// upstream sees it.
type broadcastTarget struct{ exchange }

func (broadcastTarget) partitionMode() bool { return false }

// fanOut is the emit function of a task whose stage feeds inlets ins.
func fanOut[T any](r *run, ins []inlet[T], outs *outputs) emit[T] {
	emits := make([]emit[T], len(ins))
	for i, in := range ins {
		emits[i] = in.connect(r, outs)
	}
	if len(emits) == 1 {
		return emits[0]
	}
	return func(es []channel.Element[T]) error {
		for _, em := range emits {
			if err := em(es); err != nil {
				return err
			}
		}
		return nil
	}
}

// outputs is a task's outboxes, one per inlet it feeds: barriers,
// watermarks and flushes go to each.
type outputs []outbox

type outbox interface {
	CountBlocked(c *atomic.Int64)
	Broadcast(barrier uint64) error
	Advance(wm int64)
	SetIdle(idle bool)
	Pending() bool
	FlushDue(timeout time.Duration) error
	FlushAll() error
}

// countBlocked counts the time the task's sends wait for credits in c.
func (o outputs) countBlocked(c *atomic.Int64) {
	for _, b := range o {
		b.CountBlocked(c)
	}
}

func (o outputs) Broadcast(barrier uint64) error {
	for _, b := range o {
		if err := b.Broadcast(barrier); err != nil {
			return err
		}
	}
	return nil
}

func (o outputs) Advance(wm int64) {
	for _, b := range o {
		b.Advance(wm)
	}
}

func (o outputs) SetIdle(idle bool) {
	for _, b := range o {
		b.SetIdle(idle)
	}
}

func (o outputs) Pending() bool {
	for _, b := range o {
		if b.Pending() {
			return true
		}
	}
	return false
}

func (o outputs) FlushDue(timeout time.Duration) error {
	for _, b := range o {
		if err := b.FlushDue(timeout); err != nil {
			return err
		}
	}
	return nil
}

func (o outputs) FlushAll() error {
	for _, b := range o {
		if err := b.FlushAll(); err != nil {
			return err
		}
	}
	return nil
}

// Chained functions: each wraps the inlet after it.

type mapped[T, U any] struct {
	up outlet[T]
	f  func(T) U
}

func (m *mapped[T, U]) attach(in inlet[U])   { m.up.attach(&mapIn[T, U]{f: m.f, next: in}) }
func (m *mapped[T, U]) origins() []stageNode { return m.up.origins() }

type mapIn[T, U any] struct {
	f    func(T) U
	next inlet[U]
}

func (m *mapIn[T, U]) target() exchange { return m.next.target() }

func (m *mapIn[T, U]) connect(r *run, outs *outputs) emit[T] {
	next, f := m.next.connect(r, outs), m.f
	var buf []channel.Element[U] // the task's, reused
	return func(es []channel.Element[T]) error {
		buf = buf[:0]
		for i := range es {
			e := &es[i]
			buf = append(buf, channel.Element[U]{V: f(e.V), Key: e.Key, KG: e.KG, TS: e.TS})
		}
		return next(buf)
	}
}

type filtered[T any] struct {
	up   outlet[T]
	keep func(T) bool
}

func (f *filtered[T]) attach(in inlet[T])   { f.up.attach(&filterIn[T]{keep: f.keep, next: in}) }
func (f *filtered[T]) origins() []stageNode { return f.up.origins() }

type filterIn[T any] struct {
	keep func(T) bool
	next inlet[T]
}

func (f *filterIn[T]) target() exchange { return f.next.target() }

func (f *filterIn[T]) connect(r *run, outs *outputs) emit[T] {
	next, keep := f.next.connect(r, outs), f.keep
	var buf []channel.Element[T] // the task's, reused
	return func(es []channel.Element[T]) error {
		buf = buf[:0]
		for i := range es {
			if keep(es[i].V) {
				buf = append(buf, es[i])
			}
		}
		if len(buf) == 0 {
			return nil
		}
		return next(buf)
	}
}

type flatMapped[T, U any] struct {
	up outlet[T]
	f  func(v T, emit func(U))
}

func (m *flatMapped[T, U]) attach(in inlet[U])   { m.up.attach(&flatMapIn[T, U]{f: m.f, next: in}) }
func (m *flatMapped[T, U]) origins() []stageNode { return m.up.origins() }

type flatMapIn[T, U any] struct {
	f    func(v T, emit func(U))
	next inlet[U]
}

func (m *flatMapIn[T, U]) target() exchange { return m.next.target() }

func (m *flatMapIn[T, U]) connect(r *run, outs *outputs) emit[T] {
	// One yield per task, made once: the element it copies the key and
	// time from, and the batch it fills, live beside it.
	fm := &flatMapper[T, U]{next: m.next.connect(r, outs), f: m.f}
	fm.yield = fm.add
	return fm.run
}

type flatMapper[T, U any] struct {
	next  emit[U]
	f     func(v T, emit func(U))
	yield func(U)
	cur   *channel.Element[T]
	buf   []channel.Element[U]
}

func (fm *flatMapper[T, U]) run(es []channel.Element[T]) error {
	fm.buf = fm.buf[:0]
	for i := range es {
		fm.cur = &es[i]
		fm.f(es[i].V, fm.yield)
	}
	fm.cur = nil
	if len(fm.buf) == 0 {
		return nil
	}
	return fm.next(fm.buf)
}

func (fm *flatMapper[T, U]) add(u U) {
	c := fm.cur
	fm.buf = append(fm.buf, channel.Element[U]{V: u, Key: c.Key, KG: c.KG, TS: c.TS})
}

// MapValues makes a stream of f(v) for each record v of s, chained into
// the task that makes s's records (Kafka Streams' mapValues; Flink's map):
// no channel hop, no goroutine. A record keeps its time, and on a source's
// stream its partition and Kafka key (so ByPartition still applies); a key
// is what KeyBy makes of the value. (keyed.Map is map state.)
func MapValues[T, U any](s *Stream[T], f func(T) U) *Stream[U] {
	if f == nil {
		s.j.errs = append(s.j.errs, fmt.Errorf("keyed: MapValues of stream %q: nil function", s.name()))
	}
	return &Stream[U]{j: s.j, out: &mapped[T, U]{up: s.out, f: f}}
}

// Filter makes a stream of s's records for which keep returns true,
// chained as MapValues is (Flink's and Kafka Streams' filter).
func (s *Stream[T]) Filter(keep func(T) bool) *Stream[T] {
	if keep == nil {
		s.j.errs = append(s.j.errs, fmt.Errorf("keyed: Filter of stream %q: nil function", s.name()))
	}
	return &Stream[T]{j: s.j, out: &filtered[T]{up: s.out, keep: keep}}
}

// FlatMapValues makes a stream of what f emits for each record of s, none
// or any number, in order, chained as MapValues is (Kafka Streams'
// flatMapValues; Flink's flatMap). emit is valid only during the call.
func FlatMapValues[T, U any](s *Stream[T], f func(v T, emit func(U))) *Stream[U] {
	if f == nil {
		s.j.errs = append(s.j.errs, fmt.Errorf("keyed: FlatMapValues of stream %q: nil function", s.name()))
	}
	return &Stream[U]{j: s.j, out: &flatMapped[T, U]{up: s.out, f: f}}
}

type union[T any] []outlet[T]

func (u union[T]) attach(in inlet[T]) {
	for _, up := range u {
		up.attach(in)
	}
}

func (u union[T]) origins() []stageNode {
	var out []stageNode
	for _, up := range u {
		out = append(out, up.origins()...)
	}
	return out
}

// Union makes one stream of the records of streams, of one job: each
// stream's records in their order, interleaved in no set order (Flink's
// and Kafka Streams' union, Kafka Streams' merge). A keyed stage or the
// sink that takes it aligns barriers across all of them.
func Union[T any](streams ...*Stream[T]) *Stream[T] {
	if len(streams) == 0 {
		panic("keyed: Union of no stream")
	}
	j := streams[0].j
	u := make(union[T], len(streams))
	for i, s := range streams {
		if s.j != j {
			j.errs = append(j.errs, fmt.Errorf("keyed: Union of streams of jobs %q and %q: a stream belongs to one job", j.name, s.j.name))
		}
		u[i] = s.out
	}
	return &Stream[T]{j: j, out: u}
}
