package kafkaio_test

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kordproject/kord/internal/failpoint"
	"github.com/kordproject/kord/internal/kafkatest"
	"github.com/kordproject/kord/internal/syncbuf"
	"github.com/kordproject/kord/kafkaio"
	"github.com/kordproject/kord/keyed"
)

// instanceJob is one process's job of a job on several processes: the
// fixture's job, as instance id, on the fixture's shared directory.
type instanceJob struct {
	id      string
	j       *keyed.Job
	sink    *kafkaio.Sink[result]
	commits atomic.Int64
	slow    atomic.Bool // each commit waits 2 s before it sends its offsets
	stop    context.CancelFunc
	done    chan error
}

func (f *fixture) startInstance(id string, log *syncbuf.Buffer, session time.Duration) *instanceJob {
	ij := &instanceJob{id: id, done: make(chan error, 1)}
	ij.j, _, ij.sink = f.build(func(s *jobSpec) {
		s.byPartition = true
		s.parallelism = 2
		s.logger = logTo(log, slog.LevelInfo, nil).With("instance", id)
		s.sinkOpts = append(s.sinkOpts, kafkaio.Instance(id), kafkaio.MemberSet("session.timeout.ms", strconv.FormatInt(session.Milliseconds(), 10)))
		s.opts = append(s.opts, keyed.CheckpointTimeout(10*time.Second))
	})
	ctx, stop := context.WithCancel(context.Background())
	ij.stop = stop
	f.t.Cleanup(stop)
	ctx = failpoint.WithHook(ctx, func(p string) error {
		if p == failpoint.AfterCommit {
			ij.commits.Add(1)
		}
		if p == failpoint.BeforeSendOffsets && ij.slow.Load() {
			time.Sleep(2 * time.Second)
		}
		return nil
	})
	go func() { ij.done <- ij.j.Run(ctx) }()
	return ij
}

// end stops the instance gracefully (a final checkpoint) and closes its
// sink.
func (ij *instanceJob) end(t *testing.T, log *syncbuf.Buffer) {
	t.Helper()
	ij.stop()
	select {
	case err := <-ij.done:
		require.NoError(t, err, "instance %s\n%s", ij.id, log)
	case <-time.After(2 * time.Minute):
		t.Fatalf("instance %s did not stop\n%s", ij.id, log)
	}
	require.NoError(t, ij.sink.Close())
}

// TestScaledHandover: one job on two processes (two instances in this
// test process, each its own group member, producer and run). The second
// joins while input arrives and takes partitions from the first, whose run
// commits them first (made slow, so that a handover that did not wait for
// it would show as duplicates); the first stops, and its partitions move to the
// second with their state. A read_committed reader finds every result
// exactly once, in order, with counts that continue across the moves.
func TestScaledHandover(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		f := newFixture(t, c, 6, 200)
		f.fill(2000)
		prodErr := f.produceInBackground(6000, 600, 3*time.Minute)
		var log syncbuf.Buffer
		a := f.startInstance("a", &log, 6*time.Second)
		require.Eventually(t, func() bool { return a.commits.Load() >= 3 }, time.Minute, 10*time.Millisecond, "%s", &log)
		// a's commits are slow from now on: b gets a's partitions only
		// after a's final checkpoint over them committed, however long
		// that takes, or it would restore an older one and repeat output.
		a.slow.Store(true)
		b := f.startInstance("b", &log, 6*time.Second)
		require.Eventually(t, func() bool { return b.commits.Load() >= 3 }, time.Minute, 10*time.Millisecond, "%s", &log)
		before := a.commits.Load()
		require.Eventually(t, func() bool { return a.commits.Load() >= before+2 }, time.Minute, 10*time.Millisecond, "%s", &log)
		a.end(t, &log)
		require.NoError(t, <-prodErr)
		recs := f.c.ReadAll(t, f.out, f.expected(), true, 2*time.Minute)
		b.end(t, &log)
		require.Equal(t, f.expected(), len(recs), "%s", &log)
		f.verify()
		// b restored partitions from checkpoints a's runs wrote.
		runsOf := map[string][]string{}
		restored := map[string]string{}
		for _, l := range strings.Split(log.String(), "\n") {
			if !strings.Contains(l, "recovery (one of several processes)") {
				continue
			}
			t.Log(l)
			inst, run := field(l, "instance"), field(l, "run")
			runsOf[inst] = append(runsOf[inst], run)
			restored[inst] += field(l, "checkpoints")
		}
		fromA := false
		for _, run := range runsOf["a"] {
			fromA = fromA || strings.Contains(restored["b"], run+"/")
		}
		require.True(t, fromA, "b restored none of a's checkpoints (a's runs %v; b restored %s)", runsOf["a"], restored["b"])
	})
}

// field returns the value of key in a slog text line.
func field(line, key string) string {
	i := strings.Index(line, " "+key+"=")
	if i < 0 {
		return ""
	}
	v := line[i+len(key)+2:]
	if strings.HasPrefix(v, `"`) {
		if j := strings.Index(v[1:], `"`); j >= 0 {
			return v[1 : j+1]
		}
	}
	if j := strings.IndexByte(v, ' '); j >= 0 {
		return v[:j]
	}
	return v
}
