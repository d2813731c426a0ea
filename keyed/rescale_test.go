//go:build kordfailpoints

package keyed_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kordproject/kord/internal/failpoint"
	"github.com/kordproject/kord/internal/layout"
	"github.com/kordproject/kord/internal/rig/testjob"
	"github.com/kordproject/kord/keyed"
	"github.com/kordproject/kord/keyed/connector"
	"github.com/kordproject/kord/partitioner"
	"github.com/kordproject/kord/serde"
	"github.com/kordproject/kord/vfs"
)

// runUntil runs j until the sink has n committed results, then stops it
// gracefully (a final checkpoint).
func runUntil(t *testing.T, j *keyed.Job, sink *keyed.MemorySink[result], n int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- j.Run(ctx) }()
	deadline := time.Now().Add(time.Minute)
	for len(sink.Committed()) < n && time.Now().Before(deadline) {
		select {
		case err := <-done:
			t.Fatalf("job ended early: %v", err)
		case <-time.After(2 * time.Millisecond):
		}
	}
	cancel()
	require.NoError(t, <-done)
	require.Equal(t, n, len(sink.Committed()))
}

// TestRescale: the same input processed at parallelism 2, then 3, then 1,
// each restoring the previous run's final checkpoint: every key's results
// are the same as in one run, in both keying modes.
func TestRescale(t *testing.T) {
	for _, byPartition := range []bool{false, true} {
		t.Run(fmt.Sprintf("byPartition=%v", byPartition), func(t *testing.T) {
			const parts = 6
			src := keyed.NewMemorySource[event]("events", parts, false)
			r := rand.New(rand.NewPCG(21, 1))
			uuids := make([]string, 300)
			for i := range uuids {
				uuids[i] = fmt.Sprintf("user-%d-%x", i, r.Uint64())
			}
			want := map[string]int64{}
			sink := keyed.NewMemorySink[result]()
			fs := vfs.NewMem()
			total := 0
			for _, p := range []int{2, 3, 1} {
				for i := 0; i < 10_000; i++ {
					u := uuids[r.IntN(len(uuids))]
					src.Append(partitioner.KeyPartition([]byte(u), parts), []byte(u), event{UUID: u, Seq: want[u]})
					want[u]++
				}
				total += 10_000
				j := newJob(t, []keyed.Opt{keyed.FS(fs), keyed.Dir("/c"), keyed.CheckpointInterval(5 * time.Millisecond)}, src, sink, byPartition, p, p)
				runUntil(t, j, sink, total)
			}
			checkOutput(t, sink.Committed(), want)
		})
	}
}

// TestMaxParallelismChangeRefused: an explicit max parallelism different
// from the checkpoint's is refused with a clear error; 0 adopts it.
func TestMaxParallelismChangeRefused(t *testing.T) {
	src, _ := input(5, 4, 50, 2_000)
	fs := vfs.NewMem()
	sink := keyed.NewMemorySink[result]()
	j := newJob(t, []keyed.Opt{keyed.FS(fs), keyed.Dir("/c"), keyed.MaxParallelism(64)}, src, sink, false, 2, 2)
	require.NoError(t, j.Run(context.Background()))
	j = newJob(t, []keyed.Opt{keyed.FS(fs), keyed.Dir("/c"), keyed.MaxParallelism(32)}, src, sink, false, 2, 2)
	err := j.Run(context.Background())
	require.ErrorContains(t, err, "max parallelism 32 set, but checkpoint")
	require.ErrorContains(t, err, "has 64")
	j = newJob(t, []keyed.Opt{keyed.FS(fs), keyed.Dir("/c")}, src, sink, false, 2, 3)
	require.NoError(t, j.Run(context.Background()))
}

// TestOperatorStateMismatchRefused: restoring a checkpoint into an operator
// whose state has another codec (schema) is refused, naming the state.
func TestOperatorStateMismatchRefused(t *testing.T) {
	src, _ := input(6, 2, 20, 500)
	fs := vfs.NewMem()
	sink := keyed.NewMemorySink[result]()
	require.NoError(t, newJob(t, []keyed.Opt{keyed.FS(fs), keyed.Dir("/c")}, src, sink, false, 1, 1).Run(context.Background()))

	j := keyed.NewJob("users", keyed.FS(fs), keyed.Dir("/c"))
	s := keyed.FromSource(j, "events", 1, connector.Source[event](src))
	out := keyed.Process(keyed.KeyBy("uuid", func(e event) []byte { return []byte(e.UUID) }, s), "count", 1, func() keyed.Operator[event, result] { return &stringCounter{} })
	keyed.ToSink(out, "results", connector.Sink[result](sink))
	err := j.Run(context.Background())
	require.Error(t, err)
	require.Contains(t, err.Error(), "count")
}

type stringCounter struct{ s *keyed.ValueState[string] }

func (c *stringCounter) Open(b *keyed.Backend) (err error) {
	c.s, err = keyed.Value(b, "count", serde.String())
	return err
}
func (c *stringCounter) Process([]byte, event, *keyed.Collector[result]) error { return nil }

// tolerantCounter accepts the duplicates at-least-once mode replays.
type tolerantCounter = testjob.TolerantCounter

// TestAtLeastOnce: with crashes at random checkpoint steps, at-least-once
// mode loses nothing (duplicates allowed), and when the committed
// checkpoint is corrupt it falls back to an older durable one.
func TestAtLeastOnce(t *testing.T) {
	for seed := uint64(0); seed < 40; seed++ {
		r := rand.New(rand.NewPCG(seed, 3))
		src, want := input(seed, 4, 100, 5_000)
		sink := keyed.NewMemorySink[result]()
		mem := vfs.NewMem()
		for inc := 0; ; inc++ {
			require.Less(t, inc, 10)
			cfg := []keyed.Opt{keyed.FS(mem), keyed.Dir("/c"), keyed.AtLeastOnce(), keyed.CheckpointInterval(2 * time.Millisecond), keyed.RestartStrategy(keyed.FixedDelay(3, 0))}
			ctx := context.Background()
			if inc < 2 {
				ctx = failpoint.WithHook(ctx, crashAt(crashPoints[r.IntN(len(crashPoints))], 1+r.IntN(3)))
			}
			j := keyed.NewJob("users", cfg...)
			s := keyed.FromSource(j, "events", 2, connector.Source[event](src))
			// Incarnations alternate KeyBy and KeyByString: both must put
			// every key in the same key group, or a restore loses counts.
			newOp := func() keyed.Operator[event, result] { return &tolerantCounter{} }
			var out *keyed.Stream[result]
			if inc%2 == 0 {
				out = keyed.Process(keyed.KeyBy("uuid", func(e event) []byte { return []byte(e.UUID) }, s), "count", 1+r.IntN(3), newOp)
			} else {
				out = keyed.Process(keyed.KeyByString("uuid", func(e event) string { return e.UUID }, s), "count", 1+r.IntN(3), newOp)
			}
			keyed.ToSink(out, "results", connector.Sink[result](sink))
			err := j.Run(ctx)
			if errors.Is(err, failpoint.ErrCrashed) {
				mem = mem.CrashClone()
				continue
			}
			require.NoError(t, err, "seed %d", seed)
			break
		}
		requireAllSeen(t, sink.Committed(), want)
	}

	// Fallback: corrupt the committed checkpoint's metadata.
	src, want := input(9, 4, 100, 5_000)
	sink := keyed.NewMemorySink[result]()
	dir := t.TempDir()
	j := keyed.NewJob("users", keyed.Dir(dir), keyed.AtLeastOnce(), keyed.CheckpointInterval(time.Millisecond))
	s := keyed.FromSource(j, "events", 1, connector.Source[event](src))
	keyed.ToSink(keyed.Process(keyed.KeyBy("uuid", func(e event) []byte { return []byte(e.UUID) }, s), "count", 2, func() keyed.Operator[event, result] { return &tolerantCounter{} }), "results", connector.Sink[result](sink))
	require.NoError(t, j.Run(context.Background()))
	rec, err := sink.Recorded(context.Background())
	require.NoError(t, err)
	meta := fmt.Sprintf("%s/%s", dir, layout.MetaName(rec.Ref.Run, rec.Ref.ID))
	b, err := os.ReadFile(meta)
	require.NoError(t, err)
	b[len(b)/2] ^= 0xff
	require.NoError(t, os.WriteFile(meta, b, 0o644))
	require.NoError(t, j.Run(context.Background()), "at-least-once falls back to an older durable checkpoint")
	requireAllSeen(t, sink.Committed(), want)
}

func requireAllSeen(t *testing.T, out []result, want map[string]int64) {
	t.Helper()
	seen := map[string]map[int64]bool{}
	for _, r := range out {
		if seen[r.UUID] == nil {
			seen[r.UUID] = map[int64]bool{}
		}
		seen[r.UUID][r.Seq] = true
	}
	for k, n := range want {
		for s := int64(0); s < n; s++ {
			require.True(t, seen[k][s], "key %s seq %d lost", k, s)
		}
	}
}

// TestKeyingModeChangeRefused: a checkpoint taken in partition mode is not
// restored in keyBy mode (key groups mean different things).
func TestKeyingModeChangeRefused(t *testing.T) {
	src, _ := input(8, 4, 50, 2_000)
	fs := vfs.NewMem()
	sink := keyed.NewMemorySink[result]()
	require.NoError(t, newJob(t, []keyed.Opt{keyed.FS(fs), keyed.Dir("/c")}, src, sink, true, 2, 2).Run(context.Background()))
	err := newJob(t, []keyed.Opt{keyed.FS(fs), keyed.Dir("/c")}, src, sink, false, 2, 2).Run(context.Background())
	require.ErrorContains(t, err, "keyed.partition mode, the job now runs in keyed.keyby mode")
}
