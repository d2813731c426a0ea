//go:build kordfailpoints

package keyed_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
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

// windowCount is a window's result in the tests: a key's record count and
// the sum of their sequence numbers in one window.
type windowCount struct {
	Key   string
	Start int64
	Count int64
	Sum   int64
	Late  bool // a late record's side output
}

// countSum is the tests' accumulator, kept as two int64s.
type countSum struct{ N, Sum int64 }

type countSumCodec struct{}

func (countSumCodec) Encode(dst []byte, v countSum) ([]byte, error) {
	dst, _ = serde.Int64().Encode(dst, v.N)
	return serde.Int64().Encode(dst, v.Sum)
}

func (countSumCodec) Decode(b []byte) (countSum, error) {
	if len(b) != 16 {
		return countSum{}, fmt.Errorf("countSum: %d bytes", len(b))
	}
	n, err := serde.Int64().Decode(b[:8])
	if err != nil {
		return countSum{}, err
	}
	s, err := serde.Int64().Decode(b[8:])
	return countSum{N: n, Sum: s}, err
}

func (countSumCodec) Fingerprint() string { return "test.countSum" }

var countSumAgg = keyed.Aggregator[event, countSum]{
	Init:  func() countSum { return countSum{} },
	Add:   func(a countSum, e event) countSum { return countSum{N: a.N + 1, Sum: a.Sum + e.Seq} },
	Merge: func(a, b countSum) countSum { return countSum{N: a.N + b.N, Sum: a.Sum + b.Sum} },
}

func windowResult(key []byte, w keyed.Window, a countSum) windowCount {
	return windowCount{Key: string(key), Start: w.Start.UnixMilli(), Count: a.N, Sum: a.Sum}
}

// countWindows counts k's records per window w with parallelism par:
// handed their records (WindowApply) or folding them (WindowAggregate).
func countWindows(k *keyed.KeyedStream[[]byte, event], par int, w keyed.Windows, apply bool, late func([]byte, event) (windowCount, bool)) *keyed.Stream[windowCount] {
	if apply {
		return keyed.WindowApply(k, "windows", par, w, serde.JSON[event](),
			func(key []byte, win keyed.Window, es []event) windowCount {
				var a countSum
				for _, e := range es {
					a = countSumAgg.Add(a, e)
				}
				return windowResult(key, win, a)
			}, late)
	}
	return keyed.WindowAggregate(k, "windows", par, w, serde.Serde[countSum](countSumCodec{}), countSumAgg,
		func(key []byte, win keyed.Window, a countSum) windowCount { return windowResult(key, win, a) }, late)
}

// TestWindowsModel: tumbling, sliding and session windows, aggregated
// (WindowAggregate) or handed their records (WindowApply), over seeded
// input whose times are out of order within the watermarks' lateness (so
// no record is late), with crashes at random checkpoint steps and restores
// at other parallelisms: the committed results are exactly a model's, each
// window once.
func TestWindowsModel(t *testing.T) {
	seeds := windowSeeds(45)
	for seed := uint64(1); seed <= uint64(seeds); seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 11))
			kind := int(seed % 3) // tumbling, sliding, session
			size := int64(50 + r.IntN(200))
			slide := size
			w := keyed.Tumbling(time.Duration(size) * time.Millisecond)
			gap := int64(0)
			switch kind {
			case 1:
				slide = int64(20 + r.IntN(60))
				size = slide * int64(1+r.IntN(4))
				w = keyed.Sliding(time.Duration(size)*time.Millisecond, time.Duration(slide)*time.Millisecond)
			case 2:
				// An odd gap and even times: no two times of a key are
				// exactly gap apart. A record at exactly a session's end
				// merges with it only if the session has not fired yet,
				// which depends on when the watermark came (in Flink
				// too): the model could not say.
				gap = int64(21 + 2*r.IntN(60))
				w = keyed.Session(time.Duration(gap) * time.Millisecond)
			}
			const parts = 4
			disorder := int64(1 + r.IntN(40))
			src := keyed.NewMemorySource[event]("events", parts, true)
			model := map[string]countSum{}
			seq := map[string]int64{}
			times := map[string][]timedSeq{}
			clock := make([]int64, parts)
			n := 2_000 + r.IntN(4_000)
			for i := 0; i < n; i++ {
				u := fmt.Sprintf("user-%02d", r.IntN(25))
				p := partitioner.KeyPartition([]byte(u), parts)
				clock[p] += int64(r.IntN(6))
				ts := 1_700_000_000_000 + clock[p] - int64(r.IntN(int(disorder)))
				if gap > 0 {
					ts &^= 1
				}
				e := event{UUID: u, Seq: seq[u]}
				src.AppendAt(p, []byte(u), e, time.UnixMilli(ts))
				seq[u]++
				times[u] = append(times[u], timedSeq{ts, e.Seq})
				if gap == 0 {
					for _, s := range windowStarts(size, slide, ts) {
						k := fmt.Sprintf("%s/%d", u, s)
						m := model[k]
						model[k] = countSum{N: m.N + 1, Sum: m.Sum + e.Seq}
					}
				}
			}
			if gap > 0 {
				model = sessionModel(times, gap)
			}
			mem := vfs.NewMem()
			sink := keyed.NewMemorySink[windowCount]()
			keyBy := r.IntN(2) == 0
			apply := r.IntN(2) == 0
			t.Logf("kind %d, keyBy %v, apply %v, %d records", kind, keyBy, apply, n)
			var crashes int
			late := runCrashing(t, r, mem, &crashes, func(fs vfs.FS) *keyed.Job {
				j := keyed.NewJob("windows", keyed.FS(fs), keyed.Dir("/ckpt"), keyed.CheckpointInterval(time.Duration(1+r.IntN(4))*time.Millisecond),
					keyed.BatchSize(1+r.IntN(64)))
				s := keyed.FromSource(j, "events", 1+r.IntN(3), connector.Source[event](src)).Watermarks(time.Duration(disorder) * time.Millisecond)
				k := keyed.ByPartition(s)
				if keyBy {
					k = keyed.KeyBy("uuid", func(e event) []byte { return []byte(e.UUID) }, s)
				}
				keyed.ToSink(countWindows(k, 1+r.IntN(3), w, apply, nil), "results", connector.Sink[windowCount](sink))
				return j
			})
			require.Zero(t, late, "records late although within the watermarks' lateness")
			got := map[string]countSum{}
			for _, res := range sink.Committed() {
				k := fmt.Sprintf("%s/%d", res.Key, res.Start)
				_, dup := got[k]
				require.False(t, dup, "window %s fired twice", k)
				got[k] = countSum{N: res.Count, Sum: res.Sum}
			}
			require.Equal(t, model, got)
		})
	}
}

// windowSeeds is how many seeds the window model tests run: KORD_WINDOW_SEEDS
// (the long mode: KORD_WINDOW_SEEDS=5000), else 300 (scripts/test.sh runs
// them so, without the race detector), else under the race detector
// underRace, a fifth of that with -short.
func windowSeeds(underRace int) int {
	if n, err := strconv.Atoi(os.Getenv("KORD_WINDOW_SEEDS")); err == nil && n > 0 {
		return n
	}
	n := 300
	if raceEnabled {
		n = underRace
	}
	if testing.Short() {
		n /= 5
	}
	return n
}

type timedSeq struct{ ts, seq int64 }

// sessionModel is the model's sessions, written apart from keyed's: a
// key's times in order, split where two are more than gap apart.
func sessionModel(times map[string][]timedSeq, gap int64) map[string]countSum {
	out := map[string]countSum{}
	for u, ts := range times {
		ts = slices.Clone(ts)
		slices.SortFunc(ts, func(a, b timedSeq) int { return cmp.Compare(a.ts, b.ts) })
		start := ts[0].ts
		var acc countSum
		for i, x := range ts {
			if i > 0 && x.ts-ts[i-1].ts > gap {
				out[fmt.Sprintf("%s/%d", u, start)] = acc
				start, acc = x.ts, countSum{}
			}
			acc = countSum{N: acc.N + 1, Sum: acc.Sum + x.seq}
		}
		out[fmt.Sprintf("%s/%d", u, start)] = acc
	}
	return out
}

// windowStarts is the model's window assignment, written apart from
// keyed's: every multiple s of slide with s <= ts < s + size.
func windowStarts(size, slide, ts int64) []int64 {
	var out []int64
	first := (ts - size + 1) / slide * slide
	for first < ts-size+1 {
		first += slide
	}
	for s := first; s <= ts; s += slide {
		out = append(out, s)
	}
	return out
}

// TestWindowLateness: one key, one partition, one-second tumbling windows
// with 500 ms allowed lateness. A record behind the watermark but within
// the lateness updates its window, which fires again with the new count; a
// record whose window is gone is late: counted, and sent on by the late
// function as side output. Nothing is dropped silently.
func TestWindowLateness(t *testing.T) {
	src := keyed.NewMemorySource[event]("events", 1, false)
	sink := keyed.NewMemorySink[windowCount]()
	j := keyed.NewJob("late", keyed.FS(vfs.NewMem()), keyed.Dir("/ckpt"), keyed.CheckpointInterval(5*time.Millisecond))
	s := keyed.FromSource(j, "events", 1, connector.Source[event](src)).Watermarks(0)
	w := keyed.Tumbling(time.Second).AllowedLateness(500 * time.Millisecond)
	out := keyed.WindowAggregate(keyed.ByPartition(s), "windows", 1, w, serde.Serde[countSum](countSumCodec{}), countSumAgg,
		func(key []byte, win keyed.Window, a countSum) windowCount { return windowResult(key, win, a) },
		func(key []byte, e event) (windowCount, bool) {
			return windowCount{Key: string(key), Start: -1, Sum: e.Seq, Late: true}, true
		})
	keyed.ToSink(out, "results", connector.Sink[windowCount](sink))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- j.Run(ctx) }()
	var mu sync.Mutex
	seq := int64(0)
	put := func(ms int64) {
		mu.Lock()
		defer mu.Unlock()
		src.AppendAt(0, []byte("k"), event{UUID: "k", Seq: seq}, time.UnixMilli(ms))
		seq++
	}
	committed := func(n int) {
		require.Eventually(t, func() bool { return len(sink.Committed()) >= n }, 10*time.Second, 5*time.Millisecond)
	}
	put(100)  // window [0, 1000)
	put(900)  // window [0, 1000)
	put(1200) // window [1000, 2000): the watermark 1199 fires [0, 1000)
	committed(1)
	put(950)  // behind the watermark, within the lateness: [0, 1000) fires again, with 3
	put(1600) // the watermark 1599: [0, 1000) gone (999 + 500 <= 1599)
	committed(2)
	put(400) // late: its only window is gone
	committed(3)
	put(2500) // fires [1000, 2000) with 2
	committed(4)
	cancel()
	require.NoError(t, <-done)
	got := sink.Committed()
	require.Equal(t, []windowCount{
		{Key: "k", Start: 0, Count: 2, Sum: 0 + 1},
		{Key: "k", Start: 0, Count: 3, Sum: 0 + 1 + 3},
		{Key: "k", Start: -1, Sum: 5, Late: true},
		{Key: "k", Start: 1000, Count: 2, Sum: 2 + 4},
	}, got[:4])
	require.Equal(t, int64(1), j.LateRecords())
}

// TestSessionLateness: one key, sessions with a 100 ms gap and 150 ms
// allowed lateness. Sessions merge when a record bridges them; a session
// merged after it fired, within its lateness, fires again; a merge keeps
// the timers other sessions still need (here the merged session's old
// firing time is another session's cleanup time); a record whose session
// would be gone is late, counted and sent on.
func TestSessionLateness(t *testing.T) {
	src := keyed.NewMemorySource[event]("events", 1, false)
	sink := keyed.NewMemorySink[windowCount]()
	j := keyed.NewJob("sessions", keyed.FS(vfs.NewMem()), keyed.Dir("/ckpt"), keyed.CheckpointInterval(5*time.Millisecond))
	s := keyed.FromSource(j, "events", 1, connector.Source[event](src)).Watermarks(0)
	w := keyed.Session(100 * time.Millisecond).AllowedLateness(150 * time.Millisecond)
	out := keyed.WindowAggregate(keyed.ByPartition(s), "sessions", 1, w, serde.Serde[countSum](countSumCodec{}), countSumAgg,
		func(key []byte, win keyed.Window, a countSum) windowCount { return windowResult(key, win, a) },
		func(key []byte, e event) (windowCount, bool) {
			return windowCount{Key: string(key), Start: -1, Sum: e.Seq, Late: true}, true
		})
	keyed.ToSink(out, "results", connector.Sink[windowCount](sink))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- j.Run(ctx) }()
	seq := int64(0)
	put := func(ms int64) {
		src.AppendAt(0, []byte("k"), event{UUID: "k", Seq: seq}, time.UnixMilli(ms))
		seq++
	}
	committed := func(n int) {
		require.Eventually(t, func() bool { return len(sink.Committed()) >= n }, 10*time.Second, 5*time.Millisecond)
	}
	put(0)   // B [0, 100): fires at 99, gone at 249
	put(150) // A [150, 250); the watermark 149 fires B
	committed(1)
	put(160) // A becomes [150, 260): its old firing time 249 is B's cleanup, still needed
	put(301) // C [301, 401); the watermark 300 fires A and removes B
	committed(2)
	put(100) // [100, 200) merges with A (fired, kept until 409): fires again; B is gone
	committed(3)
	put(700) // the watermark 699 fires C and removes A
	committed(4)
	put(200) // [200, 300) would be gone at 449: late
	committed(5)
	cancel()
	require.NoError(t, <-done)
	require.Equal(t, []windowCount{
		{Key: "k", Start: 0, Count: 1, Sum: 0},
		{Key: "k", Start: 150, Count: 2, Sum: 1 + 2},
		{Key: "k", Start: 100, Count: 3, Sum: 1 + 2 + 4},
		{Key: "k", Start: 301, Count: 1, Sum: 3},
		{Key: "k", Start: -1, Sum: 6, Late: true},
	}, sink.Committed()[:5])
	require.Equal(t, int64(1), j.LateRecords())
}

// TestWindowsLateModel: tumbling windows, aggregated or applied, with an
// allowed lateness of 0 to 2 windows, over seeded input of which about 3 %
// is stamped far behind its partition's clock, idleness declared on the
// stream and, for a third of the seeds, a partition with no records (idle),
// with crashes and restores at other parallelisms. Whether a
// far-behind record is late depends on how far the other partitions had
// been read when it came (the watermark is their minimum), so the model
// takes the late records from the committed side output; with that, it is
// exact: every record is counted in its window or reported late, exactly
// once; each window's last firing equals the model's count and sum over the
// records not reported late; firings of a window only grow; and no record
// within the watermarks' bound is ever late.
func TestWindowsLateModel(t *testing.T) {
	seeds := windowSeeds(30)
	for seed := uint64(1); seed <= uint64(seeds); seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 23))
			size := int64(40 + r.IntN(120))
			lateness := size * int64(r.IntN(3))
			w := keyed.Tumbling(time.Duration(size) * time.Millisecond).AllowedLateness(time.Duration(lateness) * time.Millisecond)
			const parts = 4
			disorder := int64(1 + r.IntN(20))
			src := keyed.NewMemorySource[event]("events", parts, true)
			type rec struct {
				key   string
				start int64
				seq   int64
				far   bool
			}
			var recs []rec
			seq := map[string]int64{}
			clock := make([]int64, parts)
			// A third of the seeds leave partition 3 empty: it holds the
			// watermark back until the source declares it idle.
			emptyP := int32(-1)
			if r.IntN(3) == 0 {
				emptyP = 3
			}
			n := 2_000 + r.IntN(3_000)
			for i := 0; i < n; i++ {
				u := fmt.Sprintf("user-%02d", r.IntN(20))
				p := partitioner.KeyPartition([]byte(u), parts)
				if p == emptyP {
					continue
				}
				clock[p] += int64(r.IntN(5))
				ts := 1_700_000_000_000 + clock[p] - int64(r.IntN(int(disorder)))
				far := r.IntN(100) < 3
				if far {
					ts -= disorder + size*int64(2+r.IntN(6))
				}
				e := event{UUID: u, Seq: seq[u]}
				src.AppendAt(p, []byte(u), e, time.UnixMilli(ts))
				seq[u]++
				recs = append(recs, rec{key: u, start: windowStarts(size, size, ts)[0], seq: e.Seq, far: far})
			}
			mem := vfs.NewMem()
			sink := keyed.NewMemorySink[windowCount]()
			apply := r.IntN(2) == 0
			idle := time.Duration(1+r.IntN(20)) * time.Millisecond
			t.Logf("window %d ms, lateness %d ms, disorder %d ms, apply %v, idleness %v, %d records, empty partition %d", size, lateness, disorder, apply, idle, len(recs), emptyP)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			lateSide := func(key []byte, e event) (windowCount, bool) {
				return windowCount{Key: string(key), Start: -1, Sum: e.Seq, Late: true}, true
			}
			for incarnation := 0; ; incarnation++ {
				require.Less(t, incarnation, 10)
				j := keyed.NewJob("late", keyed.FS(mem), keyed.Dir("/ckpt"), keyed.CheckpointInterval(time.Duration(1+r.IntN(4))*time.Millisecond),
					keyed.BatchSize(1+r.IntN(64)))
				s := keyed.FromSource(j, "events", 1+r.IntN(3), connector.Source[event](src)).Watermarks(time.Duration(disorder) * time.Millisecond).Idleness(idle)
				k := keyed.KeyBy("uuid", func(e event) []byte { return []byte(e.UUID) }, s)
				keyed.ToSink(countWindows(k, 1+r.IntN(3), w, apply, lateSide), "results", connector.Sink[windowCount](sink))
				rctx := ctx
				if incarnation < 3 {
					rctx = failpoint.WithHook(ctx, crashAt(crashPoints[r.IntN(len(crashPoints))], 1+r.IntN(4)))
				}
				err := j.Run(rctx)
				if errors.Is(err, failpoint.ErrCrashed) {
					mem = mem.CrashClone()
					continue
				}
				require.NoError(t, err)
				break
			}
			late := map[string]bool{}
			last := map[string]countSum{}
			for _, res := range sink.Committed() {
				if res.Late {
					k := fmt.Sprintf("%s#%d", res.Key, res.Sum)
					require.False(t, late[k], "record %s reported late twice", k)
					late[k] = true
					continue
				}
				k := fmt.Sprintf("%s/%d", res.Key, res.Start)
				if prev, ok := last[k]; ok {
					require.Greater(t, res.Count, prev.N, "window %s fired again without a new record", k)
				}
				last[k] = countSum{N: res.Count, Sum: res.Sum}
			}
			model := map[string]countSum{}
			nLate, nFar := 0, 0
			for _, x := range recs {
				if x.far {
					nFar++
				}
				if late[fmt.Sprintf("%s#%d", x.key, x.seq)] {
					require.True(t, x.far, "record %s#%d within the watermarks' bound reported late", x.key, x.seq)
					nLate++
					continue
				}
				k := fmt.Sprintf("%s/%d", x.key, x.start)
				m := model[k]
				model[k] = countSum{N: m.N + 1, Sum: m.Sum + x.seq}
			}
			require.Len(t, late, nLate, "late records that are not in the input")
			require.Equal(t, model, last)
			t.Logf("%d records far behind, %d of them late", nFar, nLate)
		})
	}
}
