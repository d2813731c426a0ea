//go:build kordfailpoints

package keyed_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kordproject/kord/checkpoint"
	"github.com/kordproject/kord/internal/failpoint"
	"github.com/kordproject/kord/keyed"
	"github.com/kordproject/kord/keyed/connector"
	"github.com/kordproject/kord/partitioner"
	"github.com/kordproject/kord/serde"
	"github.com/kordproject/kord/vfs"
)

// TestProcessFuncAndValue: the small operators get the key as the type the
// stream was keyed by (a string after KeyByString) and, for ProcessValue,
// one state per key that is checkpointed and restored like any other.
func TestProcessFuncAndValue(t *testing.T) {
	// Two runs over a growing input: the second restores the values the
	// first committed and counts on.
	src := keyed.NewMemorySource[event]("events", 4, true)
	seq := map[string]int64{}
	add := func(n int) {
		for i := range n {
			u := fmt.Sprintf("user-%02d", i%20)
			src.Append(partitioner.KeyPartition([]byte(u), 4), []byte(u), event{UUID: u, Seq: seq[u]})
			seq[u]++
		}
	}
	fs := vfs.NewMem()
	sink := keyed.NewMemorySink[result]()
	run := func() error {
		j := keyed.NewJob("users", keyed.FS(fs), keyed.Dir("/c"))
		k := keyed.KeyByString("uuid", func(e event) string { return e.UUID }, keyed.FromSource(j, "events", 2, connector.Source[event](src)))
		out := keyed.ProcessValue(k, "count", 2, serde.Int64(), func(key string, e event, n *keyed.ValueState[int64], out *keyed.Collector[result]) error {
			if key != e.UUID {
				return fmt.Errorf("key %q for an event of %s", key, e.UUID)
			}
			c, _ := n.Get()
			if e.Seq != c {
				return fmt.Errorf("key %s: seq %d after %d", key, e.Seq, c)
			}
			n.Set(c + 1)
			out.Emit(result{UUID: key, Seq: e.Seq, Count: c + 1})
			return nil
		})
		keyed.ToSink(out, "results", connector.Sink[result](sink))
		return j.Run(context.Background())
	}
	add(500)
	require.NoError(t, run())
	add(700)
	require.NoError(t, run())
	checkOutput(t, sink.Committed(), seq)

	src2, want := input(22, 4, 50, 1_000)
	sink = keyed.NewMemorySink[result]()
	j := keyed.NewJob("users", keyed.FS(vfs.NewMem()), keyed.Dir("/c"))
	k := keyed.KeyByString("uuid", func(e event) string { return e.UUID }, keyed.FromSource(j, "events", 1, connector.Source[event](src2)))
	keyed.ToSink(keyed.ProcessFunc(k, "echo", 2, func(key string, e event, out *keyed.Collector[result]) error {
		if key != e.UUID {
			return fmt.Errorf("key %q for an event of %s", key, e.UUID)
		}
		out.Emit(result{UUID: key, Seq: e.Seq, Count: e.Seq + 1})
		return nil
	}), "results", connector.Sink[result](sink))
	require.NoError(t, j.Run(context.Background()))
	checkOutput(t, sink.Committed(), want)
}

// closingSink counts Close calls.
type closingSink struct {
	*keyed.MemorySink[result]
	closed int
}

func (s *closingSink) Close() error { s.closed++; return nil }

// TestRunClosesSink: Run owns what the job was given: a sink that is an
// io.Closer is closed when Run returns, but not after a crash (a dead
// process closes nothing).
func TestRunClosesSink(t *testing.T) {
	src, _ := input(23, 2, 10, 200)
	fs := vfs.NewMem()
	sink := &closingSink{MemorySink: keyed.NewMemorySink[result]()}
	build := func() *keyed.Job {
		j := keyed.NewJob("users", keyed.FS(fs), keyed.Dir("/c"), keyed.CheckpointInterval(time.Millisecond))
		s := keyed.FromSource(j, "events", 1, connector.Source[event](src))
		keyed.ToSink(keyed.Process(keyed.ByPartition(s), "count", 1, func() keyed.Operator[event, result] { return &counter{} }), "results", connector.Sink[result](sink))
		return j
	}
	require.ErrorIs(t, build().Run(failpoint.WithHook(context.Background(), crashAt(failpoint.AfterCommit, 1))), failpoint.ErrCrashed)
	require.Zero(t, sink.closed, "closed after a crash")
	fs = fs.CrashClone()
	require.NoError(t, build().Run(context.Background()))
	require.Equal(t, 1, sink.closed)
}

// TestRenamedOperatorStateRefused: a sink that keeps operator state,
// renamed between two runs, is refused (naming the old name) instead of
// restoring empty, as a renamed keyed state is.
func TestRenamedOperatorStateRefused(t *testing.T) {
	src, _ := input(24, 2, 10, 200)
	fs := vfs.NewMem()
	run := func(sinkName string) error {
		j := keyed.NewJob("users", keyed.FS(fs), keyed.Dir("/c"))
		s := keyed.FromSource(j, "events", 1, connector.Source[event](src))
		sink := &countSink{MemorySink: keyed.NewMemorySink[result]()}
		keyed.ToSink(keyed.Process(keyed.ByPartition(s), "count", 1, func() keyed.Operator[event, result] { return &counter{} }), sinkName, connector.Sink[result](sink))
		return j.Run(context.Background())
	}
	require.NoError(t, run("results"))
	require.NoError(t, run("results"), "same name: restores")
	err := run("output")
	require.ErrorIs(t, err, keyed.ErrPermanent)
	require.ErrorContains(t, err, `operator state of a source or sink named "results"`)
}

// TestForget: Forget makes the next Run start over as a job that never
// ran. Deleting the checkpoint directory alone is not enough: the sink's
// record then names a checkpoint that is gone, and the job stops.
func TestForget(t *testing.T) {
	src, want := input(25, 2, 10, 300)
	dir := t.TempDir()
	sink := keyed.NewMemorySink[result]()
	build := func() *keyed.Job { return newJob(t, []keyed.Opt{keyed.Dir(dir)}, src, sink, false, 1, 1) }
	require.NoError(t, build().Run(context.Background()))
	checkOutput(t, sink.Committed(), want)

	// The directory lost: the job refuses to guess.
	lost := newJob(t, []keyed.Opt{keyed.Dir(filepath.Join(t.TempDir(), "elsewhere"))}, src, sink, false, 1, 1)
	err := lost.Run(context.Background())
	require.ErrorIs(t, err, checkpoint.ErrCommittedMissing)
	require.Contains(t, err.Error(), "restore the newest older checkpoint and accept that the output after it is written again (keyed.AcceptDuplicates), or start over")

	require.NoError(t, build().Forget(context.Background()))
	before := len(sink.Committed())
	require.NoError(t, build().Run(context.Background()))
	checkOutput(t, sink.Committed()[before:], want)

	// A sink that cannot forget is refused.
	j := keyed.NewJob("users", keyed.Dir(t.TempDir()))
	s := keyed.FromSource(j, "events", 1, connector.Source[event](src))
	keyed.ToSink(keyed.Process(keyed.ByPartition(s), "count", 1, func() keyed.Operator[event, result] { return &counter{} }), "results", struct{ connector.Sink[result] }{keyed.NewMemorySink[result]()})
	require.ErrorContains(t, j.Forget(context.Background()), "cannot forget")
}

// TestDefaultDir: the default checkpoint directory is stable and
// documented: KORD_STATE_DIR, else XDG_STATE_HOME/kord, else
// ~/.local/state/kord, then the job's name.
func TestDefaultDir(t *testing.T) {
	t.Setenv(keyed.EnvStateDir, "/srv/kord")
	require.Equal(t, "/srv/kord/users", keyed.DefaultDir("users"))
	t.Setenv(keyed.EnvStateDir, "")
	t.Setenv("XDG_STATE_HOME", "/x/state")
	require.Equal(t, "/x/state/kord/users", keyed.DefaultDir("users"))
	t.Setenv("XDG_STATE_HOME", "")
	t.Setenv("HOME", "/home/u")
	require.Equal(t, "/home/u/.local/state/kord/users", keyed.DefaultDir("users"))
}

// stuckSink stops answering after a few writes: Write blocks until its
// context ends (a sink whose system hangs).
type stuckSink struct {
	*keyed.MemorySink[result]
	writes int
}

func (s *stuckSink) Write(ctx context.Context, epoch uint64, v result) error {
	if s.writes++; s.writes > 50 {
		<-ctx.Done()
		return context.Cause(ctx)
	}
	return s.MemorySink.Write(ctx, epoch, v)
}

// TestStuckSinkFailsRun: a sink that stops answering backs the operator
// and then the source task up, so the source takes no more triggers. The
// coordinator must go on timing out checkpoints (it never waits on a
// task), and the run must fail once more fail than are tolerable, instead
// of hanging silently.
func TestStuckSinkFailsRun(t *testing.T) {
	src, _ := input(25, 2, 100, 20_000)
	sink := &stuckSink{MemorySink: keyed.NewMemorySink[result]()}
	j := keyed.NewJob("users", keyed.FS(vfs.NewMem()), keyed.Dir("/c"), keyed.CheckpointInterval(10*time.Millisecond),
		keyed.CheckpointTimeout(100*time.Millisecond), keyed.TolerableFailures(3), keyed.Credits(4))
	s := keyed.FromSource(j, "events", 1, connector.Source[event](src))
	keyed.ToSink(keyed.Process(keyed.ByPartition(s), "count", 1, func() keyed.Operator[event, result] { return &counter{} }), "results", connector.Sink[result](sink))
	done := make(chan error, 1)
	go func() { done <- j.Run(context.Background()) }()
	select {
	case err := <-done:
		require.Error(t, err)
		require.ErrorContains(t, err, "checkpoint")
	case <-time.After(time.Minute):
		t.Fatal("Run hangs: the coordinator waits on a source task that cannot take its trigger")
	}
}
