//go:build kordfailpoints

package keyed_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kordproject/kord/checkpoint"
	"github.com/kordproject/kord/internal/failpoint"
	"github.com/kordproject/kord/keyed"
	"github.com/kordproject/kord/keyed/connector"
	"github.com/kordproject/kord/partitioner"
	"github.com/kordproject/kord/vfs"
)

// wmSeen is what watcher instances note: per record, its time and the
// watermark when it was processed.
type wmSeen struct {
	mu        sync.Mutex
	records   int
	late      []string // records older than the watermark they met
	tooEarly  []string // in-order input: watermarks past time - lateness
	backwards []string
	maxWm     time.Time
	// firstWm, when set, collects the watermark each operator instance
	// met at its first record (firstMet).
	firstWm  map[int]time.Time
	firstMet []time.Time
}

// watcher is the counter, checking each record against its task's
// watermark.
type watcher struct {
	counter
	seen     *wmSeen
	lateness time.Duration
	inOrder  bool
	last     time.Time
	started  bool
}

func (w *watcher) Process(key []byte, e event, out *keyed.Collector[result]) error {
	ts, wm := out.Timestamp(), out.Watermark()
	w.seen.mu.Lock()
	w.seen.records++
	id := fmt.Sprintf("%s/%d at %v, watermark %v", e.UUID, e.Seq, ts.UnixMilli(), wm.UnixMilli())
	if wm.Before(w.last) {
		w.seen.backwards = append(w.seen.backwards, id)
	}
	if !wm.IsZero() && ts.Before(wm) {
		w.seen.late = append(w.seen.late, id)
	}
	if w.inOrder && !wm.IsZero() && wm.After(ts.Add(-w.lateness)) {
		w.seen.tooEarly = append(w.seen.tooEarly, id)
	}
	if wm.After(w.seen.maxWm) {
		w.seen.maxWm = wm
	}
	if w.seen.firstWm != nil && !w.started {
		w.seen.firstMet = append(w.seen.firstMet, wm)
	}
	w.started = true
	w.seen.mu.Unlock()
	w.last = wm
	return w.counter.Process(key, e, out)
}

// TestWatermarks: sources make per-partition watermarks with bounded
// out-of-orderness, and operator tasks see the minimum over their inputs.
// With each partition's times in order, no record ever meets a watermark
// past its time less the lateness (a watermark that overtook a record
// would); with times out of order by less than the lateness, no record is
// late. Watermarks never go backwards, and they advance.
func TestWatermarks(t *testing.T) {
	const lateness = 40 * time.Millisecond
	for _, keyBy := range []bool{false, true} {
		for _, inOrder := range []bool{true, false} {
			t.Run(fmt.Sprintf("keyBy=%v inOrder=%v", keyBy, inOrder), func(t *testing.T) {
				const parts, n = 4, 20_000
				r := rand.New(rand.NewPCG(3, 4))
				src := keyed.NewMemorySource[event]("events", parts, true)
				seq := map[string]int64{}
				clock := make([]int64, parts)
				for i := 0; i < n; i++ {
					u := fmt.Sprintf("user-%03d", r.IntN(100))
					p := partitioner.KeyPartition([]byte(u), parts)
					clock[p] += 1 + int64(r.IntN(3))
					ms := clock[p]
					if !inOrder {
						ms -= int64(r.IntN(int(lateness.Milliseconds()))) // out of order, within the lateness
					}
					src.AppendAt(p, []byte(u), event{UUID: u, Seq: seq[u]}, time.UnixMilli(1_700_000_000_000+ms))
					seq[u]++
				}
				seen := &wmSeen{}
				j := keyed.NewJob("wm", keyed.FS(vfs.NewMem()), keyed.Dir("/ckpt"), keyed.CheckpointInterval(5*time.Millisecond), keyed.BatchSize(64))
				s := keyed.FromSource(j, "events", 2, connector.Source[event](src)).Watermarks(lateness)
				k := keyed.ByPartition(s)
				if keyBy {
					k = keyed.KeyBy("uuid", func(e event) []byte { return []byte(e.UUID) }, s)
				}
				sink := keyed.NewMemorySink[result]()
				out := keyed.Process(k, "count", 3, func() keyed.Operator[event, result] {
					return &watcher{seen: seen, lateness: lateness, inOrder: inOrder}
				})
				keyed.ToSink(out, "results", connector.Sink[result](sink))
				require.NoError(t, j.Run(context.Background()))
				checkOutput(t, sink.Committed(), seq)
				require.Equal(t, n, seen.records)
				require.Empty(t, first(seen.backwards), "watermarks went backwards (%d)", len(seen.backwards))
				require.Empty(t, first(seen.late), "records older than the watermark they met (%d)", len(seen.late))
				require.Empty(t, first(seen.tooEarly), "watermarks past a record's time less the lateness: one overtook the record (%d)", len(seen.tooEarly))
				oldestNewest := slicesMin(clock)
				t.Logf("highest watermark met: %d ms (partitions' newest times %v)", seen.maxWm.UnixMilli()-1_700_000_000_000, clock)
				require.Greater(t, seen.maxWm.UnixMilli()-1_700_000_000_000, oldestNewest/2, "watermarks advance with the input")
			})
		}
	}
}

// first is the first five of xs: enough to read in a failure.
func first(xs []string) []string { return xs[:min(len(xs), 5)] }

func slicesMin(xs []int64) int64 {
	m := xs[0]
	for _, x := range xs {
		m = min(m, x)
	}
	return m
}

// TestNoWatermarks: a source without Watermarks sends none.
func TestNoWatermarks(t *testing.T) {
	src, want := stampedInput(2, 20, 2_000)
	seen := &wmSeen{}
	j := keyed.NewJob("wm", keyed.FS(vfs.NewMem()), keyed.Dir("/ckpt"))
	s := keyed.FromSource(j, "events", 2, connector.Source[event](src))
	sink := keyed.NewMemorySink[result]()
	out := keyed.Process(keyed.ByPartition(s), "count", 2, func() keyed.Operator[event, result] { return &watcher{seen: seen} })
	keyed.ToSink(out, "results", connector.Sink[result](sink))
	require.NoError(t, j.Run(context.Background()))
	checkOutput(t, sink.Committed(), want)
	require.True(t, seen.maxWm.IsZero(), "a watermark without Watermarks: %v", seen.maxWm)
}

// blockingSource is a memory source whose reader says partition 2 has
// records waiting (connector.BacklogReader), as a read_committed reader behind
// an open transaction does.
type blockingSource struct {
	*keyed.MemorySource[event]
	asked *atomic.Int64
}

func (s blockingSource) Reader(ctx context.Context) (connector.Reader[event], error) {
	r, err := s.MemorySource.Reader(ctx)
	return blockingReader{Reader: r, asked: s.asked}, err
}

type blockingReader struct {
	connector.Reader[event]
	asked *atomic.Int64
}

func (r blockingReader) Behind(_ context.Context, p int32) (bool, error) {
	r.asked.Add(1)
	return p == 2, nil
}

// TestIdleness: partition 2 of three never has a record. It holds the
// watermark back, until Idleness lets a silent partition go; unless its
// reader says it is blocked (records behind an open transaction), when it
// holds the watermark however long it is silent.
func TestIdleness(t *testing.T) {
	for _, c := range []struct {
		name           string
		idleness       bool
		blocked        bool
		wantWatermarks bool
	}{{"no idleness", false, false, false}, {"idleness", true, false, true}, {"idleness, blocked", true, true, false}} {
		for _, srcP := range []int{1, 2} { // 2: the silent partition is a task's only one, and the whole task is idle
			t.Run(fmt.Sprintf("%s, %d source tasks", c.name, srcP), func(t *testing.T) {
				src := keyed.NewMemorySource[event]("events", 3, false)
				asked := &atomic.Int64{}
				var source connector.Source[event] = src
				if c.blocked {
					source = blockingSource{MemorySource: src, asked: asked}
				}
				seen := &wmSeen{}
				j := keyed.NewJob("idle", keyed.FS(vfs.NewMem()), keyed.Dir("/ckpt"), keyed.CheckpointInterval(10*time.Millisecond))
				s := keyed.FromSource(j, "events", srcP, source).Watermarks(10 * time.Millisecond)
				if c.idleness {
					s = s.Idleness(50 * time.Millisecond)
				}
				out := keyed.Process(keyed.ByPartition(s), "count", 1, func() keyed.Operator[event, result] { return &watcher{seen: seen} })
				keyed.ToSink(out, "results", connector.Sink[result](keyed.NewMemorySink[result]()))
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan error, 1)
				go func() { done <- j.Run(ctx) }()
				// Records on partitions 0 and 1 only, for 600 ms.
				seq := map[string]int64{}
				start := time.Now()
				for i := 0; time.Since(start) < 600*time.Millisecond; i++ {
					u := []string{"a", "b", "c", "d"}[i%4]
					p := int32(i % 2)
					src.AppendAt(p, []byte(u), event{UUID: u, Seq: seq[u]}, time.UnixMilli(1_700_000_000_000+int64(i)))
					seq[u]++
					time.Sleep(time.Millisecond)
				}
				time.Sleep(100 * time.Millisecond)
				cancel()
				require.NoError(t, <-done)
				seen.mu.Lock()
				defer seen.mu.Unlock()
				t.Logf("records %d, highest watermark %v, blocked asked %d times", seen.records, seen.maxWm, asked.Load())
				require.Positive(t, seen.records)
				require.Equal(t, c.wantWatermarks, !seen.maxWm.IsZero(), "watermark %v", seen.maxWm)
				if c.blocked {
					require.Positive(t, asked.Load(), "the reader was asked whether the silent partition is blocked")
				}
			})
		}
	}
}

// TestWatermarkAcrossRestore: the checkpoint keeps the job's watermark
// (the oldest of its operator tasks'), and a restore starts every
// operator task from it: after a crash, the first records already meet a
// watermark at least the checkpoint's, never an older one (or none). On
// in-order input none meets one past its time less the lateness, before
// the crash or after.
func TestWatermarkAcrossRestore(t *testing.T) {
	const lateness = 20 * time.Millisecond
	const parts, n = 4, 20_000
	src := keyed.NewMemorySource[event]("events", parts, true)
	seq := map[string]int64{}
	clock := make([]int64, parts)
	for i := 0; i < n; i++ {
		u := fmt.Sprintf("user-%03d", i%97)
		p := partitioner.KeyPartition([]byte(u), parts)
		clock[p] += 2
		src.AppendAt(p, []byte(u), event{UUID: u, Seq: seq[u]}, time.UnixMilli(1_700_000_000_000+clock[p]))
		seq[u]++
	}
	mem := vfs.NewMem()
	sink := keyed.NewMemorySink[result]()
	build := func(seen *wmSeen) *keyed.Job {
		j := keyed.NewJob("wm", keyed.FS(mem), keyed.Dir("/ckpt"), keyed.CheckpointInterval(2*time.Millisecond), keyed.BatchSize(32))
		s := keyed.FromSource(j, "events", 2, connector.Source[event](src)).Watermarks(lateness)
		out := keyed.Process(keyed.KeyBy("uuid", func(e event) []byte { return []byte(e.UUID) }, s), "count", 3, func() keyed.Operator[event, result] {
			return &watcher{seen: seen, lateness: lateness, inOrder: true}
		})
		keyed.ToSink(out, "results", connector.Sink[result](sink))
		return j
	}
	before := &wmSeen{}
	// The crash comes after the first commit that brought a quarter of the
	// output or more: never so early that a partition has had no record
	// (then the checkpoint keeps no watermark), never after the end (a
	// fixed count of commits was, without the race detector, which runs
	// the 20,000 events in a few milliseconds).
	crashed := false
	err := build(before).Run(failpoint.WithHook(context.Background(), func(p string) error {
		if p == failpoint.AfterMarker && !crashed && len(sink.Committed()) >= n/4 {
			crashed = true
			return errors.New("crash after a quarter of the output")
		}
		return nil
	}))
	require.ErrorIs(t, err, failpoint.ErrCrashed)
	mem = mem.CrashClone()
	st, err := checkpoint.OpenStore(mem, "/ckpt")
	require.NoError(t, err)
	ref, ok, err := checkpoint.ReadCommitted(t.Context(), st)
	require.NoError(t, err)
	require.True(t, ok)
	m, _, err := checkpoint.ReadCheckpoint(t.Context(), st, ref.Run, ref.ID)
	require.NoError(t, err)
	require.NoError(t, st.Close())
	require.NotNil(t, m.Watermark, "checkpoint %s keeps no watermark", ref)
	kept := time.UnixMilli(*m.Watermark)

	after := &wmSeen{firstWm: map[int]time.Time{}}
	require.NoError(t, build(after).Run(context.Background()))
	checkOutput(t, sink.Committed(), seq)
	t.Logf("checkpoint %s kept watermark %d ms; after the restore the first records met %v", ref, kept.UnixMilli()-1_700_000_000_000, after.firstMet)
	require.NotEmpty(t, after.firstMet)
	for _, wm := range after.firstMet {
		require.False(t, wm.Before(kept), "a record after the restore met watermark %v, older than the checkpoint's %v", wm, kept)
	}
	require.Empty(t, first(before.tooEarly), "before the crash (%d)", len(before.tooEarly))
	require.Empty(t, first(after.tooEarly), "after the restore: a watermark past a record's time less the lateness (%d)", len(after.tooEarly))
}

// TestMemoryBacklog: MemorySource's reader is a connector.BacklogReader:
// records past its position are a backlog until it delivers them.
func TestMemoryBacklog(t *testing.T) {
	src := keyed.NewMemorySource[event]("events", 2, false)
	src.Append(1, []byte("k"), event{UUID: "k"})
	ctx := context.Background()
	r, err := src.Reader(ctx)
	require.NoError(t, err)
	defer r.Close()
	br, ok := r.(connector.BacklogReader)
	require.True(t, ok)
	require.NoError(t, r.Assign(ctx, []connector.Position{{Partition: 0}, {Partition: 1}}))
	behind := func(p int32) bool {
		b, err := br.Behind(ctx, p)
		require.NoError(t, err)
		return b
	}
	require.False(t, behind(0))
	require.True(t, behind(1))
	recs, _, err := r.Poll(ctx, 10, 0)
	require.NoError(t, err)
	require.Len(t, recs, 1)
	require.False(t, behind(1))
	src.Append(0, []byte("k"), event{UUID: "k"})
	require.True(t, behind(0))
}
