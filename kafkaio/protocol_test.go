//go:build kordfailpoints

package kafkaio_test

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/kordproject/kord/checkpoint"
	"github.com/kordproject/kord/consumer"
	"github.com/kordproject/kord/internal/failpoint"
	"github.com/kordproject/kord/internal/layout"
	"github.com/kordproject/kord/internal/rig/kafkatest"
	"github.com/kordproject/kord/internal/rig/syncbuf"
	"github.com/kordproject/kord/internal/rig/testdir"
	"github.com/kordproject/kord/kafkaio"
	"github.com/kordproject/kord/keyed"
	"github.com/kordproject/kord/vfs"
	"github.com/kordproject/kord/vfs/errorfs"
)

// The proofs of the exactly-once protocol (DESIGN.md, "Exactly-once to
// Kafka with librdkafka") on the engine with the Kafka source and sink.

// TestCrashAtEveryFailpoint: the job, in a child process, is SIGKILLed at
// each failpoint of the checkpoint lifecycle in turn (the fresh start's
// first, as it fires only then) and at random times, while input keeps
// arriving, with one in-process recovery from a commit whose outcome is
// unknown, at parallelism 1 to 3; then a read_committed reader sees every
// input's result exactly once, in per-key order, with counts that match,
// and no transaction is left open.
func TestCrashAtEveryFailpoint(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		f := newFixture(t, c, 6, 500)
		prodErr := f.produceInBackground(20_000, 2_000, 5*time.Minute)

		r := rand.New(rand.NewPCG(5, 8))
		cycles := []string{failpoint.AfterFreshCommitted}
		for _, fp := range failpoint.Crashes {
			if fp != failpoint.AfterFreshCommitted {
				cycles = append(cycles, fp)
			}
		}
		cycles = append(cycles, failpoint.SimCommitUnknown, "random", "random", "random")
		for i, fp := range cycles {
			par := 1 + i%3
			switch fp {
			case "random":
				f.waitKilled(f.start("", f.dir, par), fp, time.Duration(300+r.IntN(1500))*time.Millisecond)
			case failpoint.SimCommitUnknown:
				ch := f.start(fp+"@2", f.dir, par)
				deadline := time.Now().Add(30 * time.Second)
				for !strings.Contains(ch.Stderr.String(), "recovering from what the sink recorded") && time.Now().Before(deadline) {
					time.Sleep(50 * time.Millisecond)
				}
				f.waitKilled(ch, fp, 500*time.Millisecond)
				require.Contains(t, ch.Stderr.String(), "recovering from what the sink recorded", "no in-process recovery after the unknown commit outcome")
			case failpoint.DuringRestore, failpoint.AfterFreshCommitted:
				f.waitFired(f.start(fp, f.dir, par), fp, 60*time.Second)
			default:
				f.waitFired(f.start(fmt.Sprintf("%s@%d", fp, 1+r.IntN(3)), f.dir, par), fp, 60*time.Second)
			}
		}
		require.NoError(t, <-prodErr)
		f.finish(f.dir)
	})
}

// TestZombieIsFenced: a job process paused (SIGSTOP) while a second copy
// starts with the same name on a copy of its checkpoints: the copy fences
// it; the paused one, resumed, stops with a clear fencing error and leaves
// the survivor's output exactly-once.
func TestZombieIsFenced(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		f := newFixture(t, c, 6, 200)
		prodErr := f.produceInBackground(6_000, 3_000, 3*time.Minute)

		zombie := f.start("", f.dir, 2)
		require.Eventually(t, func() bool { return strings.Count(zombie.Stdout.String(), "committed") >= 3 }, 60*time.Second, 20*time.Millisecond, "stderr:\n%s", zombie.Stderr)
		zombie.Stop(t)
		// The survivor gets the zombie's checkpoints, as from shared storage.
		survivorDir := t.TempDir()
		testdir.Copy(t, f.dir, survivorDir)
		survivor := f.start("", survivorDir, 2)
		require.Eventually(t, func() bool { return strings.Count(survivor.Stdout.String(), "committed") >= 2 }, 60*time.Second, 20*time.Millisecond, "stderr:\n%s", survivor.Stderr)
		require.NoError(t, zombie.Cmd.Process.Signal(syscall.SIGCONT))
		select {
		case err := <-zombie.Done:
			require.Error(t, err, "the zombie must not keep running")
			require.Contains(t, zombie.Stderr.String(), "fenced", "stderr:\n%s", zombie.Stderr)
		case <-time.After(60 * time.Second):
			_ = zombie.Cmd.Process.Kill()
			t.Fatalf("zombie not stopped 60s after resuming\nstderr:\n%s", zombie.Stderr)
		}
		require.NoError(t, <-prodErr)
		recs := f.c.ReadAll(t, f.out, f.total(), true, 90*time.Second)
		require.Equal(t, f.total(), len(recs), "survivor stderr:\n%s", survivor.Stderr)
		require.NoError(t, terminate(survivor))
		require.NoError(t, <-survivor.Done, "survivor stderr:\n%s", survivor.Stderr)
		f.verify()
	})
}

// TestUnknownOutcomeRecovers: a transactional step whose outcome the job
// cannot know (SendOffsetsToTransaction, CommitTransaction, the
// AbortTransaction of the abort path, each sent with a deadline too short
// to see its answer, or a record produced into the transaction and
// reported with an unknown outcome) ends that producer; a new run with a
// new producer initialises, restores the checkpoint Kafka recorded, and
// the output stays exactly-once. The commit of checkpoint 2 is the one hit
// (fresh start, checkpoint 1, then 2): offsets sent or an abort mean the
// commit never went out, so Kafka recorded checkpoint 1; an unknown commit
// may have landed (2) or not (1). The produce hit is a record of epoch 1
// or 2.
func TestUnknownOutcomeRecovers(t *testing.T) {
	for _, sim := range failpoint.SimUnknown {
		t.Run(sim, func(t *testing.T) {
			kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
				f := newFixture(t, c, 6, 50)
				// Input keeps coming for 2 s, well past checkpoint 2.
				n := 2_000
				hit := "@3"
				if sim == failpoint.SimProduceUnknown {
					hit = "@150" // a record produced after checkpoint 1 committed
				}
				require.NoError(t, failpoint.Set(sim+hit))
				t.Cleanup(func() { _ = failpoint.Set("") })
				prodErr := f.produceInBackground(n, 1_000, 2*time.Minute)
				var out syncbuf.Buffer
				var mu sync.Mutex
				var events []string // "committed <run>/<id>", "recovering", "restored <run>/<id> by <run>"
				log := logTo(&out, slog.LevelDebug, func(msg string, a map[string]string) {
					mu.Lock()
					defer mu.Unlock()
					switch msg {
					case "keyed: checkpoint committed":
						events = append(events, "committed "+a["run"]+"/"+a["checkpoint"])
					case "keyed: recovering from what the sink recorded":
						events = append(events, "recovering")
					case "keyed: recovery":
						events = append(events, "restored "+a["checkpoint"]+" by "+a["run"])
					}
				})
				j, _, sink := f.build(func(s *jobSpec) { s.logger = log })
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()
				f.runUntil(ctx, j, sink)
				require.NoError(t, <-prodErr)

				mu.Lock()
				defer mu.Unlock()
				var runs []string
				lastCommitted, recovering, restored := "", 0, ""
				for _, e := range events {
					switch {
					case strings.HasPrefix(e, "committed "):
						if recovering == 0 {
							lastCommitted = strings.TrimPrefix(e, "committed ")
						}
					case e == "recovering":
						recovering++
					case strings.HasPrefix(e, "restored "):
						ref, run, _ := strings.Cut(strings.TrimPrefix(e, "restored "), " by ")
						runs = append(runs, run)
						if recovering == 1 && restored == "" {
							restored = ref
						}
					}
				}
				require.Equal(t, 1, recovering, "one in-process recovery\n%s", &out)
				require.Contains(t, out.String(), "simulated", "the simulated fault is in the recovery's cause\n%s", &out)
				require.Len(t, runs, 2, "two runs, each with its own producer\n%s", &out)
				require.NotEqual(t, runs[0], runs[1], "the recovery runs on a new run id\n%s", &out)
				want := []string{lastCommitted}
				if sim == failpoint.SimCommitUnknown {
					require.Equal(t, runs[0]+"/1", lastCommitted, "checkpoint 2's commit is the one that failed\n%s", &out)
					want = append(want, runs[0]+"/2")
				}
				if sim != failpoint.SimProduceUnknown {
					require.Equal(t, runs[0]+"/1", lastCommitted, "checkpoint 2's commit is the one that failed\n%s", &out)
				}
				require.Contains(t, want, restored, "restored what Kafka recorded\n%s", &out)
				f.verify()
			})
		})
	}
}

// failFinalCommit runs the job on 300 events with an hour's checkpoint
// interval, the commit's failpoint fp armed for its second hit (hit 1 is
// the fresh start's commit, hit 2 the final checkpoint's), and stops it
// once every result is in the open transaction. It returns how long Run
// took after the stop (at most 30 s) and its error. edit adjusts the job.
func (f *fixture) failFinalCommit(fp string, edit func(*jobSpec)) (took time.Duration, err error) {
	t := f.t
	f.fill(300)
	require.NoError(t, failpoint.Set(fp+"@2"))
	t.Cleanup(func() { _ = failpoint.Set("") })
	j, _, sink := f.build(func(s *jobSpec) {
		s.interval = time.Hour
		if edit != nil {
			edit(s)
		}
	})
	defer func() { require.NoError(t, sink.Close()) }()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	done := make(chan error, 1)
	go func() { done <- j.Run(ctx) }()
	require.Len(t, f.c.ReadAll(t, f.out, f.total(), false, 60*time.Second), f.total())
	stop()
	start := time.Now()
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("no return 30 s after the stop (the checkpoint timeout is 60 s)")
	}
	return time.Since(start), err
}

// thenAllOnce disarms the failpoints, runs the job until every result is
// visible, and verifies the output.
func (f *fixture) thenAllOnce() {
	require.NoError(f.t, failpoint.Set(""))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	j, _, sink := f.build(nil)
	f.runUntil(ctx, j, sink)
	f.verify()
}

// TestStopRecoversFailedFinalCommit: the final checkpoint of a graceful
// stop fails with an unknown outcome. The stop still recovers with a new
// producer (whose InitTransactions aborts the failed transaction) and
// commits a final checkpoint, so no transaction is left open to stall
// read_committed readers; a later run then delivers everything exactly
// once.
func TestStopRecoversFailedFinalCommit(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		f := newFixture(t, c, 6, 20)
		var out syncbuf.Buffer
		_, err := f.failFinalCommit(failpoint.SimSendOffsetsUnknown, func(s *jobSpec) { s.logger = logTo(&out, slog.LevelWarn, nil) })
		require.NoError(t, err)
		require.Contains(t, out.String(), "simulated unknown send-offsets outcome", "the final checkpoint's commit failed")
		require.Contains(t, out.String(), "recovering from what the sink recorded")
		f.requireNoOpenTransaction()
		f.thenAllOnce()
	})
}

// TestAbortedCheckpointMergesIntoNext: with TolerableFailures 1, the first
// checkpoint k with state fails its snapshot (after 300 ms, while input
// keeps arriving and its output waits in the epoch buffer), so k aborts
// before its commit. The job goes on: the buffered output joins the open
// transaction, ahead of anything newer, checkpoint k+1 commits it all, and
// the output stays exactly-once and in per-key order.
func TestAbortedCheckpointMergesIntoNext(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		f := newFixture(t, c, 6, 50)
		prodErr := f.produceInBackground(2_000, 1_000, 2*time.Minute)
		var injected atomic.Int32
		fs := errorfs.New(vfs.Default(), func(op errorfs.Op, name string) error {
			// The first state file (of the first checkpoint with state),
			// written by a snapshot goroutine while the job reads on.
			if op == errorfs.OpCreate && strings.Contains(filepath.Base(name), ".op-count.") && injected.Add(1) == 1 {
				time.Sleep(300 * time.Millisecond)
				return errorfs.ErrInjected
			}
			return nil
		})
		// The first commit after the abort, k+1: its transaction must hold
		// exactly the output of the input before barrier k+1 (the input
		// starts at offset 0), the aborted epoch's included. The log line
		// is written by the coordinator before it triggers the next
		// checkpoint.
		var mu sync.Mutex
		var committed, aborted []uint64
		wantAtK1, gotAtK1 := -1, -1
		var out syncbuf.Buffer
		log := logTo(&out, slog.LevelDebug, func(msg string, a map[string]string) {
			mu.Lock()
			defer mu.Unlock()
			id, _ := strconv.ParseUint(a["checkpoint"], 10, 64)
			switch msg {
			case "keyed: checkpoint aborted; its output commits with the next":
				aborted = append(aborted, id)
				if a["reason"] != "task-failed" {
					t.Errorf("abort reason %q", a["reason"])
				}
			case "keyed: checkpoint committed":
				committed = append(committed, id)
				if len(aborted) == 0 || wantAtK1 >= 0 {
					return
				}
				m := readMeta(t, f.dir, a["run"], id)
				wantAtK1 = 0
				for _, o := range m.Offsets {
					wantAtK1 += int(o.Offset)
				}
				gotAtK1 = len(f.c.ReadAll(t, f.out, wantAtK1+1, true, 2*time.Second))
			}
		})
		j, _, sink := f.build(func(s *jobSpec) {
			s.logger = log
			s.opts = []keyed.Opt{keyed.TolerableFailures(1), keyed.FS(fs)}
		})
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		f.runUntil(ctx, j, sink)
		require.NoError(t, <-prodErr)

		require.NotZero(t, injected.Load())
		mu.Lock()
		require.Len(t, aborted, 1, "one abort\n%s", &out)
		require.NotContains(t, committed, aborted[0])
		require.Contains(t, committed, aborted[0]+1, "the job went on after the abort")
		require.Equal(t, wantAtK1, gotAtK1, "checkpoint %d's transaction: output visible at its commit vs input before its barrier", aborted[0]+1)
		mu.Unlock()
		require.NotContains(t, out.String(), "recovering", "no recovery: the abort merged into the open transaction")
		f.verify()
	})
}

// readMeta reads checkpoint run/id's metadata from dir.
func readMeta(t *testing.T, dir, run string, id uint64) *checkpoint.Metadata {
	name := filepath.Join(dir, layout.MetaName(run, id))
	b, err := os.ReadFile(name)
	require.NoError(t, err)
	m, err := checkpoint.DecodeMetadata(name, b)
	require.NoError(t, err)
	return m
}

// TestEpochBufferBackpressure: with an epoch buffer of 7 records and
// snapshots slowed to 200 ms while input keeps arriving, the buffer fills
// during each checkpoint and the sink stops taking output (its Write
// blocks, and the job's channels back up to the sources): it holds exactly
// 7, never more. The output stays exactly-once. The same with a bound of
// 1,000 bytes (EpochBufferBytes; a result record is 90 to 130 bytes): the
// buffer fills to within one record of it, never past it.
func TestEpochBufferBackpressure(t *testing.T) {
	t.Run("records", func(t *testing.T) {
		epochBufferBackpressure(t, kafkaio.EpochBuffer(7), func(n, _ int) bool { return n == 7 }, func(n, _ int) bool { return n > 7 })
	})
	t.Run("bytes", func(t *testing.T) {
		epochBufferBackpressure(t, kafkaio.EpochBufferBytes(1000), func(_, b int) bool { return b > 1000-200 }, func(_, b int) bool { return b > 1000 })
	})
}

// epochBufferBackpressure runs TestEpochBufferBackpressure with bound, and
// fails unless the buffer was full (full's verdict on its length and
// bytes) at some record and never over (over's).
func epochBufferBackpressure(t *testing.T, bound kafkaio.Opt, full, over func(n, bytes int) bool) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		f := newFixture(t, c, 6, 50)
		// The input comes while the job runs, from its first commit on: a
		// job that started late (a loaded machine) would otherwise read
		// all of it before its first barrier, and no record would ever
		// wait behind one (a fresh-clone CI run saw a peak of 0).
		const n = 2_000
		f.mu.Lock()
		f.planned += n
		f.mu.Unlock()
		pctx, pcancel := context.WithTimeout(context.Background(), 2*time.Minute)
		t.Cleanup(pcancel)
		prodErr := make(chan error, 1)
		var produce sync.Once
		started := keyed.OnCommit(func(uint64) error {
			produce.Do(func() { go func() { prodErr <- f.producePlanned(pctx, n, 1_000) }() })
			return nil
		})
		var mu sync.Mutex
		fulls, overs, peak, peakBytes := 0, 0, 0, 0
		kafkaio.SetEpochBufferHook(func(n, bytes int) {
			mu.Lock()
			defer mu.Unlock()
			peak, peakBytes = max(peak, n), max(peakBytes, bytes)
			if full(n, bytes) {
				fulls++
			}
			if over(n, bytes) {
				overs++
			}
		})
		t.Cleanup(func() { kafkaio.SetEpochBufferHook(nil) })
		fs := errorfs.New(vfs.Default(), func(op errorfs.Op, name string) error {
			if op == errorfs.OpCreate && strings.Contains(filepath.Base(name), ".op-count.") {
				time.Sleep(200 * time.Millisecond)
			}
			return nil
		})
		j, _, sink := f.build(func(s *jobSpec) {
			s.opts = []keyed.Opt{keyed.FS(fs), started}
			s.sinkOpts = []kafkaio.Opt{bound}
		})
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		f.runUntil(ctx, j, sink)
		require.NoError(t, <-prodErr)
		mu.Lock()
		t.Logf("the epoch buffer's peak: %d records, %d bytes", peak, peakBytes)
		require.Zero(t, overs, "records buffered past the bound")
		require.NotZero(t, fulls, "the buffer filled (backpressure)")
		mu.Unlock()
		f.verify()
	})
}

// TestStopTimeout: the final checkpoint's commit gets no answer. The stop
// gives up at StopTimeout (cancelling the commit), not at the checkpoint
// timeout, and returns keyed.ErrStopTimeout naming the checkpoint; the
// next start recovers and delivers everything exactly once.
func TestStopTimeout(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		f := newFixture(t, c, 6, 20)
		took, err := f.failFinalCommit(failpoint.SimCommitStall, func(s *jobSpec) {
			s.opts = []keyed.Opt{keyed.StopTimeout(time.Second)}
		})
		// StopTimeout, plus closing the clients.
		require.Less(t, took, 8*time.Second)
		require.ErrorIs(t, err, keyed.ErrStopTimeout)
		require.ErrorContains(t, err, "checkpoint 1")
		t.Log(err)
		f.thenAllOnce()
	})
}

// TestRestoreFailsClearly: the checkpoint Kafka recorded as committed is
// corrupt, or the offsets it restores are no longer in the log: the job
// stops with an error naming the file or the topic, partition and offset,
// instead of restoring something else.
func TestRestoreFailsClearly(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		f := newFixture(t, c, 6, 50)
		f.fill(500)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		j, _, sink := f.build(nil)
		f.runUntil(ctx, j, sink)
		run := func(dir string) error {
			j, _, sink := f.build(func(s *jobSpec) { s.dir = dir })
			defer sink.Close()
			return j.Run(ctx)
		}

		// Corrupt the committed checkpoint's metadata: exactly-once mode
		// stops.
		bad := t.TempDir()
		testdir.Copy(t, f.dir, bad)
		metas := listMeta(t, bad)
		newest := metas[len(metas)-1]
		b, err := os.ReadFile(filepath.Join(bad, newest))
		require.NoError(t, err)
		b[len(b)/2] ^= 0xff
		require.NoError(t, os.WriteFile(filepath.Join(bad, newest), b, 0o644))
		err = run(bad)
		require.ErrorIs(t, err, checkpoint.ErrCommittedMissing)
		require.ErrorIs(t, err, keyed.ErrPermanent)
		require.Contains(t, err.Error(), newest)
		// And what the user can do about it.
		require.Contains(t, err.Error(), "keyed.AcceptDuplicates")
		require.Contains(t, err.Error(), "Job.Forget")

		// Delete it: same.
		require.NoError(t, os.Remove(filepath.Join(bad, newest)))
		require.ErrorIs(t, run(bad), checkpoint.ErrCommittedMissing)

		// More input, then the log start moves past what the checkpoint
		// restores (retention deleted unread records): fail, never skip.
		f.fill(500)
		cl := f.c.Client(t)
		req := kmsg.NewPtrDeleteRecordsRequest()
		rt := kmsg.NewDeleteRecordsRequestTopic()
		rt.Topic = f.in
		for p := int32(0); p < 6; p++ {
			rp := kmsg.NewDeleteRecordsRequestTopicPartition()
			rp.Partition = p
			rp.Offset = -1 // up to the high watermark
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = append(req.Topics, rt)
		req.TimeoutMillis = 30000
		resp, err := req.RequestWith(ctx, cl)
		require.NoError(t, err)
		for _, p := range resp.Topics[0].Partitions {
			require.NoError(t, kerr.ErrorForCode(p.ErrorCode))
		}
		err = run(f.dir)
		require.ErrorIs(t, err, consumer.ErrOutOfRange)
		var oe *consumer.OffsetError
		require.ErrorAs(t, err, &oe)
		require.Equal(t, f.in, oe.Topic)
		require.Contains(t, err.Error(), fmt.Sprintf("%s[%d] offset %d", f.in, oe.Partition, oe.Offset))
	})
}

func listMeta(t *testing.T, dir string) []string {
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var out []string
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".meta") {
			out = append(out, e.Name())
		}
	}
	require.NotEmpty(t, out)
	return out
}

// TestRestoreOffsetsDiffer: the commit group's offsets were changed behind
// the job's back (same commit record, another offset): the job stops with
// checkpoint.ErrOffsetsDiffer naming the partition, instead of restoring a
// checkpoint that Kafka's offsets contradict.
func TestRestoreOffsetsDiffer(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		f := newFixture(t, c, 6, 20)
		f.fill(200)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		j, _, sink := f.build(nil)
		f.runUntil(ctx, j, sink)
		group := kafkaio.CommitGroup(f.name)

		// Kafka 3.9's request versions name topics, not topic ids.
		cl := f.c.Client(t, kgo.MaxVersions(kversion.V3_9_0()))
		fetch := kmsg.NewPtrOffsetFetchRequest()
		fetch.Group = group
		ft := kmsg.NewOffsetFetchRequestTopic()
		ft.Topic = f.in
		ft.Partitions = []int32{3}
		fetch.Topics = append(fetch.Topics, ft)
		fresp, err := fetch.RequestWith(ctx, cl)
		require.NoError(t, err)
		require.NoError(t, kerr.ErrorForCode(fresp.ErrorCode))
		fp := fresp.Topics[0].Partitions[0]
		require.NoError(t, kerr.ErrorForCode(fp.ErrorCode))
		require.Contains(t, *fp.Metadata, "kord1;")

		// The group has no members: a plain commit (generation -1) goes in.
		commit := kmsg.NewPtrOffsetCommitRequest()
		commit.Group = group
		commit.Generation = -1
		ct := kmsg.NewOffsetCommitRequestTopic()
		ct.Topic = f.in
		cp := kmsg.NewOffsetCommitRequestTopicPartition()
		cp.Partition = 3
		cp.Offset = fp.Offset + 1
		cp.Metadata = fp.Metadata
		ct.Partitions = append(ct.Partitions, cp)
		commit.Topics = append(commit.Topics, ct)
		cresp, err := commit.RequestWith(ctx, cl)
		require.NoError(t, err)
		require.NoError(t, kerr.ErrorForCode(cresp.Topics[0].Partitions[0].ErrorCode))

		j, _, sink = f.build(nil)
		defer sink.Close()
		err = j.Run(ctx)
		require.ErrorIs(t, err, checkpoint.ErrOffsetsDiffer)
		require.Contains(t, err.Error(), fmt.Sprintf("%s[3] is at %d in commit group %s, %d in checkpoint", f.in, fp.Offset+1, group, fp.Offset))
	})
}
