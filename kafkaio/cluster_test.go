package kafkaio_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kordproject/kord/internal/rig/kafkatest"
	"github.com/kordproject/kord/internal/rig/syncbuf"
	"github.com/kordproject/kord/kafkaio"
	"github.com/kordproject/kord/keyed"
)

// Broker faults during an exactly-once run with input arriving, on the
// three brokers of scripts/kafka-cluster.sh (replication factor 3,
// min.insync.replicas=2; KORD_KAFKA_CLUSTER). One job, in this process,
// reads 3 partitions and writes 3, while input arrives at 200 events a
// second; in the middle a broker fault happens and is undone. Each case
// then requires Run to have gone on (it returns no error when stopped),
// and the independent read_committed check (verify): every result once,
// in per-key order, with counts that continue, no transaction left open.
// Each logs how long committed output stalled (the longest time the sum
// of the output's last stable offsets did not advance while input
// arrived) and how many times the job recovered from its last committed
// checkpoint (after a failure, or at once after a commit whose outcome is
// unknown).
//
// The job restarts as a production job would be told to: up to 20 times
// in a row, a second apart (keyed.RestartStrategy); an unknown commit
// outcome is recovered from whatever the strategy.
func TestClusterBrokerFaults(t *testing.T) {
	kafkatest.ThreeBrokers(t) // skip (or fail) before the subtests when there is no cluster
	for _, tc := range []struct {
		name string
		// coordinators: where the job's transaction coordinator and its
		// commit group's coordinator are (its name is chosen so): on one
		// broker, on two, or wherever ("").
		coordinators string
		fault        func(t *testing.T, th *kafkatest.Three, f *fixture, r *clusterRun)
	}{
		{"input-leader-killed", "", func(t *testing.T, th *kafkatest.Three, f *fixture, r *clusterRun) {
			id := th.Leader(f.in, 0)
			r.killUntilMoved(t, th, id, fmt.Sprintf("leader of %s[0]", f.in), func() int { return th.Leader(f.in, 0) })
		}},
		{"output-leader-killed", "", func(t *testing.T, th *kafkatest.Three, f *fixture, r *clusterRun) {
			id := th.Leader(f.out, 0)
			r.killUntilMoved(t, th, id, fmt.Sprintf("leader of %s[0]", f.out), func() int { return th.Leader(f.out, 0) })
		}},
		{"txn-coordinator-killed", apart, func(t *testing.T, th *kafkatest.Three, f *fixture, r *clusterRun) {
			tid := kafkaio.TransactionalID(f.name)
			id := th.TxnCoordinator(tid)
			r.killUntilMoved(t, th, id, "transaction coordinator of "+tid, func() int { return th.TxnCoordinator(tid) })
		}},
		{"group-coordinator-killed", apart, func(t *testing.T, th *kafkatest.Three, f *fixture, r *clusterRun) {
			g := kafkaio.CommitGroup(f.name)
			id := th.GroupCoordinator(g)
			r.killUntilMoved(t, th, id, "coordinator of "+g, func() int { return th.GroupCoordinator(g) })
		}},
		{"coordinators-killed", together, func(t *testing.T, th *kafkatest.Three, f *fixture, r *clusterRun) {
			// Both coordinators on the broker killed: the transaction
			// coordinator's move delays the offsets' request to the group
			// coordinator until librdkafka has decommissioned the dead one
			// it cached, and rd_kafka_send_offsets_to_transaction then
			// never returns (librdkafka #5511); kord's producer gives up
			// on it at its deadline (TestTxnCallOutlivingDeadline), and
			// the job recovers.
			g := kafkaio.CommitGroup(f.name)
			id := th.GroupCoordinator(g)
			r.killUntilMoved(t, th, id, "coordinator of "+g, func() int { return th.GroupCoordinator(g) })
		}},
		{"rolling-restart", "", func(t *testing.T, th *kafkatest.Three, f *fixture, r *clusterRun) {
			for id := 1; id <= 3; id++ {
				r.mark("stop node %d (%s)", id, roles(th, f, id))
				th.Stop(id)
				r.waitCommits(t, 3)
				th.Resume(id)
				r.mark("node %d back in sync", id)
			}
		}},
		{"frozen-past-lag", "", func(t *testing.T, th *kafkatest.Three, f *fixture, r *clusterRun) {
			// The leader of an output partition, with the job's producer
			// connected to it: it stays connected to a broker that
			// answers nothing, past replica.lag.time.max.ms (10 s) and
			// the broker session timeout (9 s).
			id := th.Leader(f.out, 0)
			r.mark("freeze node %d (%s)", id, roles(th, f, id))
			th.Freeze(id)
			time.Sleep(15 * time.Second)
			r.mark("thaw node %d", id)
			th.Thaw(id)
			th.Resume(id)
			r.mark("node %d back in sync", id)
		}},
		{"two-down", "", func(t *testing.T, th *kafkatest.Three, f *fixture, r *clusterRun) {
			// Below min.insync.replicas and without a controller quorum:
			// nothing commits until one comes back.
			tid := kafkaio.TransactionalID(f.name)
			a := th.TxnCoordinator(tid)
			b := a%3 + 1
			r.mark("kill nodes %d (%s) and %d (%s)", a, roles(th, f, a), b, roles(th, f, b))
			th.Kill(a)
			th.Kill(b)
			time.Sleep(2 * time.Second) // a commit under way when they died may still land
			before := r.lsoSum()
			time.Sleep(18 * time.Second)
			after := r.lsoSum()
			r.mark("resume node %d", a)
			th.Resume(a)
			r.mark("node %d back in sync; resume node %d", a, b)
			th.Resume(b)
			r.mark("node %d back in sync", b)
			require.Equal(t, before, after, "committed output advanced with two of three brokers down")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			th := kafkatest.ThreeBrokers(t)
			r := startClusterRun(t, th, tc.coordinators)
			r.waitCommits(t, 5)
			tc.fault(t, th, r.f, r)
			r.waitCommits(t, 5)
			r.finish(t)
		})
	}
}

// nameWithCoordinators returns a job name, base with a number appended,
// whose transaction coordinator and commit group coordinator are one broker
// (same) or two. Each is the leader of the partition of its internal topic
// the id hashes to (of 4), so about one name in three has them together;
// right after a fault every leader may sit on the brokers that stayed up,
// until the preferred leaders are elected again (every 10 s on
// scripts/kafka-cluster.sh's brokers), so it tries for up to a minute.
func nameWithCoordinators(t *testing.T, th *kafkatest.Three, base string, same bool) string {
	deadline := time.Now().Add(time.Minute)
	for i := 0; time.Now().Before(deadline); i++ {
		name := fmt.Sprintf("%s.%d", base, i)
		if (th.TxnCoordinator(kafkaio.TransactionalID(name)) == th.GroupCoordinator(kafkaio.CommitGroup(name))) == same {
			return name
		}
		if i%20 == 19 {
			time.Sleep(2 * time.Second)
		}
	}
	t.Fatalf("no job name found within a minute with its coordinators on one broker: %v", same)
	return ""
}

// roles says what node id is to the run: the leader of which of its
// partitions, and whether it coordinates its transactions or its commit
// group. The stall a fault causes depends on it.
func roles(th *kafkatest.Three, f *fixture, id int) string {
	var out []string
	for _, topic := range []struct{ name, t string }{{"in", f.in}, {"out", f.out}} {
		var ps []string
		for p := int32(0); p < f.parts; p++ {
			if th.Leader(topic.t, p) == id {
				ps = append(ps, fmt.Sprint(p))
			}
		}
		if len(ps) > 0 {
			out = append(out, fmt.Sprintf("leads %s[%s]", topic.name, strings.Join(ps, ",")))
		}
	}
	if th.TxnCoordinator(kafkaio.TransactionalID(f.name)) == id {
		out = append(out, "transaction coordinator")
	}
	if th.GroupCoordinator(kafkaio.CommitGroup(f.name)) == id {
		out = append(out, "commit group coordinator")
	}
	if len(out) == 0 {
		return "no role"
	}
	return strings.Join(out, ", ")
}

// envClusterLogs names a directory where each case of
// TestClusterBrokerFaults leaves its job's log, at DEBUG and with
// librdkafka's eos, broker and topic debug contexts: to see what the job
// waited on while its output stalled.
const envClusterLogs = "KORD_CLUSTER_LOGS"

// restartMessage is the engine's log line when it recovers from its last
// committed checkpoint after a failure (the restart strategy applies);
// recoverMessage when it does so at once after a commit whose outcome is
// unknown (keyed.ErrOutcomeUnknown).
const (
	restartMessage = "keyed: restarting from the last committed checkpoint"
	recoverMessage = "keyed: recovering from what the sink recorded"
)

// clusterRun is the job of TestClusterBrokerFaults running in this
// process, its input arriving, and the watch on its committed output.
type clusterRun struct {
	f          *fixture
	j          *keyed.Job
	sink       *kafkaio.Sink[result]
	log        syncbuf.Buffer
	restarts   atomic.Int64 // restartMessage
	recoveries atomic.Int64 // recoverMessage
	commits    atomic.Int64
	stop       context.CancelFunc
	done       chan error

	runErr    error // Run's, once ended
	ended     bool
	stopInput func() error // ends the input and returns its producer's error
	watch     *lsoWatch
	start     time.Time
}

// Where a job's two coordinators are (TestClusterBrokerFaults).
const (
	apart    = "apart"
	together = "together"
)

func startClusterRun(t *testing.T, th *kafkatest.Three, coordinators string) *clusterRun {
	f := newFixture(t, th.Cluster, 3, 60)
	if coordinators != "" {
		f.name = nameWithCoordinators(t, th, f.name, coordinators == together)
	}
	r := &clusterRun{f: f, done: make(chan error, 1), start: time.Now()}
	f.fill(500)
	r.j, _, r.sink = f.build(func(s *jobSpec) {
		level := slog.LevelInfo
		if os.Getenv(envClusterLogs) != "" {
			level = slog.LevelDebug
			s.sinkOpts = append(s.sinkOpts, kafkaio.Set("debug", "eos,broker,topic"))
		}
		s.logger = logTo(&r.log, level, func(msg string, _ map[string]string) {
			switch msg {
			case restartMessage:
				r.restarts.Add(1)
			case recoverMessage:
				r.recoveries.Add(1)
			}
		})
		s.opts = append(s.opts,
			keyed.RestartStrategy(keyed.FixedDelay(20, time.Second)),
			keyed.OnCommit(func(uint64) error { r.commits.Add(1); return nil }))
	})
	ctx, stop := context.WithCancel(context.Background())
	r.stop = stop
	go func() { r.done <- r.j.Run(ctx) }()
	t.Cleanup(func() {
		// After a failure: the job stops (a final checkpoint, within its
		// stop timeout) before the brokers the test left down are
		// resumed. A job that does not stop leaves its goroutines'
		// stacks beside its log.
		dir := os.Getenv(envClusterLogs)
		name := filepath.Join(dir, strings.ReplaceAll(t.Name(), "/", "_"))
		err := r.end(2 * time.Minute)
		if err != nil {
			t.Logf("the job: %v", err)
		}
		if dir != "" {
			_ = os.WriteFile(name+".log", []byte(r.log.String()), 0o644)
		}
		if !r.ended {
			if dir != "" {
				var b bytes.Buffer
				_ = pprof.Lookup("goroutine").WriteTo(&b, 2)
				_ = os.WriteFile(name+".stacks", b.Bytes(), 0o644)
			}
			return // Close only once Run has returned
		}
		_ = r.sink.Close()
	})
	r.watch = watchLSOs(t, f)
	r.stopInput = f.produceUntilStopped(200)
	return r
}

// end stops the job gracefully and returns Run's error, or an error when
// it did not return within d.
func (r *clusterRun) end(d time.Duration) error {
	r.stop()
	if !r.ended {
		select {
		case r.runErr = <-r.done:
			r.ended = true
		case <-time.After(d):
			return fmt.Errorf("the job did not stop within %v", d)
		}
	}
	return r.runErr
}

// mark logs what the fault does, with the time since the run started.
func (r *clusterRun) mark(format string, args ...any) {
	m := fmt.Sprintf("%6.1fs ", time.Since(r.start).Seconds()) + fmt.Sprintf(format, args...)
	r.f.t.Log(m)
}

func (r *clusterRun) lsoSum() int64 { return r.watch.sum() }

// waitCommits waits for n more checkpoints to commit, for at most 3
// minutes, and fails t if the job ends meanwhile.
func (r *clusterRun) waitCommits(t *testing.T, n int64) {
	t.Helper()
	from := r.commits.Load()
	deadline := time.After(3 * time.Minute)
	for r.commits.Load() < from+n {
		select {
		case r.runErr = <-r.done:
			r.ended = true
			t.Fatalf("the job ended: %v\n%s", r.runErr, r.problems())
		case <-deadline:
			t.Fatalf("%d commits in 3 minutes, want %d\n%s", r.commits.Load()-from, n, r.problems())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// killUntilMoved SIGKILLs node id, which is what fn looks up (a leader, a
// coordinator), waits until fn names another node and the job committed
// three more checkpoints, and resumes it.
func (r *clusterRun) killUntilMoved(t *testing.T, th *kafkatest.Three, id int, what string, fn func() int) {
	t.Helper()
	r.mark("kill node %d (%s; %s)", id, what, roles(th, r.f, id))
	th.Kill(id)
	var now int
	require.Eventually(t, func() bool { now = fn(); return now != id }, time.Minute, 500*time.Millisecond, "%s stayed on node %d", what, id)
	r.mark("node %d is now the %s", now, what)
	r.waitCommits(t, 3)
	r.mark("resume node %d", id)
	th.Resume(id)
	r.mark("node %d back in sync", id)
}

// finish ends the input, waits for every result to be committed, stops
// the job gracefully, logs the stall and the recoveries, and checks the
// output with the independent read_committed check.
func (r *clusterRun) finish(t *testing.T) {
	t.Helper()
	require.NoError(t, r.stopInput())
	inputEnd := time.Now()
	if n := len(r.f.c.ReadAll(t, r.f.out, r.f.expected(), true, 3*time.Minute)); n < r.f.expected() {
		t.Logf("%d of %d results visible to read_committed readers after 3 minutes\n%s", n, r.f.expected(), r.problems())
	}
	require.NoError(t, r.end(2*time.Minute), "the job failed\n%s", r.problems())
	require.NoError(t, r.sink.Close())
	stall, from := r.watch.end(inputEnd)
	t.Logf("%d events; committed output stalled at most %v (from %.1fs) while input arrived; recovered from the last committed checkpoint %d times after a failure, %d after an unknown commit outcome; %d commits",
		r.f.total(), stall.Round(100*time.Millisecond), from.Sub(r.start).Seconds(), r.restarts.Load(), r.recoveries.Load(), r.commits.Load())
	if r.restarts.Load()+r.recoveries.Load() > 0 {
		t.Logf("the job's warnings and errors:\n%s", r.problems())
	}
	r.f.verify()
	r.deleteTopics(t)
}

// deleteTopics deletes the run's topics once it passed, so that the
// brokers' restarts and rejoins in the cases after it do not grow with
// every partition a case before left (a broker loads them all).
func (r *clusterRun) deleteTopics(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req := kmsg.NewPtrDeleteTopicsRequest()
	req.TopicNames = []string{r.f.in, r.f.out}
	for _, name := range req.TopicNames {
		rt := kmsg.NewDeleteTopicsRequestTopic()
		rt.Topic = kmsg.StringPtr(name)
		req.Topics = append(req.Topics, rt)
	}
	req.TimeoutMillis = 30000
	if _, err := req.RequestWith(ctx, r.f.admin()); err != nil {
		t.Logf("delete topics %v: %v", req.TopicNames, err)
	}
}

// produceUntilStopped produces events at rate a second, in batches of two
// seconds' worth, until the returned function is called; that function
// waits for the batch under way and returns the first error.
func (f *fixture) produceUntilStopped(rate int) func() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	f.t.Cleanup(cancel)
	var stopped atomic.Bool
	errc := make(chan error, 1)
	go func() {
		for !stopped.Load() {
			if err := f.produce(ctx, 2*rate, rate); err != nil {
				errc <- err
				return
			}
		}
		errc <- nil
	}()
	return func() error {
		stopped.Store(true)
		return <-errc
	}
}

// lsoWatch polls the output's last stable offsets every 100 ms and keeps
// when their sum advanced. It asks each partition's leader on its own
// (RequestSharded), so a partition whose leader is dead or frozen does not
// hide the others' progress, with a client of its own that refreshes
// metadata at most 250 ms apart (kgo's default, 5 s, showed a moved leader
// late and stretched the stalls it measured).
type lsoWatch struct {
	cancel context.CancelFunc
	done   chan struct{}

	mu       sync.Mutex
	lso      map[int32]int64 // the highest seen per partition
	last     int64
	advances []time.Time
}

func watchLSOs(t *testing.T, f *fixture) *lsoWatch {
	cl := f.c.Client(t, kgo.MetadataMinAge(250*time.Millisecond))
	ctx, cancel := context.WithCancel(context.Background())
	w := &lsoWatch{cancel: cancel, done: make(chan struct{}), lso: map[int32]int64{}}
	t.Cleanup(w.stop)
	go func() {
		defer close(w.done)
		for ctx.Err() == nil {
			req := kmsg.NewPtrListOffsetsRequest()
			req.IsolationLevel = 1
			rt := kmsg.NewListOffsetsRequestTopic()
			rt.Topic = f.out
			for p := int32(0); p < f.parts; p++ {
				rp := kmsg.NewListOffsetsRequestTopicPartition()
				rp.Partition, rp.Timestamp = p, -1
				rt.Partitions = append(rt.Partitions, rp)
			}
			req.Topics = append(req.Topics, rt)
			// Bounded by 2 s: a frozen leader answers nothing.
			pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
			shards := cl.RequestSharded(pctx, req)
			pcancel()
			w.mu.Lock()
			for _, sh := range shards {
				if sh.Err != nil {
					continue
				}
				for _, t := range sh.Resp.(*kmsg.ListOffsetsResponse).Topics {
					for _, p := range t.Partitions {
						if p.ErrorCode == 0 && p.Offset > w.lso[p.Partition] {
							w.lso[p.Partition] = p.Offset
						}
					}
				}
			}
			var sum int64
			for _, o := range w.lso {
				sum += o
			}
			if sum > w.last {
				w.last = sum
				w.advances = append(w.advances, time.Now())
			}
			w.mu.Unlock()
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	return w
}

func (w *lsoWatch) stop() {
	w.cancel()
	<-w.done
}

func (w *lsoWatch) sum() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.last
}

// end stops the watch and returns the longest gap between two advances
// of the committed output, of those that began before inputEnd (from the
// first advance on, so the job's start does not count), and when it
// began.
func (w *lsoWatch) end(inputEnd time.Time) (longest time.Duration, from time.Time) {
	w.stop()
	w.mu.Lock()
	defer w.mu.Unlock()
	for i := 1; i < len(w.advances); i++ {
		a, b := w.advances[i-1], w.advances[i]
		if a.After(inputEnd) {
			break
		}
		if d := b.Sub(a); d > longest {
			longest, from = d, a
		}
	}
	return longest, from
}

// problems returns the job's log lines at WARN or ERROR, for a failure's
// message.
func (r *clusterRun) problems() string {
	var b strings.Builder
	for _, l := range strings.Split(r.log.String(), "\n") {
		if strings.Contains(l, "level=WARN") || strings.Contains(l, "level=ERROR") {
			b.WriteString(l)
			b.WriteByte('\n')
		}
	}
	return b.String()
}
