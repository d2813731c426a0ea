package checkpoint_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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
	"github.com/kordproject/kord/internal/kafkatest"
	"github.com/kordproject/kord/internal/syncbuf"
	"github.com/kordproject/kord/internal/testdir"
)

// inproc runs the job in this process until n results are visible, then
// stops it gracefully.
func (h *harness) job(dir string) *checkpoint.CountJob {
	return &checkpoint.CountJob{Name: h.name, Brokers: h.c.Brokers, Input: h.input, Output: h.output, Dir: dir,
		Checkpoint: checkpoint.Config{Interval: h.interval}, Emit: emit}
}

func (h *harness) runUntil(j *checkpoint.CountJob, n int) {
	t := h.t
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- j.Run(ctx) }()
	recs := h.c.ReadAll(t, h.output, n, true, 60*time.Second)
	cancel()
	require.NoError(t, <-done)
	require.Equal(t, n, len(recs))
}

// TestRestoreFailsClearly: the checkpoint Kafka recorded as committed is
// corrupt, or the offsets it restores are no longer in the log: the job
// stops with an error naming the file or the topic, partition and offset,
// instead of restoring something else.
func TestRestoreFailsClearly(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		h := newHarness(t, c, 50)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		require.NoError(t, h.produce(ctx, 500, 100_000))
		h.runUntil(h.job(h.dir), 500)

		// Corrupt the committed checkpoint's metadata: exactly-once mode stops.
		bad := t.TempDir()
		testdir.Copy(t, h.dir, bad)
		metas := listMeta(t, bad)
		newest := metas[len(metas)-1]
		b, err := os.ReadFile(bad + "/" + newest)
		require.NoError(t, err)
		b[len(b)/2] ^= 0xff
		require.NoError(t, os.WriteFile(bad+"/"+newest, b, 0o644))
		err = h.job(bad).Run(ctx)
		require.ErrorIs(t, err, checkpoint.ErrCommittedMissing)
		require.Contains(t, err.Error(), newest)

		// Delete it: same.
		require.NoError(t, os.Remove(bad+"/"+newest))
		err = h.job(bad).Run(ctx)
		require.ErrorIs(t, err, checkpoint.ErrCommittedMissing)

		// More input, then the log start moves past what the checkpoint
		// restores (retention deleted unread records): fail, never skip.
		require.NoError(t, h.produce(ctx, 500, 100_000))
		cl := h.c.Client(t)
		req := kmsg.NewPtrDeleteRecordsRequest()
		rt := kmsg.NewDeleteRecordsRequestTopic()
		rt.Topic = h.input
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
		err = h.job(h.dir).Run(ctx)
		require.ErrorIs(t, err, consumer.ErrOutOfRange)
		var oe *consumer.OffsetError
		require.ErrorAs(t, err, &oe)
		require.Equal(t, h.input, oe.Topic)
		require.Contains(t, err.Error(), fmt.Sprintf("%s[%d] offset %d", h.input, oe.Partition, oe.Offset))
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

// TestTransactionTimeoutOverBrokerMax: a transaction timeout above the
// broker's transaction.max.timeout.ms (its default, 15 min, here) fails at
// start with an error naming that setting (real broker: kfake does not
// enforce the maximum). The job is told the brokers allow an hour, and its
// checkpoint timeout asks for more than 15 min.
func TestTransactionTimeoutOverBrokerMax(t *testing.T) {
	c := kafkatest.Broker(t)
	h := newHarness(t, c, 5)
	j := h.job(h.dir)
	j.Checkpoint.Timeout = 30 * time.Minute
	j.Checkpoint.TransactionMaxTimeout = time.Hour
	require.Greater(t, j.TransactionTimeout(), 15*time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := j.Run(ctx)
	require.Error(t, err)
	require.Contains(t, err.Error(), "transaction.max.timeout.ms")
}

func TestJobUnknownTopicAndValidate(t *testing.T) {
	c := kafkatest.Fake(t)
	h := newHarness(t, c, 5)
	j := h.job(h.dir)
	j.Input = "no-such-topic"
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := j.Run(ctx)
	require.ErrorIs(t, err, consumer.ErrUnknownTopic)
	require.Contains(t, err.Error(), "no-such-topic")

	bad := &checkpoint.CountJob{Name: "a;b", Input: "x", Output: "x"}
	err = bad.Validate()
	require.Error(t, err)
	for _, s := range []string{"job name", "no brokers", "both \"x\"", "checkpoint directory", "Emit"} {
		require.Contains(t, err.Error(), s)
	}
}

// TestRestoreOffsetsDiffer: the commit group's offsets were changed behind
// the job's back (same commit record, another offset): the job stops with
// ErrOffsetsDiffer naming the partition, instead of restoring a checkpoint
// that Kafka's offsets contradict.
func TestRestoreOffsetsDiffer(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		h := newHarness(t, c, 20)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		require.NoError(t, h.produce(ctx, 200, 100_000))
		j := h.job(h.dir)
		h.runUntil(j, 200)

		// Kafka 3.9's request versions name topics, not topic ids.
		cl := h.c.Client(t, kgo.MaxVersions(kversion.V3_9_0()))
		fetch := kmsg.NewPtrOffsetFetchRequest()
		fetch.Group = j.CommitGroup()
		ft := kmsg.NewOffsetFetchRequestTopic()
		ft.Topic = h.input
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
		commit.Group = j.CommitGroup()
		commit.Generation = -1
		ct := kmsg.NewOffsetCommitRequestTopic()
		ct.Topic = h.input
		cp := kmsg.NewOffsetCommitRequestTopicPartition()
		cp.Partition = 3
		cp.Offset = fp.Offset + 1
		cp.Metadata = fp.Metadata
		ct.Partitions = append(ct.Partitions, cp)
		commit.Topics = append(commit.Topics, ct)
		cresp, err := commit.RequestWith(ctx, cl)
		require.NoError(t, err)
		require.NoError(t, kerr.ErrorForCode(cresp.Topics[0].Partitions[0].ErrorCode))

		err = h.job(h.dir).Run(ctx)
		require.ErrorIs(t, err, checkpoint.ErrOffsetsDiffer)
		require.Contains(t, err.Error(), fmt.Sprintf("%s[3] is at %d in group %s, %d in checkpoint", h.input, fp.Offset+1, j.CommitGroup(), fp.Offset))
	})
}

// TestValidateTimeoutSettings: transaction.timeout.ms is derived, so a
// user's value is refused; message.timeout.ms may be lowered but not raised
// above the transaction timeout (DESIGN.md, "Timeouts").
func TestValidateTimeoutSettings(t *testing.T) {
	j := &checkpoint.CountJob{Name: "v", Brokers: "b", Input: "in", Output: "out", Dir: "d", Emit: emit}
	require.NoError(t, j.Validate())
	txn := j.TransactionTimeout().Milliseconds()
	for _, tc := range []struct {
		settings map[string]string
		err      string
	}{
		{map[string]string{"transaction.timeout.ms": "60000"}, "transaction.timeout.ms is derived"},
		{map[string]string{"transactional.id": "x"}, "transactional.id is derived"},
		{map[string]string{"message.timeout.ms": fmt.Sprint(txn + 1)}, fmt.Sprintf("message.timeout.ms %d exceeds the transaction timeout %d ms", txn+1, txn)},
		{map[string]string{"message.timeout.ms": "soon"}, "message.timeout.ms \"soon\""},
		{map[string]string{"message.timeout.ms": fmt.Sprint(txn)}, ""},
		{map[string]string{"message.timeout.ms": "5000"}, ""},
	} {
		j.ProducerSettings = tc.settings
		err := j.Validate()
		if tc.err == "" {
			require.NoError(t, err, "%v", tc.settings)
			continue
		}
		require.ErrorContains(t, err, tc.err, "%v", tc.settings)
	}
}

// TestUnknownOutcomeRecovers: a transactional request whose outcome the job
// cannot know (SendOffsetsToTransaction, CommitTransaction, or the
// AbortTransaction of the abort path, each sent with a deadline too short
// to see its answer) ends that producer; a new run with a new producer
// initialises, restores the checkpoint Kafka recorded, and the output stays
// exactly-once. The commit of checkpoint 2 is the one hit (fresh start,
// checkpoint 1, then 2). Offsets sent or an abort mean the commit never
// went out, so Kafka recorded checkpoint 1; an unknown commit may have
// landed (2) or not (1).
func TestUnknownOutcomeRecovers(t *testing.T) {
	for _, sim := range checkpoint.SimUnknown {
		t.Run(sim, func(t *testing.T) {
			kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
				h := newHarness(t, c, 50)
				// Input keeps coming for 2 s, well past checkpoint 2.
				n := 2_000
				require.NoError(t, failpoint.Set(sim+"@3"))
				t.Cleanup(func() { _ = failpoint.Set("") })
				_, prodErr := h.produceInBackground(n, 1_000, 2*time.Minute)
				var out syncbuf.Buffer
				j := h.job(h.dir)
				j.Logger = slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelInfo}))
				j.OnCommitted = func(id uint64) { fmt.Fprintf(&out, "committed %d\n", id) }
				h.runUntil(j, n)
				require.NoError(t, <-prodErr)

				// The job's own account, in order: commits, the failure, the
				// new run's recovery decision.
				var runs []string
				lastCommitted, recovering, restored := -1, 0, ""
				for _, line := range strings.Split(out.String(), "\n") {
					switch {
					case strings.HasPrefix(line, "committed "):
						if recovering == 0 {
							lastCommitted, _ = strconv.Atoi(strings.TrimPrefix(line, "committed "))
						}
					case strings.Contains(line, `msg="kord job: recovering"`):
						recovering++
						require.Contains(t, line, "simulated", line)
					case strings.Contains(line, `msg="kord job: running"`):
						runs = append(runs, logAttr(line, "run"))
					case strings.Contains(line, `msg="kord job: recovery"`) && recovering == 1 && restored == "":
						restored = logAttr(line, "checkpoint")
						require.NotEqual(t, runs[0], logAttr(line, "run"), "recovery runs on a new run, with a new producer")
					}
				}
				require.Equal(t, 1, recovering, "one in-process recovery\n%s", &out)
				require.Len(t, runs, 2, "two runs, each with its own producer\n%s", &out)
				require.Equal(t, 1, lastCommitted, "checkpoint 2's commit is the one that failed\n%s", &out)
				want := []string{fmt.Sprintf("%s/1", runs[0])}
				if sim == checkpoint.SimCommitUnknown {
					want = append(want, fmt.Sprintf("%s/2", runs[0]))
				}
				require.Contains(t, want, restored, "restored what Kafka recorded\n%s", &out)
				h.verify(n)
			})
		})
	}
}

// logAttr returns the value of key in a slog text line ("" if absent).
func logAttr(line, key string) string {
	i := strings.Index(line, " "+key+"=")
	if i < 0 {
		return ""
	}
	v := line[i+len(key)+2:]
	if j := strings.IndexByte(v, ' '); j >= 0 {
		v = v[:j]
	}
	return v
}

// TestStopRecoversFailedFinalCommit: the final checkpoint of a graceful
// stop fails with an unknown outcome. The stop still recovers with a new
// producer (whose InitTransactions aborts the failed transaction) and
// commits a final checkpoint, so no transaction is left open to stall
// read_committed readers; a later run then delivers everything exactly
// once.
func TestStopRecoversFailedFinalCommit(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		h := newHarness(t, c, 20)
		n := 300
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		require.NoError(t, h.produce(ctx, n, 100_000))
		// Hit 1 is the fresh start's commit; with an hour's interval, hit 2
		// is the final checkpoint's.
		require.NoError(t, failpoint.Set(checkpoint.SimSendOffsetsUnknown+"@2"))
		t.Cleanup(func() { _ = failpoint.Set("") })
		var out syncbuf.Buffer
		j := h.job(h.dir)
		j.Checkpoint.Interval = time.Hour
		j.Logger = slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelWarn}))
		rctx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- j.Run(rctx) }()
		// Every result is in the open transaction.
		require.Len(t, h.c.ReadAll(t, h.output, n, false, 60*time.Second), n)
		stop()
		require.NoError(t, <-done)
		require.Contains(t, out.String(), "simulated unknown send-offsets outcome", "the final checkpoint's commit failed")
		h.requireNoOpenTransaction()

		require.NoError(t, failpoint.Set(""))
		h.runUntil(h.job(h.dir), n)
		h.verify(n)
	})
}

// TestAbortedCheckpointMergesIntoNext: with TolerableFailures 1, the first
// checkpoint k with state fails its snapshot (after 300 ms, while input
// keeps arriving and its output waits in the epoch buffer), so k aborts
// before its commit. The job goes on: the buffered output joins the open transaction,
// ahead of anything newer, checkpoint k+1 commits it all, and the output
// stays exactly-once and in per-key order.
func TestAbortedCheckpointMergesIntoNext(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		h := newHarness(t, c, 50)
		n := 2_000
		_, prodErr := h.produceInBackground(n, 1_000, 2*time.Minute)
		var out syncbuf.Buffer
		var injected atomic.Int32
		j := h.job(h.dir)
		j.Checkpoint.TolerableFailures = 1
		j.FS = checkpoint.NewErrorFS(checkpoint.OSFS(), func(op checkpoint.Op, name string) error {
			// The first state file (of the first checkpoint with state),
			// written by the snapshot goroutine while the job reads on.
			if op == checkpoint.OpCreate && strings.Contains(filepath.Base(name), ".op-") && injected.Add(1) == 1 {
				time.Sleep(300 * time.Millisecond)
				return checkpoint.ErrInjected
			}
			return nil
		})
		j.Logger = slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelWarn}))
		var mu sync.Mutex
		var committed []uint64
		// The first commit after the abort, k+1: its transaction must hold
		// exactly the output of the input before barrier k+1 (the input
		// starts at offset 0), the aborted epoch's included. OnCommitted
		// runs before the next transaction begins.
		wantAtK1, gotAtK1 := -1, -1
		j.OnCommitted = func(id uint64) {
			mu.Lock()
			committed = append(committed, id)
			mu.Unlock()
			if injected.Load() == 0 || wantAtK1 >= 0 {
				return
			}
			metas, err := filepath.Glob(filepath.Join(h.dir, fmt.Sprintf("ckpt-*-%020d.meta", id)))
			if err != nil || len(metas) != 1 {
				t.Errorf("metadata of checkpoint %d: %v %v", id, metas, err)
				return
			}
			b, err := os.ReadFile(metas[0])
			if err == nil {
				var m *checkpoint.Metadata
				if m, err = checkpoint.DecodeMetadata(metas[0], b); err == nil {
					wantAtK1 = 0
					for _, o := range m.Offsets {
						wantAtK1 += int(o.Offset)
					}
				}
			}
			if err != nil {
				t.Errorf("metadata of checkpoint %d: %v", id, err)
				return
			}
			gotAtK1 = len(h.c.ReadAll(t, h.output, wantAtK1+1, true, 2*time.Second))
		}
		h.runUntil(j, n)
		require.NoError(t, <-prodErr)

		require.NotZero(t, injected.Load())
		var aborted []uint64
		for _, line := range strings.Split(out.String(), "\n") {
			if strings.Contains(line, `msg="kord job: checkpoint aborted; its output commits with the next"`) {
				k, err := strconv.ParseUint(logAttr(line, "checkpoint"), 10, 64)
				require.NoError(t, err, line)
				aborted = append(aborted, k)
				require.Equal(t, "task-failed", logAttr(line, "reason"), line)
			}
		}
		require.Len(t, aborted, 1, "one abort\n%s", &out)
		mu.Lock()
		require.NotContains(t, committed, aborted[0])
		require.Contains(t, committed, aborted[0]+1, "the job went on after the abort")
		mu.Unlock()
		require.Equal(t, wantAtK1, gotAtK1, "checkpoint %d's transaction: output visible at its commit vs input before its barrier", aborted[0]+1)
		require.NotContains(t, out.String(), "recovering", "no recovery: the abort merged into the open transaction")
		h.verify(n)
	})
}

// TestEpochBufferBackpressure: with an epoch buffer of 7 records and
// snapshots slowed to 200 ms while input keeps arriving, the buffer fills
// during each checkpoint and the job stops reading: it holds exactly 7, never
// more (a read of up to 1000 records used to overshoot the bound). The
// output stays exactly-once.
func TestEpochBufferBackpressure(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		h := newHarness(t, c, 50)
		n := 2_000
		_, prodErr := h.produceInBackground(n, 1_000, 2*time.Minute)
		var mu sync.Mutex
		peak, fullReads := 0, 0
		checkpoint.SetEpochBufferHook(func(n int) {
			mu.Lock()
			defer mu.Unlock()
			peak = max(peak, n)
			if n == 7 {
				fullReads++
			}
		})
		t.Cleanup(func() { checkpoint.SetEpochBufferHook(nil) })
		j := h.job(h.dir)
		j.EpochBuffer = 7
		j.FS = checkpoint.NewErrorFS(checkpoint.OSFS(), func(op checkpoint.Op, name string) error {
			// The first state file of each checkpoint (key group 0).
			if op == checkpoint.OpCreate && strings.Contains(filepath.Base(name), "-kg-00000.avro") {
				time.Sleep(200 * time.Millisecond)
			}
			return nil
		})
		h.runUntil(j, n)
		require.NoError(t, <-prodErr)
		mu.Lock()
		require.Equal(t, 7, peak, "the epoch buffer's peak")
		require.NotZero(t, fullReads, "the buffer filled (backpressure)")
		mu.Unlock()
		h.verify(n)
	})
}

// TestStopTimeout: the final checkpoint's commit gets no answer. The stop
// gives up at StopTimeout (cancelling the commit), not at the checkpoint
// timeout, and returns ErrStopTimeout naming the checkpoint; the next start
// recovers and delivers everything exactly once.
func TestStopTimeout(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		h := newHarness(t, c, 20)
		n := 300
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		require.NoError(t, h.produce(ctx, n, 100_000))
		// Hit 1 is the fresh start's commit; with an hour's interval, hit 2
		// is the final checkpoint's.
		require.NoError(t, failpoint.Set(checkpoint.SimCommitStall+"@2"))
		t.Cleanup(func() { _ = failpoint.Set("") })
		j := h.job(h.dir)
		j.Checkpoint.Interval = time.Hour
		j.StopTimeout = time.Second
		rctx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- j.Run(rctx) }()
		require.Len(t, h.c.ReadAll(t, h.output, n, false, 60*time.Second), n)
		stop()
		start := time.Now()
		var err error
		select {
		case err = <-done:
		case <-time.After(30 * time.Second):
			t.Fatal("no return 30 s after the stop (the checkpoint timeout is 60 s)")
		}
		// StopTimeout, plus closing the producer (up to 5 s) and consumer.
		require.Less(t, time.Since(start), 8*time.Second)
		require.ErrorIs(t, err, checkpoint.ErrStopTimeout)
		require.ErrorContains(t, err, "checkpoint 1")
		t.Log(err)

		require.NoError(t, failpoint.Set(""))
		h.runUntil(h.job(h.dir), n)
		h.verify(n)
	})
}
