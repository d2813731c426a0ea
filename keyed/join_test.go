//go:build kordfailpoints

package keyed_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kordproject/kord/internal/failpoint"
	"github.com/kordproject/kord/keyed"
	"github.com/kordproject/kord/keyed/connector"
	"github.com/kordproject/kord/partitioner"
	"github.com/kordproject/kord/serde"
	"github.com/kordproject/kord/vfs"
)

// order and payment are the two inputs of the join tests: an order of a
// user, and a payment of a user (the key) for an order.
type order struct {
	User string `json:"user"`
	ID   int64  `json:"id"`
}

type payment struct {
	User  string `json:"user"`
	Order int64  `json:"order"`
	Cents int64  `json:"cents"`
}

// paired is the join's result: one order and one payment of a user.
type paired struct {
	User    string
	Order   int64
	Payment int64 // the payment's order field: which payment
	Cents   int64
}

type timedID struct {
	ts int64
	v  int64
}

// TestIntervalJoinModel: orders and payments of 20 users, each input over
// its own topic with its own partition count in keyBy mode (or the same in
// partition mode), times out of order within the watermarks' lateness,
// joined on user where the payment is within [lower, upper] of the order;
// with crashes at random checkpoint steps and restores at other
// parallelisms, the committed pairs are exactly the model's, each once.
// At the end (the bounded inputs' watermark is past every time) the join's
// buffers hold nothing.
func TestIntervalJoinModel(t *testing.T) {
	eachSeed(t, windowSeeds(30), 17, func(t *testing.T, seed uint64, r *rand.Rand, crashes *int) {
		byPartition := seed%3 == 0
		lparts, rparts := 1+r.IntN(4), 1+r.IntN(4)
		if byPartition {
			rparts = lparts
		}
		lower := int64(r.IntN(60)) - 30
		upper := lower + int64(r.IntN(80))
		disorder := int64(1 + r.IntN(30))
		orders := keyed.NewMemorySource[order]("orders", lparts, true)
		payments := keyed.NewMemorySource[payment]("payments", rparts, true)
		var os, ps = map[string][]timedID{}, map[string][]timedID{}
		lclock, rclock := make([]int64, lparts), make([]int64, rparts)
		const base = 1_700_000_000_000
		n := 500 + r.IntN(1_500)
		for i := range n {
			u := fmt.Sprintf("user-%02d", r.IntN(20))
			if r.IntN(2) == 0 {
				p := partitioner.KeyPartition([]byte(u), lparts)
				lclock[p] += int64(r.IntN(8))
				ts := base + lclock[p] - int64(r.IntN(int(disorder)))
				orders.AppendAt(p, []byte(u), order{User: u, ID: int64(i)}, time.UnixMilli(ts))
				os[u] = append(os[u], timedID{ts, int64(i)})
			} else {
				p := partitioner.KeyPartition([]byte(u), rparts)
				rclock[p] += int64(r.IntN(8))
				ts := base + rclock[p] - int64(r.IntN(int(disorder)))
				payments.AppendAt(p, []byte(u), payment{User: u, Order: int64(i), Cents: int64(r.IntN(10_000))}, time.UnixMilli(ts))
				ps[u] = append(ps[u], timedID{ts, int64(i)})
			}
		}
		// The model: every (order, payment) of a user within the bounds.
		var want []string
		for u, ol := range os {
			for _, o := range ol {
				for _, p := range ps[u] {
					if p.ts >= o.ts+lower && p.ts <= o.ts+upper {
						want = append(want, fmt.Sprintf("%s/%d/%d", u, o.v, p.v))
					}
				}
			}
		}
		sort.Strings(want)

		mem := vfs.NewMem()
		sink := keyed.NewMemorySink[paired]()
		t.Logf("byPartition %v, partitions %d and %d, bounds [%d, %d] ms, disorder %d ms, %d records, %d pairs", byPartition, lparts, rparts, lower, upper, disorder, n, len(want))
		var empty func() bool
		late := runCrashing(t, r, mem, crashes, func(fs vfs.FS) *keyed.Job {
			j := keyed.NewJob("joins", keyed.FS(fs), keyed.Dir("/ckpt"), keyed.CheckpointInterval(time.Duration(1+r.IntN(4))*time.Millisecond),
				keyed.BatchSize(1+r.IntN(64)))
			lw := time.Duration(disorder) * time.Millisecond
			ls := keyed.FromSource(j, "orders", 1+r.IntN(3), connector.Source[order](orders)).Watermarks(lw)
			rs := keyed.FromSource(j, "payments", 1+r.IntN(3), connector.Source[payment](payments)).Watermarks(lw)
			var lk *keyed.KeyedStream[[]byte, order]
			var rk *keyed.KeyedStream[[]byte, payment]
			if byPartition {
				lk, rk = keyed.ByPartition(ls), keyed.ByPartition(rs)
			} else {
				lk = keyed.KeyBy("user", func(o order) []byte { return []byte(o.User) }, ls)
				rk = keyed.KeyBy("user", func(p payment) []byte { return []byte(p.User) }, rs)
			}
			par := 1 + r.IntN(3)
			if byPartition {
				par = min(par, lparts) // a key group per partition
			}
			out := keyed.IntervalJoin(lk, rk, "pay", par, time.Duration(lower)*time.Millisecond, time.Duration(upper)*time.Millisecond,
				serde.JSON[order](), serde.JSON[payment](), func(user []byte, o order, p payment) paired {
					return paired{User: string(user), Order: o.ID, Payment: p.Order, Cents: p.Cents}
				})
			keyed.ToSink(out, "pairs", connector.Sink[paired](sink))
			empty = keyed.WatchEmpty(j, "pay")
			return j
		})
		require.Zero(t, late, "records late although within the watermarks' lateness")
		var got []string
		for _, p := range sink.Committed() {
			got = append(got, fmt.Sprintf("%s/%d/%d", p.User, p.Order, p.Payment))
		}
		sort.Strings(got)
		require.Equal(t, want, got)
		require.True(t, empty(), "the join's buffers (and timers) hold entries after the watermark passed every time")
	})
}

// TestCoProcessRefusals: inputs that cannot be co-partitioned are refused
// with both named: topics of different partition counts in partition mode
// (at run time, when the counts are known), one input keyed by partition
// and the other by KeyBy (at once), and interval bounds the wrong way.
func TestCoProcessRefusals(t *testing.T) {
	build := func(lparts, rparts int, mixed bool, lower, upper time.Duration) *keyed.Job {
		j := keyed.NewJob("joins", keyed.FS(vfs.NewMem()), keyed.Dir("/ckpt"))
		ls := keyed.FromSource(j, "orders", 0, connector.Source[order](keyed.NewMemorySource[order]("orders", lparts, true)))
		rs := keyed.FromSource(j, "payments", 0, connector.Source[payment](keyed.NewMemorySource[payment]("payments", rparts, true)))
		rk := keyed.ByPartition(rs)
		if mixed {
			rk = keyed.KeyBy("user", func(p payment) []byte { return []byte(p.User) }, rs)
		}
		out := keyed.IntervalJoin(keyed.ByPartition(ls), rk, "pay", 0, lower, upper, serde.JSON[order](), serde.JSON[payment](),
			func(user []byte, o order, p payment) paired { return paired{} })
		keyed.ToSink(out, "pairs", connector.Sink[paired](keyed.NewMemorySink[paired]()))
		return j
	}
	err := build(4, 6, false, 0, time.Second).Run(t.Context())
	require.ErrorContains(t, err, `not co-partitioned: topic "orders" (source "orders") has 4 partitions, topic "payments" (source "payments") 6`)
	require.ErrorIs(t, err, keyed.ErrPermanent)
	require.ErrorContains(t, build(4, 4, true, 0, time.Second).Validate(), `CoProcess "pay": one input is keyed by partition (ByPartition), the other by KeyBy`)
	require.ErrorContains(t, build(4, 4, false, time.Second, 0).Validate(), `IntervalJoin "pay": lower bound 1s above the upper 0s`)
	require.NoError(t, build(4, 4, false, 0, time.Second).Run(t.Context()))
}

// profile is the table of the table join tests: a user's tier.
type profile struct {
	Tier int64 `json:"tier"`
}

// tiered is the table join's result: an order with its user's tier as of
// the order's time, if the user had a row then.
type tiered struct {
	User  string
	Order int64
	Tier  int64
	Found bool
}

// TestTableJoinModel: orders joined with a table of profiles (a changelog
// with updates and deletions, read as serde.Nullable gives it: nil a
// deletion), both out of order within the watermarks' lateness, in both
// keying modes, with crashes and restores at other parallelisms: each
// order meets the row its user had at the order's time (the latest
// table record at or before it, none if deleted), exactly once, whatever
// order the two inputs were read in. The table ends with a deletion of
// every user, after every order: then every state of the stage is empty,
// the versions no order can meet having been dropped.
func TestTableJoinModel(t *testing.T) {
	eachSeed(t, windowSeeds(30), 23, func(t *testing.T, seed uint64, r *rand.Rand, crashes *int) {
		byPartition := seed%3 == 0
		lparts, rparts := 1+r.IntN(4), 1+r.IntN(4)
		if byPartition {
			rparts = lparts
		}
		disorder := int64(1 + r.IntN(30))
		orders := keyed.NewMemorySource[order]("orders", lparts, true)
		profiles := keyed.NewMemorySource[*profile]("profiles", rparts, true)
		type row struct {
			ts  int64
			seq int
			p   *profile
		}
		rows := map[string][]row{}
		var os []timedID
		users := map[int64]string{}
		lclock, rclock := make([]int64, lparts), make([]int64, rparts)
		const base = 1_700_000_000_000
		n := 500 + r.IntN(1_500)
		var last int64
		for i := range n {
			u := fmt.Sprintf("user-%02d", r.IntN(15))
			if r.IntN(3) == 0 {
				p := partitioner.KeyPartition([]byte(u), rparts)
				rclock[p] += int64(r.IntN(8))
				ts := base + rclock[p] - int64(r.IntN(int(disorder)))
				var pr *profile
				if r.IntN(5) > 0 {
					pr = &profile{Tier: int64(r.IntN(1000))}
				}
				profiles.AppendAt(p, []byte(u), pr, time.UnixMilli(ts))
				rows[u] = append(rows[u], row{ts, i, pr})
				last = max(last, ts)
			} else {
				p := partitioner.KeyPartition([]byte(u), lparts)
				lclock[p] += int64(r.IntN(8))
				ts := base + lclock[p] - int64(r.IntN(int(disorder)))
				orders.AppendAt(p, []byte(u), order{User: u, ID: int64(i)}, time.UnixMilli(ts))
				os = append(os, timedID{ts, int64(i)})
				users[int64(i)] = u
				last = max(last, ts)
			}
		}
		for i := range 15 { // every user deleted, after everything
			u := fmt.Sprintf("user-%02d", i)
			profiles.AppendAt(partitioner.KeyPartition([]byte(u), rparts), []byte(u), nil, time.UnixMilli(last+1000))
		}
		// The model: each order's row as of its time; of rows of one
		// time the later written.
		var want []string
		for _, o := range os {
			u := users[o.v]
			var best *row
			for i := range rows[u] {
				x := &rows[u][i]
				if x.ts <= o.ts && (best == nil || x.ts > best.ts || x.ts == best.ts && x.seq > best.seq) {
					best = x
				}
			}
			if best != nil && best.p != nil {
				want = append(want, fmt.Sprintf("%s/%d/%d", u, o.v, best.p.Tier))
			} else {
				want = append(want, fmt.Sprintf("%s/%d/-", u, o.v))
			}
		}
		sort.Strings(want)

		mem := vfs.NewMem()
		sink := keyed.NewMemorySink[tiered]()
		t.Logf("byPartition %v, partitions %d and %d, disorder %d ms, %d records", byPartition, lparts, rparts, disorder, n)
		var empty func() bool
		late := runCrashing(t, r, mem, crashes, func(fs vfs.FS) *keyed.Job {
			j := keyed.NewJob("tables", keyed.FS(fs), keyed.Dir("/ckpt"), keyed.CheckpointInterval(time.Duration(1+r.IntN(4))*time.Millisecond),
				keyed.BatchSize(1+r.IntN(64)))
			lw := time.Duration(disorder) * time.Millisecond
			ls := keyed.FromSource(j, "orders", 1+r.IntN(3), connector.Source[order](orders)).Watermarks(lw)
			rs := keyed.FromSource(j, "profiles", 1+r.IntN(3), connector.Source[*profile](profiles)).Watermarks(lw)
			var lk *keyed.KeyedStream[[]byte, order]
			var rk *keyed.KeyedStream[[]byte, *profile]
			if byPartition {
				lk, rk = keyed.ByPartition(ls), keyed.ByPartition(rs)
			} else {
				lk = keyed.KeyBy("user", func(o order) []byte { return []byte(o.User) }, ls)
				rk = keyed.KeyByRecordKey("user", rs)
			}
			par := 1 + r.IntN(3)
			if byPartition {
				par = min(par, lparts)
			}
			out := keyed.TableJoin(lk, rk, "tier", par, serde.JSON[order](), serde.JSON[profile](),
				func(user []byte, o order, p profile, found bool) (tiered, bool) {
					return tiered{User: string(user), Order: o.ID, Tier: p.Tier, Found: found}, true
				})
			keyed.ToSink(out, "orders-tiered", connector.Sink[tiered](sink))
			empty = keyed.WatchEmpty(j, "tier")
			return j
		})
		require.Zero(t, late, "records late although within the watermarks' lateness")
		var got []string
		for _, x := range sink.Committed() {
			if x.Found {
				got = append(got, fmt.Sprintf("%s/%d/%d", x.User, x.Order, x.Tier))
			} else {
				got = append(got, fmt.Sprintf("%s/%d/-", x.User, x.Order))
			}
		}
		sort.Strings(got)
		require.Equal(t, want, got)
		require.True(t, empty(), "the join's state holds entries after every user's deletion passed the watermark")
	})
}

// rule is the broadcast input of the broadcast tests: rule N of a
// sequence, its value V.
type rule struct {
	N int64 `json:"n"`
	V int64 `json:"v"`
}

// versioned is what the broadcast test's operator emits: a user's event,
// and how many rules its task had applied when it came.
type versioned struct {
	User    string
	Seq     int64
	Version int
}

// ruledCounter counts rules into broadcast state and tags each event with
// the number it saw.
type ruledCounter struct {
	rules *keyed.BroadcastState[int64, int64]
}

func (c *ruledCounter) Open(b *keyed.Backend) (err error) {
	c.rules, err = keyed.BroadcastMap(b, "rules", serde.Int64(), serde.Int64())
	return err
}

func (c *ruledCounter) Process(key []byte, v event, out *keyed.Collector[versioned]) error {
	out.Emit(versioned{User: v.UUID, Seq: v.Seq, Version: c.rules.Len()})
	return nil
}

func (c *ruledCounter) ProcessBroadcast(r rule, out *keyed.Collector[versioned]) error {
	c.rules.Put(r.N, r.V)
	return nil
}

// TestBroadcastState: rules broadcast to every task of a keyed stage while
// events flow, with crashes at random checkpoint steps and restores at
// other parallelisms. Every event's result is committed once; a user's
// events see a number of rules that never goes down from one event to the
// next (a task applies the rules in order, and a restore gives every task
// the checkpoint's rules: restoring none, or a task missing them, makes
// the count drop after the crash).
//
// On several processes (every third seed: keyed.Instance, a sink that
// assigns partitions and keeps a record per partition, the keyed input by
// partition, the rules Auxiliary) the broadcast state is rebuilt from the
// rules input's start at each run instead of restored, every event meets
// every rule (all were written before the start, and an auxiliary input is
// read first), and the rules' offsets stay out of the partitions' records:
// committing them overwrites the events' partition 0 record, and its
// events come again.
func TestBroadcastState(t *testing.T) {
	eachSeed(t, windowSeeds(20), 29, func(t *testing.T, seed uint64, r *rand.Rand, crashes *int) {
		scaled := seed%3 == 0
		const parts = 4
		events := keyed.NewMemorySource[event]("events", parts, true)
		rparts := 1 + r.IntN(2)
		rules := keyed.NewMemorySource[rule]("rules", rparts, true)
		nrules := 1 + r.IntN(30)
		seq := map[string]int64{}
		n := 300 + r.IntN(1_000)
		for i := range n {
			u := fmt.Sprintf("user-%02d", r.IntN(12))
			events.Append(partitioner.KeyPartition([]byte(u), parts), []byte(u), event{UUID: u, Seq: seq[u]})
			seq[u]++
			if i < nrules {
				rules.Append(int32(i%rparts), nil, rule{N: int64(i), V: int64(r.IntN(100))})
			}
		}
		mem := vfs.NewMem()
		sink := keyed.NewMemorySink[versioned]()
		var member *memberSink[versioned]
		if scaled {
			member = newMemberSink[versioned]("events", parts)
			sink = member.MemorySink
		}
		runCrashing(t, r, mem, crashes, func(fs vfs.FS) *keyed.Job {
			opts := []keyed.Opt{keyed.FS(fs), keyed.Dir("/ckpt"), keyed.CheckpointInterval(time.Duration(1+r.IntN(4)) * time.Millisecond),
				keyed.BatchSize(1 + r.IntN(32))}
			if scaled {
				opts = append(opts, keyed.Instance("p0"))
			}
			j := keyed.NewJob("ruled", opts...)
			es := keyed.FromSource(j, "events", 1+r.IntN(3), connector.Source[event](events))
			rs := keyed.FromSource(j, "rules", 1, connector.Source[rule](rules))
			k := keyed.KeyBy("uuid", func(e event) []byte { return []byte(e.UUID) }, es)
			var to connector.Sink[versioned] = sink
			if scaled {
				k, to = keyed.ByPartition(es), member
				rs.Auxiliary()
			}
			out := keyed.ProcessBroadcast(k, keyed.Broadcast(rs), "ruled", 1+r.IntN(4), func() keyed.BroadcastOperator[event, rule, versioned] { return &ruledCounter{} })
			keyed.ToSink(out, "tagged", to)
			return j
		})
		seen := map[string]int64{} // next seq per user
		version := map[string]int{}
		for _, v := range sink.Committed() {
			require.Equal(t, seen[v.User], v.Seq, "user %s: events once, in order", v.User)
			seen[v.User]++
			require.GreaterOrEqual(t, v.Version, version[v.User], "user %s event %d saw fewer rules than its previous event", v.User, v.Seq)
			require.LessOrEqual(t, v.Version, nrules)
			if scaled {
				// Every rule was there before the job started, and the
				// rules are read to their end before any event.
				require.Equal(t, nrules, v.Version, "user %s event %d: rules before the events", v.User, v.Seq)
			}
			version[v.User] = v.Version
		}
		require.Equal(t, seq, seen, "every event's result")
	})
}

// writingCounter changes the broadcast state where it may not: in Process.
type writingCounter struct{ ruledCounter }

func (c *writingCounter) Process(key []byte, v event, out *keyed.Collector[versioned]) error {
	c.rules.Put(-1, 0)
	return nil
}

// TestBroadcastRefusals: broadcast state changed outside ProcessBroadcast
// fails the run, naming the state; on a job of several processes a
// broadcast input that is not Auxiliary is refused, naming its source;
// broadcast state on another stage is refused. A keyed input by partition
// runs, the rules topic (one partition) not counting among the events'
// two.
func TestBroadcastRefusals(t *testing.T) {
	build := func(newOp func() keyed.BroadcastOperator[event, rule, versioned], byPartition bool, opts ...keyed.Opt) *keyed.Job {
		j := keyed.NewJob("ruled", append([]keyed.Opt{keyed.FS(vfs.NewMem()), keyed.Dir("/ckpt")}, opts...)...)
		events := keyed.NewMemorySource[event]("events", 2, true)
		events.Append(0, []byte("u"), event{UUID: "u"})
		es := keyed.FromSource(j, "events", 0, connector.Source[event](events))
		rs := keyed.FromSource(j, "rules", 0, connector.Source[rule](keyed.NewMemorySource[rule]("rules", 1, true)))
		k := keyed.KeyBy("uuid", func(e event) []byte { return []byte(e.UUID) }, es)
		var sink connector.Sink[versioned] = keyed.NewMemorySink[versioned]()
		if byPartition {
			k = keyed.ByPartition(es)
			sink = newMemberSink[versioned]("events", 2)
		}
		keyed.ToSink(keyed.ProcessBroadcast(k, keyed.Broadcast(rs), "ruled", 0, newOp), "tagged", sink)
		return j
	}
	err := build(func() keyed.BroadcastOperator[event, rule, versioned] { return &writingCounter{} }, false).Run(t.Context())
	require.ErrorContains(t, err, `broadcast state "rules" changed outside ProcessBroadcast`)
	require.NoError(t, build(func() keyed.BroadcastOperator[event, rule, versioned] { return &ruledCounter{} }, true).Run(t.Context()))
	require.ErrorContains(t, build(func() keyed.BroadcastOperator[event, rule, versioned] { return &ruledCounter{} }, true, keyed.Instance("p0")).Run(t.Context()),
		`source "rules" feeds a broadcast input, which every process of a job on several reads whole from its start at each run: mark its stream Auxiliary`)
	require.NoError(t, build(func() keyed.BroadcastOperator[event, rule, versioned] { return &ruledCounter{} }, false).Run(t.Context()))

	j := keyed.NewJob("plain", keyed.FS(vfs.NewMem()), keyed.Dir("/ckpt"))
	src := keyed.NewMemorySource[event]("events", 1, true)
	src.Append(0, []byte("u"), event{UUID: "u"})
	s := keyed.FromSource(j, "events", 0, connector.Source[event](src))
	out := keyed.Process(keyed.ByPartition(s), "plain", 0, func() keyed.Operator[event, versioned] { return &broadcastOnPlain{} })
	keyed.ToSink(out, "out", connector.Sink[versioned](keyed.NewMemorySink[versioned]()))
	require.ErrorContains(t, j.Run(t.Context()), `only a ProcessBroadcast stage has broadcast state`)
}

type broadcastOnPlain struct{}

func (broadcastOnPlain) Open(b *keyed.Backend) error {
	_, err := keyed.BroadcastMap(b, "rules", serde.Int64(), serde.Int64())
	return err
}
func (broadcastOnPlain) Process([]byte, event, *keyed.Collector[versioned]) error { return nil }

// runCrashing runs the job build makes on a clone of mem until a run ends
// without a crash: the first three runs crash at a random checkpoint step
// (a crash keeps what the file system kept: CrashClone), each adding to
// crashes. It returns the late records of every run.
func runCrashing(t *testing.T, r *rand.Rand, mem *vfs.MemFS, crashes *int, build func(fs vfs.FS) *keyed.Job) (late int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for incarnation := 0; ; incarnation++ {
		require.Less(t, incarnation, 10)
		j := build(mem)
		rctx := ctx
		if incarnation < 3 {
			rctx = failpoint.WithHook(ctx, crashAt(crashPoints[r.IntN(len(crashPoints))], 1+r.IntN(4)))
		}
		err := j.Run(rctx)
		late += j.LateRecords()
		if errors.Is(err, failpoint.ErrCrashed) {
			*crashes++
			mem = mem.CrashClone()
			continue
		}
		require.NoError(t, err)
		return late
	}
}

// eachSeed runs f as a subtest per seed from 1 to seeds, with a generator
// of that seed (and stream), and fails unless some run crashed (crashes,
// which runCrashing counts): restores untested would pass unseen.
func eachSeed(t *testing.T, seeds int, stream uint64, f func(t *testing.T, seed uint64, r *rand.Rand, crashes *int)) {
	crashes := 0
	for seed := uint64(1); seed <= uint64(seeds); seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { f(t, seed, rand.New(rand.NewPCG(seed, stream)), &crashes) })
	}
	if !t.Failed() {
		require.Positive(t, crashes, "no run crashed: the restores went untested")
		t.Logf("%d crashes over %d seeds", crashes, seeds)
	}
}

// TestIntervalJoinBound: a right record at exactly the left's time+upper,
// coming when the watermark has just reached that time, still pairs: the
// left is freed only once the watermark passes the bound. Left u@100 and
// v@200 are read first (the right input holding the watermark back), then
// the right input's w@110 moves the watermark to 110, then u@110 (not
// late: at the watermark) comes in a message of its own. Freeing the left
// at 110 instead of 111 loses the pair.
func TestIntervalJoinBound(t *testing.T) {
	left := keyed.NewMemorySource[order]("orders", 1, false)
	right := keyed.NewMemorySource[payment]("payments", 1, false)
	left.AppendAt(0, []byte("u"), order{User: "u", ID: 1}, time.UnixMilli(100))
	left.AppendAt(0, []byte("v"), order{User: "v", ID: 2}, time.UnixMilli(200))
	sink := keyed.NewMemorySink[paired]()
	j := keyed.NewJob("bound", keyed.FS(vfs.NewMem()), keyed.Dir("/ckpt"), keyed.BatchSize(1), keyed.CheckpointInterval(10*time.Millisecond))
	ls := keyed.FromSource(j, "orders", 1, connector.Source[order](left)).Watermarks(0)
	rs := keyed.FromSource(j, "payments", 1, connector.Source[payment](right)).Watermarks(0)
	out := keyed.IntervalJoin(keyed.KeyBy("user", func(o order) []byte { return []byte(o.User) }, ls),
		keyed.KeyBy("user", func(p payment) []byte { return []byte(p.User) }, rs), "pay", 1, 0, 10*time.Millisecond,
		serde.JSON[order](), serde.JSON[payment](), func(user []byte, o order, p payment) paired {
			return paired{User: string(user), Order: o.ID, Payment: p.Order}
		})
	keyed.ToSink(out, "pairs", connector.Sink[paired](sink))
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- j.Run(ctx) }()
	time.Sleep(200 * time.Millisecond) // the left input read, the right holding the watermark
	right.AppendAt(0, []byte("w"), payment{User: "w", Order: 3}, time.UnixMilli(110))
	time.Sleep(200 * time.Millisecond) // the watermark at 110, timers at 110 fired
	right.AppendAt(0, []byte("u"), payment{User: "u", Order: 4}, time.UnixMilli(110))
	require.Eventually(t, func() bool { return len(sink.Committed()) > 0 }, 5*time.Second, 10*time.Millisecond, "the pair at the bound")
	cancel()
	require.NoError(t, <-done)
	require.Equal(t, []paired{{User: "u", Order: 1, Payment: 4}}, sink.Committed())
	require.Zero(t, j.LateRecords())
}

// TestAuxiliarySource: a rules input that never ends (unbounded) does not
// keep a job of bounded events from ending, nor hold its watermark back:
// with the rules source Auxiliary, the job fires every window downstream
// of the broadcast stage and stops with a final checkpoint once the events
// end; a rule appended while it runs still reaches the tasks. Without
// Auxiliary the job would wait for the rules forever (and no window would
// fire: the rules input sends no watermark).
func TestAuxiliarySource(t *testing.T) {
	events := keyed.NewMemorySource[event]("events", 2, true)
	for i := range 2_000 {
		u := fmt.Sprintf("user-%d", i%7)
		events.AppendAt(partitioner.KeyPartition([]byte(u), 2), []byte(u), event{UUID: u, Seq: int64(i)}, time.UnixMilli(1_700_000_000_000+int64(i)))
	}
	rules := keyed.NewMemorySource[rule]("rules", 1, false) // never ends
	rules.Append(0, nil, rule{N: 1, V: 1})
	j := keyed.NewJob("aux", keyed.FS(vfs.NewMem()), keyed.Dir("/ckpt"), keyed.CheckpointInterval(5*time.Millisecond))
	es := keyed.FromSource(j, "events", 0, connector.Source[event](events)).Watermarks(0)
	rs := keyed.FromSource(j, "rules", 1, connector.Source[rule](rules)).Auxiliary()
	tagged := keyed.ProcessBroadcast(keyed.KeyBy("uuid", func(e event) []byte { return []byte(e.UUID) }, es), keyed.Broadcast(rs), "ruled", 2,
		func() keyed.BroadcastOperator[event, rule, versioned] { return &ruledCounter{} })
	perSecond := keyed.WindowAggregate(keyed.KeyByString("user", func(v versioned) string { return v.User }, tagged), "per-second", 2,
		keyed.Tumbling(time.Second), serde.Int64(),
		keyed.Aggregator[versioned, int64]{Init: func() int64 { return 0 }, Add: func(n int64, _ versioned) int64 { return n + 1 }},
		func(_ string, _ keyed.Window, n int64) int64 { return n }, nil)
	sink := keyed.NewMemorySink[int64]()
	keyed.ToSink(perSecond, "counts", connector.Sink[int64](sink))
	rules.Append(0, nil, rule{N: 2, V: 2}) // while it runs, or before: either way it is read
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	require.NoError(t, j.Run(ctx), "the job ends with its events")
	var total int64
	for _, n := range sink.Committed() {
		total += n
	}
	require.Equal(t, int64(2_000), total, "every event counted in a fired window")
	require.ErrorContains(t, func() error {
		j := keyed.NewJob("aux2", keyed.FS(vfs.NewMem()), keyed.Dir("/ckpt"))
		s := keyed.FromSource(j, "rules", 1, connector.Source[rule](rules)).Auxiliary().Watermarks(0)
		keyed.ToSink(keyed.ProcessFunc(keyed.ByPartition(s), "p", 1, func(_ []byte, r rule, out *keyed.Collector[rule]) error { return nil }), "s", connector.Sink[rule](keyed.NewMemorySink[rule]()))
		return j.Validate()
	}(), "an auxiliary input takes no part in event time")
}
