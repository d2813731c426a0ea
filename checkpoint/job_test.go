package checkpoint_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kordproject/kord/checkpoint"
	"github.com/kordproject/kord/consumer"
	"github.com/kordproject/kord/internal/crashtest"
	"github.com/kordproject/kord/internal/failpoint"
	"github.com/kordproject/kord/internal/kafkatest"
	"github.com/kordproject/kord/internal/testdir"
	"github.com/kordproject/kord/producer"
)

// The crash tests run the job in a child process: this test binary,
// re-executed with KORD_TEST_CHILD=countjob and the job's settings in the
// environment.
func TestMain(m *testing.M) {
	if os.Getenv("KORD_TEST_CHILD") == "countjob" {
		os.Exit(childMain())
	}
	os.Exit(m.Run())
}

// event is an input record's value.
type event struct {
	UUID string `json:"uuid"`
	Seq  int64  `json:"seq"`
}

// result is an output record's value: the input event it answers and the
// key's count after it.
type result struct {
	UUID  string `json:"uuid"`
	Seq   int64  `json:"seq"`
	Count int64  `json:"count"`
}

func emit(rec consumer.Record, count int64) []byte {
	var ev event
	if err := json.Unmarshal(rec.Value, &ev); err != nil {
		// Bad input is never skipped silently; this test never writes any.
		panic(fmt.Sprintf("%s[%d]@%d: %v", rec.Topic, rec.Partition, rec.Offset, err))
	}
	b, _ := json.Marshal(result{UUID: ev.UUID, Seq: ev.Seq, Count: count})
	return b
}

func childMain() int {
	interval, _ := time.ParseDuration(os.Getenv("KORD_JOB_INTERVAL"))
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	j := &checkpoint.CountJob{
		Name:       os.Getenv("KORD_JOB_NAME"),
		Brokers:    os.Getenv("KORD_JOB_BROKERS"),
		Input:      os.Getenv("KORD_JOB_INPUT"),
		Output:     os.Getenv("KORD_JOB_OUTPUT"),
		Dir:        os.Getenv("KORD_JOB_DIR"),
		Checkpoint: checkpoint.Config{Interval: interval},
		Emit:       emit,
		Logger:     log,
		OnCommitted: func(id uint64) {
			fmt.Fprintf(os.Stdout, "committed %d\n", id)
		},
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	if err := j.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "job error:", err)
		return 3
	}
	fmt.Fprintln(os.Stdout, "stopped")
	return 0
}

// harness runs job children against one cluster and checks the output.
type harness struct {
	t             *testing.T
	c             *kafkatest.Cluster
	name          string
	input, output string
	dir           string
	interval      time.Duration
	keys          []string
	mu            sync.Mutex
	produced      int
}

// produceInBackground produces n input records at rate a second on another
// goroutine, under a context that ends after timeout (or with the test),
// and returns that context and the channel that gets produce's result.
func (h *harness) produceInBackground(n, rate int, timeout time.Duration) (context.Context, <-chan error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	h.t.Cleanup(cancel)
	errc := make(chan error, 1)
	go func() { errc <- h.produce(ctx, n, rate) }()
	return ctx, errc
}

func newHarness(t *testing.T, c *kafkatest.Cluster, keys int) *harness {
	h := &harness{t: t, c: c, name: strings.ReplaceAll(kafkatest.TopicName(t), "/", "."), dir: t.TempDir(), interval: 150 * time.Millisecond}
	h.input = c.CreateTopic(t, 6, nil)
	h.output = c.CreateTopic(t, 6, nil)
	r := rand.New(rand.NewPCG(7, uint64(keys)))
	for i := 0; i < keys; i++ {
		h.keys = append(h.keys, fmt.Sprintf("%08x-%04x-4%03x-8%03x-%012x", r.Uint32(), r.Uint32()&0xffff, r.Uint32()&0xfff, r.Uint32()&0xfff, r.Uint64()&0xffffffffffff))
	}
	return h
}

// produce writes n input events at about rate per second, each key's
// events numbered from 0 in order, through kord's producer.
func (h *harness) produce(ctx context.Context, n, rate int) error {
	p, err := producer.New(producer.String(), producer.JSON[event](), producer.Brokers(h.c.Brokers))
	if err != nil {
		return err
	}
	defer p.Close()
	seq := make([]int64, len(h.keys))
	r := rand.New(rand.NewPCG(11, 13))
	start := time.Now()
	for i := 0; i < n; i++ {
		k := r.IntN(len(h.keys))
		if err := p.Produce(ctx, producer.Record[string, event]{Topic: h.input, Key: h.keys[k], Value: event{UUID: h.keys[k], Seq: seq[k]}}, nil); err != nil {
			return err
		}
		seq[k]++
		if i%100 == 99 {
			if ahead := time.Duration(i+1)*time.Second/time.Duration(rate) - time.Since(start); ahead > 0 {
				time.Sleep(ahead)
			}
		}
	}
	if err := p.Flush(ctx); err != nil {
		return err
	}
	h.mu.Lock()
	h.produced = n
	h.mu.Unlock()
	return nil
}

func (h *harness) start(failpoints, dir string) *crashtest.Child {
	return crashtest.Start(h.t,
		"KORD_TEST_CHILD=countjob",
		"KORD_JOB_NAME="+h.name, "KORD_JOB_BROKERS="+h.c.Brokers,
		"KORD_JOB_INPUT="+h.input, "KORD_JOB_OUTPUT="+h.output,
		"KORD_JOB_DIR="+dir, "KORD_JOB_INTERVAL="+h.interval.String(),
		failpoint.Env+"="+failpoints)
}

// waitKilled waits for the child to die by SIGKILL (from a failpoint or
// from us after killAfter).
func (h *harness) waitKilled(c *crashtest.Child, what string, killAfter time.Duration) {
	h.t.Helper()
	if signaled, err := c.Wait(killAfter, true); !signaled {
		h.t.Fatalf("%s: child exited without being killed (%v)\nstdout:\n%s\nstderr:\n%s", what, err, c.Stdout, c.Stderr)
	}
}

// waitFired waits for the child to be SIGKILLed by failpoint fp, and fails
// the test if it was not: a failpoint that never fires (renamed, moved off
// the path, hit fewer times than armed) would otherwise pass as the kill we
// send after killAfter.
func (h *harness) waitFired(c *crashtest.Child, fp string, killAfter time.Duration) {
	h.t.Helper()
	h.waitKilled(c, fp, killAfter)
	if want := "kord: failpoint " + fp + ": SIGKILL"; !strings.Contains(c.Stderr.String(), want) {
		h.t.Fatalf("failpoint %s did not fire within %v (the test killed the child)\nstdout:\n%s\nstderr:\n%s", fp, killAfter, c.Stdout, c.Stderr)
	}
}

// verify reads the output with read_committed and checks exactly-once and
// per-key order against the input, and that no transaction is left open.
func (h *harness) verify(n int) {
	t := h.t
	recs := h.c.ReadAll(t, h.output, n, true, 90*time.Second)
	extra := h.c.ReadAll(t, h.output, n+1, true, 3*time.Second)
	require.Equal(t, n, len(extra), "output records (read_committed): exactly one result per input event")
	require.Equal(t, n, len(recs))
	next := map[string]int64{}
	for _, r := range recs {
		var res result
		require.NoError(t, json.Unmarshal(r.Value, &res))
		require.Equal(t, res.UUID, string(r.Key))
		require.Equal(t, next[res.UUID], res.Seq, "key %s: result for seq %d, want %d (duplicate, loss or reorder) at %s[%d]@%d", res.UUID, res.Seq, next[res.UUID], r.Topic, r.Partition, r.Offset)
		require.Equal(t, res.Seq+1, res.Count, "key %s seq %d: count %d: state and output disagree", res.UUID, res.Seq, res.Count)
		next[res.UUID] = res.Seq + 1
	}
	h.requireNoOpenTransaction()
}

// requireNoOpenTransaction checks every output partition's last stable
// offset equals its high watermark: no transaction is left open to stall
// read_committed readers.
func (h *harness) requireNoOpenTransaction() {
	t := h.t
	cl := h.c.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ends := func(isolation int8) map[int32]int64 {
		req := kmsg.NewPtrListOffsetsRequest()
		req.IsolationLevel = isolation
		rt := kmsg.NewListOffsetsRequestTopic()
		rt.Topic = h.output
		for p := int32(0); p < 6; p++ {
			rp := kmsg.NewListOffsetsRequestTopicPartition()
			rp.Partition = p
			rp.Timestamp = -1
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, cl)
		require.NoError(t, err)
		out := map[int32]int64{}
		for _, p := range resp.Topics[0].Partitions {
			require.Zero(t, p.ErrorCode)
			out[p.Partition] = p.Offset
		}
		return out
	}
	require.Equal(t, ends(0), ends(1), "high watermark vs last stable offset: a transaction is open")
}

func (h *harness) finish(n int) {
	t := h.t
	c := h.start("", h.dir)
	// Wait until every result is visible, then stop gracefully.
	recs := h.c.ReadAll(t, h.output, n, true, 90*time.Second)
	require.Equal(t, n, len(recs), "stderr:\n%s", c.Stderr)
	require.NoError(t, c.Cmd.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-c.Done:
		require.NoError(t, err, "graceful stop\nstderr:\n%s", c.Stderr)
	case <-time.After(45 * time.Second):
		_ = c.Cmd.Process.Kill()
		t.Fatalf("graceful stop took over 45s\nstderr:\n%s", c.Stderr)
	}
	require.Contains(t, c.Stdout.String(), "stopped")
	h.verify(n)
}

// TestCrashAtEveryFailpoint: the job is SIGKILLed at each lifecycle
// failpoint in turn and at random times while input keeps arriving, with
// one in-process recovery from a commit whose outcome is unknown; then a
// read_committed reader sees every input's result exactly once, in per-key
// order, with counts that match.
func TestCrashAtEveryFailpoint(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		h := newHarness(t, c, 500)
		n := 20_000
		_, prodErr := h.produceInBackground(n, 2_000, 5*time.Minute)

		r := rand.New(rand.NewPCG(5, 8))
		cycles := append([]string(nil), checkpoint.Failpoints...)
		cycles = append(cycles, checkpoint.SimCommitUnknown, "random", "random", "random")
		for _, fp := range cycles {
			switch fp {
			case "random":
				ch := h.start("", h.dir)
				h.waitKilled(ch, fp, time.Duration(300+r.IntN(1500))*time.Millisecond)
			case checkpoint.SimCommitUnknown:
				ch := h.start(fp+"@2", h.dir)
				deadline := time.Now().Add(30 * time.Second)
				for !strings.Contains(ch.Stderr.String(), "recovering") && time.Now().Before(deadline) {
					time.Sleep(50 * time.Millisecond)
				}
				h.waitKilled(ch, fp, 500*time.Millisecond)
				require.Contains(t, ch.Stderr.String(), "recovering", "no in-process recovery after the unknown commit outcome")
			case checkpoint.FailDuringRestore:
				h.waitFired(h.start(fp, h.dir), fp, 60*time.Second)
			default:
				h.waitFired(h.start(fmt.Sprintf("%s@%d", fp, 1+r.IntN(3)), h.dir), fp, 60*time.Second)
			}
		}
		require.NoError(t, <-prodErr)
		h.finish(n)
	})
}

// TestZombieIsFenced: a job paused (SIGSTOP) while a second copy starts
// with the same name on a copy of its checkpoints: the copy fences it; the
// paused one, resumed, stops with a clear fencing error and leaves the
// survivor's output exactly-once.
func TestZombieIsFenced(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		h := newHarness(t, c, 200)
		n := 6_000
		_, prodErr := h.produceInBackground(n, 3_000, 3*time.Minute)

		zombie := h.start("", h.dir)
		require.Eventually(t, func() bool { return strings.Count(zombie.Stdout.String(), "committed") >= 3 }, 60*time.Second, 20*time.Millisecond, "stderr:\n%s", zombie.Stderr)
		require.NoError(t, zombie.Cmd.Process.Signal(syscall.SIGSTOP))
		// The survivor gets the zombie's checkpoints, as from shared storage.
		survivorDir := t.TempDir()
		testdir.Copy(t, h.dir, survivorDir)
		survivor := h.start("", survivorDir)
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
		recs := h.c.ReadAll(t, h.output, n, true, 90*time.Second)
		require.Equal(t, n, len(recs), "survivor stderr:\n%s", survivor.Stderr)
		require.NoError(t, survivor.Cmd.Process.Signal(syscall.SIGTERM))
		require.NoError(t, <-survivor.Done, "survivor stderr:\n%s", survivor.Stderr)
		h.verify(n)
	})
}
