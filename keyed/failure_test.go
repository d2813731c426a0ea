//go:build kordfailpoints

package keyed_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kordproject/kord/checkpoint"
	"github.com/kordproject/kord/internal/failpoint"
	"github.com/kordproject/kord/keyed"
	"github.com/kordproject/kord/keyed/connector"
	"github.com/kordproject/kord/vfs"
	"github.com/kordproject/kord/vfs/errorfs"
)

// faultyCounter is counter with a fault plan: the nth event processed
// (across all tasks) fails with an error or a panic, once.
type faultyCounter struct {
	counter
	plan *opFault
}

type opFault struct {
	at    int64 // fail when processed reaches at; 0 = never
	panic bool
	seen  atomic.Int64
	fired atomic.Bool
}

func (f *faultyCounter) Process(key []byte, e event, out *keyed.Collector[result]) error {
	if f.plan != nil && f.plan.at > 0 && f.plan.seen.Add(1) == f.plan.at && f.plan.fired.CompareAndSwap(false, true) {
		if f.plan.panic {
			panic(fmt.Sprintf("injected panic at event %d", f.plan.at))
		}
		return errors.New("injected operator error")
	}
	return f.counter.Process(key, e, out)
}

// crashAt returns a hook (failpoint.WithHook) that crashes the job at the
// nth hit of point.
func crashAt(point string, nth int) failpoint.Hook {
	var hits atomic.Int64
	return func(p string) error {
		if p == point && hits.Add(1) == int64(nth) {
			return errors.New("injected crash")
		}
		return nil
	}
}

var crashPoints = []string{failpoint.AfterBarrier, failpoint.AfterSnapshots, failpoint.AfterMetadata, failpoint.BeforeCommit,
	failpoint.AfterCommit, failpoint.AfterMarker, failpoint.DuringRestore, failpoint.DuringSnapshotWrite}

func seededRuns() int {
	if s := os.Getenv("KORD_SEEDED_RUNS"); s != "" {
		n, err := strconv.Atoi(s)
		if err == nil {
			return n
		}
	}
	if testing.Short() || raceEnabled {
		return 150
	}
	return 1000
}

// TestSeededFailures runs the keyed counting job over many seeded inputs,
// each with a random schedule of failures: operator errors and panics
// (restarted in process), crashes at every checkpoint step (the process
// dies: the next incarnation gets the crash-consistent file system, with
// unsynced writes lost, and a random new parallelism), commit failures and
// injected storage errors. After recovery each key's committed output must
// be exactly its events in order, with matching counts.
// KORD_SEEDED_RUNS sets the number of runs (long mode: 10000).
func TestSeededFailures(t *testing.T) {
	runs := seededRuns()
	events := 10_000
	if s := os.Getenv("KORD_SEEDED_EVENTS"); s != "" {
		events, _ = strconv.Atoi(s)
	}
	for seed := 0; seed < runs; seed++ {
		seedRun(t, uint64(seed), events)
		if t.Failed() {
			t.Fatalf("seed %d failed", seed)
		}
	}
}

func seedRun(t *testing.T, seed uint64, events int) {
	r := rand.New(rand.NewPCG(seed, 7))
	parts := 1 + r.IntN(8)
	byPartition := r.IntN(2) == 0
	src, want := input(seed, parts, 20+r.IntN(400), events)
	sink := keyed.NewMemorySink[result]()
	mem := vfs.NewMem()
	maxOp := 4
	if byPartition {
		maxOp = min(maxOp, parts)
	}
	plan := &opFault{}
	switch r.IntN(3) {
	case 0:
		plan.at = int64(1 + r.IntN(events))
	case 1:
		plan.at, plan.panic = int64(1+r.IntN(events)), true
	}
	crashes := r.IntN(4)
	var commitFails atomic.Int64
	commitFailAt := int64(0)
	if r.IntN(4) == 0 {
		commitFailAt = int64(1 + r.IntN(5))
	}
	sink.FailCommit = func(checkpoint.Ref) error {
		if commitFails.Add(1) == commitFailAt {
			return errors.New("injected commit failure")
		}
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for incarnation := 0; ; incarnation++ {
		require.Less(t, incarnation, 20, "seed %d: too many incarnations", seed)
		interval := time.Duration(1+r.IntN(10)) * time.Millisecond
		batch, credits := 1+r.IntN(64), 1+r.IntN(4)
		fs := vfs.FS(mem)
		opts := []keyed.Opt{keyed.Dir("/ckpt"), keyed.CheckpointInterval(interval), keyed.RestartStrategy(keyed.FixedDelay(10, 0)),
			keyed.BatchSize(batch), keyed.Credits(credits)}
		if os.Getenv("KORD_DEBUG") != "" {
			opts = append(opts, keyed.Logger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))))
		}
		rctx := ctx
		if crashes > 0 {
			crashes--
			pt, nth := crashPoints[r.IntN(len(crashPoints))], 1+r.IntN(3)
			rctx = failpoint.WithHook(ctx, crashAt(pt, nth))
			t.Logf("incarnation %d: crash at %s #%d", incarnation, pt, nth)
		}
		if r.IntN(8) == 0 {
			var n atomic.Int64
			failAt := int64(1 + r.IntN(40))
			fs = errorfs.New(mem, func(op errorfs.Op, name string) error {
				if op == errorfs.OpSync && n.Add(1) == failAt {
					return errors.New("injected fsync error")
				}
				return nil
			})
		}
		j := keyed.NewJob("users", append(opts, keyed.FS(fs))...)
		srcP := 1 + r.IntN(3)
		t.Logf("incarnation %d: srcP=%d batch=%d credits=%d interval=%v", incarnation, srcP, batch, credits, interval)
		s := keyed.FromSource(j, "events", srcP, connector.Source[event](src))
		var k *keyed.KeyedStream[[]byte, event]
		if byPartition {
			k = keyed.ByPartition(s)
		} else {
			k = keyed.KeyBy("uuid", func(e event) []byte { return []byte(e.UUID) }, s)
		}
		out := keyed.Process(k, "count", 1+r.IntN(maxOp), func() keyed.Operator[event, result] { return &faultyCounter{plan: plan} })
		keyed.ToSink(out, "results", connector.Sink[result](sink))
		err := j.Run(rctx)
		t.Logf("incarnation %d: byPartition=%v parts=%d plan=%+v commitFailAt=%d: %v", incarnation, byPartition, parts, plan.at, commitFailAt, err)
		if errors.Is(err, failpoint.ErrCrashed) {
			mem = mem.CrashClone() // the process died: only what was durable survives
			continue
		}
		require.NoError(t, err, "seed %d incarnation %d", seed, incarnation)
		break
	}
	checkOutput(t, sink.Committed(), want)
}

// TestNoDeadlockTinyCapacities: many tasks, one-record batches, one credit
// per channel, checkpoints every millisecond: alignment blocks inputs all
// the time and the job must still finish.
func TestNoDeadlockTinyCapacities(t *testing.T) {
	src, want := input(3, 8, 500, 20_000)
	sink := keyed.NewMemorySink[result]()
	cfg := []keyed.Opt{keyed.FS(vfs.NewMem()), keyed.Dir("/c"), keyed.CheckpointInterval(time.Millisecond), keyed.BatchSize(1), keyed.Credits(1)}
	j := newJob(t, cfg, src, sink, false, 8, 8)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	require.NoError(t, j.Run(ctx))
	checkOutput(t, sink.Committed(), want)
	require.Greater(t, sink.Commits(), 2)
}

// TestNoGoroutineLeft: after Run returns, none of the job's goroutines is
// left, whether it ended normally, by a crash or by exhausting restarts.
func TestNoGoroutineLeft(t *testing.T) {
	src, _ := input(4, 4, 50, 5_000)
	for _, hook := range []failpoint.Hook{nil, crashAt(failpoint.AfterMetadata, 2)} {
		cfg := []keyed.Opt{keyed.CheckpointInterval(2 * time.Millisecond), keyed.FS(vfs.NewMem()), keyed.Dir("/c")}
		j := newJob(t, cfg, src, keyed.NewMemorySink[result](), false, 2, 3)
		_ = j.Run(failpoint.WithHook(context.Background(), hook))
	}
	j := keyed.NewJob("users", keyed.FS(vfs.NewMem()), keyed.Dir("/c"), keyed.RestartStrategy(keyed.FixedDelay(2, 0)))
	s := keyed.FromSource(j, "events", 2, connector.Source[event](src))
	out := keyed.Process(keyed.KeyBy("uuid", func(e event) []byte { return []byte(e.UUID) }, s), "count", 2, func() keyed.Operator[event, result] {
		return &faultyCounter{plan: &opFault{at: 1}}
	})
	keyed.ToSink(out, "results", connector.Sink[result](keyed.NewMemorySink[result]()))
	require.Error(t, j.Run(context.Background()), "an operator that always fails exhausts the restarts")
	require.Eventually(t, func() bool {
		buf := make([]byte, 1<<20)
		n := runtime.Stack(buf, true)
		return !strings.Contains(string(buf[:n]), "kord/keyed.")
	}, 5*time.Second, 10*time.Millisecond, "goroutines of package keyed left after Run")
}

// TestFinalCheckpointRetried: with TolerableFailures 1, the final
// checkpoint of a bounded run fails its snapshot once; the lifecycle
// triggers a final checkpoint again, the sources answer its barrier, and
// Run ends with everything committed. (The source tasks used to end at the
// first final barrier, and the second final checkpoint then waited
// forever.)
func TestFinalCheckpointRetried(t *testing.T) {
	src, want := input(5, 4, 100, 2_000)
	sink := keyed.NewMemorySink[result]()
	var failed atomic.Int32
	fs := errorfs.New(vfs.NewMem(), func(op errorfs.Op, name string) error {
		if op == errorfs.OpCreate && strings.Contains(name, ".op-count.") && failed.Add(1) == 1 {
			return errorfs.ErrInjected
		}
		return nil
	})
	cfg := []keyed.Opt{keyed.FS(fs), keyed.Dir("/c"), keyed.CheckpointInterval(time.Hour), keyed.TolerableFailures(1)}
	j := newJob(t, cfg, src, sink, false, 2, 2)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(t, j.Run(ctx))
	require.GreaterOrEqual(t, failed.Load(), int32(1), "the final checkpoint's snapshot failed")
	checkOutput(t, sink.Committed(), want)
	require.Equal(t, 2, sink.Commits(), "the fresh start's commit and the second final checkpoint's")
}
