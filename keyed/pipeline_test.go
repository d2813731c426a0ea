package keyed_test

import (
	"errors"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kordproject/kord/keyed"
	"github.com/kordproject/kord/keyed/connector"
	"github.com/kordproject/kord/serde"
	"github.com/kordproject/kord/vfs"
)

// tally is a second stage's answer: the n-th record of its bucket (n from
// 1), naming the user event it came from and the user's count stage one
// gave it.
type tally struct {
	Bucket string
	UUID   string
	Seq    int64
	Count  int64 // stage one's
	N      int64 // stage two's, per bucket
	Path   string
}

// bucketOf is a user's bucket: the first hex digit of the uuid.
func bucketOf(uuid string) string { return uuid[:1] }

// tallyStage counts per bucket (stage two).
func tallyStage(path string) func(key string, r result, n *keyed.ValueState[int64], out *keyed.Collector[tally]) error {
	return func(key string, r result, n *keyed.ValueState[int64], out *keyed.Collector[tally]) error {
		c, _ := n.Get()
		c++
		n.Set(c)
		out.Emit(tally{Bucket: key, UUID: r.UUID, Seq: r.Seq, Count: r.Count, N: c, Path: path})
		return nil
	}
}

// checkTallies checks a two-stage pipeline's committed output against the
// input: every kept event once (no loss, no duplicate), each user's in seq
// order with stage one's count right, and each bucket's (and path's)
// numbers 1..n with no gap or repeat.
func checkTallies(t *testing.T, out []tally, want map[string]int64, keep func(seq int64) bool, path func(seq int64) string) {
	t.Helper()
	// Order is FIFO per (upstream task, key) at every stage: a user's
	// events on one path keep their order; across paths they interleave.
	next := map[string]int64{} // uuid/path -> the next seq on that path
	on := func(seq int64, p string) bool { return (keep == nil || keep(seq)) && path(seq) == p }
	per := map[string][]int64{} // path/bucket -> N in commit order
	for _, r := range out {
		k := r.UUID + "/" + r.Path
		for next[k] < r.Seq && !on(next[k], r.Path) {
			next[k]++
		}
		require.Equal(t, next[k], r.Seq, "user %s on path %s: result for seq %d, want %d (duplicate, loss or reorder)", r.UUID, r.Path, r.Seq, next[k])
		require.Equal(t, r.Seq+1, r.Count, "user %s seq %d: stage one's count", r.UUID, r.Seq)
		require.Equal(t, bucketOf(r.UUID), r.Bucket)
		require.Equal(t, path(r.Seq), r.Path, "user %s seq %d went the wrong way", r.UUID, r.Seq)
		next[k] = r.Seq + 1
		b := r.Path + "/" + r.Bucket
		per[b] = append(per[b], r.N)
	}
	wantPer := map[string]int{}
	for u, n := range want {
		for seq := int64(0); seq < n; seq++ {
			if keep == nil || keep(seq) {
				wantPer[path(seq)+"/"+bucketOf(u)]++
			}
		}
		// Past its last result on each path, a user has no event left
		// for that path.
		for seq := int64(0); seq < n; seq++ {
			if keep == nil || keep(seq) {
				p := path(seq)
				require.Greater(t, next[u+"/"+p], seq, "user %s: no result for seq %d (path %s)", u, seq, p)
			}
		}
	}
	require.Len(t, per, len(wantPer))
	for k, ns := range per {
		// Within a bucket the order of users is the interleaving of
		// stage one's tasks: not defined, but the numbers are 1..n.
		sorted := append([]int64(nil), ns...)
		sort.Slice(sorted, func(a, b int) bool { return sorted[a] < sorted[b] })
		for i, n := range sorted {
			require.Equal(t, int64(i+1), n, "%s: numbers %v", k, sorted)
		}
		require.Len(t, ns, wantPer[k], "%s", k)
	}
}

// failOnce fails the run after checkpoint id commits, the first time;
// *failed says whether it has.
func failOnce(id uint64) (keyed.Opt, *bool) {
	failed := new(bool)
	return keyed.OnCommit(func(c uint64) error {
		if c == id && !*failed {
			*failed = true
			return errors.New("on purpose")
		}
		return nil
	}), failed
}

// TestTwoStages: per-user counts (stage one, by partition), a chained
// Filter and MapValues, re-keyed by bucket into per-bucket counts (stage
// two), with a failure after the first commit and a restart: every kept
// event's tally is committed once, each user's in order, each bucket's
// numbered 1..n, at several parallelisms.
func TestTwoStages(t *testing.T) {
	for _, par := range []struct{ src, one, two int }{{1, 1, 1}, {2, 2, 3}, {4, 3, 2}} {
		t.Run(fmt.Sprintf("%d-%d-%d", par.src, par.one, par.two), func(t *testing.T) {
			src, want := input(11, 4, 60, 6_000)
			sink := keyed.NewMemorySink[tally]()
			fail, failed := failOnce(1)
			j := keyed.NewJob("pipeline", keyed.FS(vfs.NewMem()), keyed.Dir("/ckpt"), keyed.CheckpointInterval(5*time.Millisecond),
				keyed.RestartStrategy(keyed.FixedDelay(1, time.Millisecond)), fail)
			events := keyed.FromSource(j, "events", par.src, connector.Source[event](src))
			users := keyed.Process(keyed.ByPartition(events), "users", par.one, func() keyed.Operator[event, result] { return &counter{} })
			kept := users.Filter(func(r result) bool { return r.Seq%3 != 2 })
			byBucket := keyed.KeyByString("bucket", func(r result) string { return bucketOf(r.UUID) }, keyed.MapValues(kept, func(r result) result { return r }))
			tallies := keyed.ProcessValue(byBucket, "buckets", par.two, serde.Int64(), tallyStage("all"))
			keyed.ToSink(tallies, "out", connector.Sink[tally](sink))
			require.NoError(t, j.Validate())
			require.NoError(t, runJob(t, j))
			require.True(t, *failed, "the job failed and restarted")
			checkTallies(t, sink.Committed(), want, func(seq int64) bool { return seq%3 != 2 }, func(int64) string { return "all" })
		})
	}
}

// TestFanOutUnion: stage one's output goes two ways (fan-out), even and
// odd events, each re-keyed by bucket into a stage of its own; the sink
// takes the union of both stages, with a FlatMapValues on one way that
// makes each record once (and none for seq 7). Barriers align across the
// union; a failure and restart keep it exactly-once.
func TestFanOutUnion(t *testing.T) {
	src, want := input(12, 4, 50, 5_000)
	sink := keyed.NewMemorySink[tally]()
	fail, failed := failOnce(1)
	j := keyed.NewJob("fanout", keyed.FS(vfs.NewMem()), keyed.Dir("/ckpt"), keyed.CheckpointInterval(5*time.Millisecond),
		keyed.RestartStrategy(keyed.FixedDelay(1, time.Millisecond)), fail)
	events := keyed.FromSource(j, "events", 2, connector.Source[event](src))
	users := keyed.Process(keyed.ByPartition(events), "users", 2, func() keyed.Operator[event, result] { return &counter{} })
	even := keyed.KeyByString("bucket", func(r result) string { return bucketOf(r.UUID) }, users.Filter(func(r result) bool { return r.Seq%2 == 0 }))
	odd := keyed.KeyByString("bucket", func(r result) string { return bucketOf(r.UUID) },
		keyed.FlatMapValues(users.Filter(func(r result) bool { return r.Seq%2 == 1 }), func(r result, emit func(result)) {
			if r.Seq != 7 {
				emit(r)
			}
		}))
	a := keyed.ProcessValue(even, "even", 2, serde.Int64(), tallyStage("even"))
	b := keyed.ProcessValue(odd, "odd", 3, serde.Int64(), tallyStage("odd"))
	keyed.ToSink(keyed.Union(a, b), "out", connector.Sink[tally](sink))
	require.NoError(t, j.Validate())
	require.NoError(t, runJob(t, j))
	path := func(seq int64) string {
		if seq%2 == 0 {
			return "even"
		}
		return "odd"
	}
	require.True(t, *failed, "the job failed and restarted")
	checkTallies(t, sink.Committed(), want, func(seq int64) bool { return seq != 7 }, path)
}

// TestSeveralSinks: stage one's counts go to one sink and stage two's
// tallies to a second that commits with the first (MemoryOutput), with a
// failure after the first commit and a restart: both hold every result
// once, in order. Two sinks that would commit apart are refused, naming
// both.
func TestSeveralSinks(t *testing.T) {
	src, want := input(15, 4, 40, 4_000)
	counts := keyed.NewMemorySink[result]()
	tallies := keyed.MemoryOutput[tally](counts)
	fail, failed := failOnce(1)
	j := keyed.NewJob("sinks", keyed.FS(vfs.NewMem()), keyed.Dir("/ckpt"), keyed.CheckpointInterval(5*time.Millisecond),
		keyed.RestartStrategy(keyed.FixedDelay(1, time.Millisecond)), fail)
	users := keyed.Process(keyed.ByPartition(keyed.FromSource(j, "events", 2, connector.Source[event](src))), "users", 2, func() keyed.Operator[event, result] { return &counter{} })
	keyed.ToSink(users, "counts", connector.Sink[result](counts))
	byBucket := keyed.KeyByString("bucket", func(r result) string { return bucketOf(r.UUID) }, users)
	keyed.ToSink(keyed.ProcessValue(byBucket, "buckets", 3, serde.Int64(), tallyStage("all")), "tallies", connector.Sink[tally](tallies))
	require.NoError(t, j.Validate())
	require.NoError(t, runJob(t, j))
	require.True(t, *failed, "the job failed and restarted")
	checkOutput(t, counts.Committed(), want)
	checkTallies(t, tallies.Committed(), want, nil, func(int64) string { return "all" })

	apart := keyed.NewJob("apart", keyed.FS(vfs.NewMem()), keyed.Dir("/ckpt"))
	src2, _ := input(15, 4, 40, 4_000)
	users = keyed.Process(keyed.ByPartition(keyed.FromSource(apart, "events", 2, connector.Source[event](src2))), "users", 2, func() keyed.Operator[event, result] { return &counter{} })
	keyed.ToSink(users, "counts", connector.Sink[result](keyed.NewMemorySink[result]()))
	keyed.ToSink(users, "again", connector.Sink[result](keyed.NewMemorySink[result]()))
	require.ErrorContains(t, apart.Validate(), `sinks "counts" and "again" would commit apart`)
}

// sideCounter is counter that also sends every fourth result to a side
// output.
type sideCounter struct {
	counter
	side *keyed.SideOutput[result]
}

func (c *sideCounter) Process(key []byte, e event, out *keyed.Collector[result]) error {
	if err := c.counter.Process(key, e, out); err != nil {
		return err
	}
	if e.Seq%4 == 0 {
		keyed.EmitSide(out, c.side, result{UUID: e.UUID, Seq: e.Seq, Count: e.Seq + 1})
	}
	return nil
}

// TestSideOutputFeedsStage: a stage's side output (every fourth result)
// is keyed into a second stage, while its main output goes to a sink,
// through a failure after the first commit and a restart: both outputs
// are exactly-once and in order. A side output taken but sent nowhere, or
// taken from a stream that is not a stage's, is refused; one emitted but
// not taken fails the job, naming it.
func TestSideOutputFeedsStage(t *testing.T) {
	src, want := input(16, 4, 40, 4_000)
	counts := keyed.NewMemorySink[result]()
	tallies := keyed.MemoryOutput[tally](counts)
	fail, failed := failOnce(1)
	j := keyed.NewJob("side", keyed.FS(vfs.NewMem()), keyed.Dir("/ckpt"), keyed.CheckpointInterval(5*time.Millisecond),
		keyed.RestartStrategy(keyed.FixedDelay(1, time.Millisecond)), fail)
	every4 := keyed.NewSideOutput[result]("every4")
	users := keyed.Process(keyed.ByPartition(keyed.FromSource(j, "events", 2, connector.Source[event](src))), "users", 2,
		func() keyed.Operator[event, result] { return &sideCounter{side: every4} })
	keyed.ToSink(users, "counts", connector.Sink[result](counts))
	byBucket := keyed.KeyByString("bucket", func(r result) string { return bucketOf(r.UUID) }, keyed.Side(users, every4))
	keyed.ToSink(keyed.ProcessValue(byBucket, "buckets", 3, serde.Int64(), tallyStage("side")), "tallies", connector.Sink[tally](tallies))
	require.NoError(t, j.Validate())
	require.NoError(t, runJob(t, j))
	require.True(t, *failed, "the job failed and restarted")
	checkOutput(t, counts.Committed(), want)
	checkTallies(t, tallies.Committed(), want, func(seq int64) bool { return seq%4 == 0 }, func(int64) string { return "side" })

	build := func(wire func(j *keyed.Job, users *keyed.Stream[result])) *keyed.Job {
		j := keyed.NewJob("side2", keyed.FS(vfs.NewMem()), keyed.Dir("/ckpt"))
		src, _ := input(16, 4, 40, 400)
		users := keyed.Process(keyed.ByPartition(keyed.FromSource(j, "events", 2, connector.Source[event](src))), "users", 2,
			func() keyed.Operator[event, result] { return &sideCounter{side: every4} })
		keyed.ToSink(users, "counts", connector.Sink[result](keyed.NewMemorySink[result]()))
		wire(j, users)
		return j
	}
	err := build(func(_ *keyed.Job, users *keyed.Stream[result]) {
		keyed.Side(users, every4)
		keyed.Side(users.Filter(func(result) bool { return true }), keyed.NewSideOutput[int]("other"))
	}).Validate()
	require.ErrorContains(t, err, `stage "users": its side output "every4" (Side) goes nowhere`)
	require.ErrorContains(t, err, `Side "other" of stream from "users": a side output is a keyed stage's`)
	err = runJob(t, build(func(*keyed.Job, *keyed.Stream[result]) {}))
	require.ErrorContains(t, err, `side output "every4" goes nowhere from this stage: take it with keyed.Side`)
}

// TestGraphErrors: what Validate refuses in a graph, naming the stage.
func TestGraphErrors(t *testing.T) {
	src, _ := input(13, 4, 10, 100)
	j := keyed.NewJob("graph", keyed.FS(vfs.NewMem()), keyed.Dir("/ckpt"))
	events := keyed.FromSource(j, "events", 1, connector.Source[event](src))
	users := keyed.Process(keyed.ByPartition(events), "users", 1, func() keyed.Operator[event, result] { return &counter{} })
	keyed.Process(keyed.ByPartition(users), "again", 1, func() keyed.Operator[result, result] { return nil })
	keyed.MapValues(users, func(r result) int { return 0 }).Watermarks(time.Second)
	other := keyed.NewJob("other", keyed.FS(vfs.NewMem()), keyed.Dir("/ckpt"))
	src2, _ := input(13, 4, 10, 100)
	keyed.Union(users, keyed.Process(keyed.ByPartition(keyed.FromSource(other, "events", 1, connector.Source[event](src2))), "o", 1, func() keyed.Operator[event, result] { return &counter{} }))
	err := j.Validate()
	require.ErrorContains(t, err, `Union of streams of jobs "graph" and "other": a stream belongs to one job`)
	require.ErrorContains(t, err, `ByPartition of the output of "users": partition mode keys a source's records by their partition`)
	require.ErrorContains(t, err, `stage "again": its output goes nowhere`)
	require.ErrorContains(t, err, `Watermarks of stream from "users": it applies to a source's stream`)
	require.ErrorContains(t, err, `job has no sink`)
}

// TestGraphChange: state belongs to a stage's name. A restore into a job
// without one of the checkpoint's stages is refused, naming it, unless
// AllowNonRestoredState drops its state; a stage the checkpoint does not
// know starts empty.
func TestGraphChange(t *testing.T) {
	fs := vfs.NewMem()
	sink := keyed.NewMemorySink[tally]()
	job := func(stageTwo, key string, opts ...keyed.Opt) *keyed.Job {
		src, _ := input(14, 4, 20, 500)
		j := keyed.NewJob("change", append([]keyed.Opt{keyed.FS(fs), keyed.Dir("/ckpt")}, opts...)...)
		events := keyed.FromSource(j, "events", 1, connector.Source[event](src))
		users := keyed.Process(keyed.ByPartition(events), "users", 1, func() keyed.Operator[event, result] { return &counter{} })
		byBucket := keyed.KeyByString(key, func(r result) string { return bucketOf(r.UUID) }, users)
		keyed.ToSink(keyed.ProcessValue(byBucket, stageTwo, 1, serde.Int64(), tallyStage(stageTwo)), "out", connector.Sink[tally](sink))
		require.NoError(t, j.Validate())
		return j
	}
	require.NoError(t, runJob(t, job("buckets", "bucket")))
	err := runJob(t, job("pages", "bucket"))
	require.ErrorContains(t, err, `holds the state of stage "buckets", which the job no longer has`)
	require.ErrorContains(t, err, "keyed.AllowNonRestoredState")
	require.NoError(t, runJob(t, job("pages", "bucket", keyed.AllowNonRestoredState())))

	// The stage keeps its name but keys by another key: refused, naming
	// the stage and both keys; the old key name restores.
	err = runJob(t, job("pages", "page"))
	require.ErrorContains(t, err, `operator "pages"`)
	require.ErrorContains(t, err, `keyed the stage by "bucket", the job now keys it by "page"`)
	require.ErrorIs(t, err, keyed.ErrPermanent, "a changed key is not retried")
	require.NoError(t, runJob(t, job("pages", "bucket")))

	bad := keyed.NewJob("badkey", keyed.FS(fs), keyed.Dir("/ckpt"))
	src, _ := input(1, 1, 1, 1)
	keyed.ToSink(keyed.ProcessFunc(keyed.KeyBy("", func(e event) []byte { return nil }, keyed.FromSource(bad, "events", 1, connector.Source[event](src))),
		"op", 1, func(k []byte, e event, out *keyed.Collector[event]) error { return nil }), "out", connector.Sink[event](keyed.NewMemorySink[event]()))
	require.ErrorContains(t, bad.Validate(), "no key name")
}
