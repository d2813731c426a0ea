//go:build kordfailpoints

package kafkaio_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kordproject/kord/internal/failpoint"
	"github.com/kordproject/kord/internal/rig/faultproxy"
	"github.com/kordproject/kord/internal/rig/kafkatest"
	"github.com/kordproject/kord/internal/rig/syncbuf"
	"github.com/kordproject/kord/kafkaio"
	"github.com/kordproject/kord/keyed"
)

// Real network faults between a job and the real broker: the job reaches
// the broker only through a fault-injecting proxy (internal/rig/faultproxy) on
// the broker's proxied listener, which delays, drops or cuts chosen
// requests and replies. Input and the independent read_committed verifier
// go to the broker directly. Each scenario ends with the verifier: nothing
// lost, nothing duplicated, per-key order kept, no transaction left open.

// netFault is one scenario: after the job's commits-th commit, inject adds
// the proxy's rule; the job must then recover (log "recovering from what
// the sink recorded") at least wantRecoveries times.
type netFault struct {
	commits        int64
	inject         func(p *faultproxy.Proxy) *faultproxy.Fired
	wantRecoveries int
	// settings are the sink's ProducerSettings.
	settings map[string]string
	// broken: the protocol is broken on purpose (kafkaio.Break*); the
	// verifier must find what went wrong instead of passing.
	broken bool
	// events is how many input events arrive, 1,000 a second (default
	// 20,000): input must still arrive when the fault completes.
	events int
}

// runNetFault runs the job through the proxy while input arrives, injects
// the fault after the commits-th commit, and, once the fault has done its
// work (a held request delivered, say), crashes the job before its next
// commit and starts it again: damage that a later transaction would mend,
// such as a transaction committed half-written, then shows in the output.
// Finally it verifies the output.
func runNetFault(t *testing.T, nf netFault) {
	c := kafkatest.Broker(t)
	p := kafkatest.StartProxy(t)
	f := newFixture(t, c, 6, 200)
	// Transactions open for most of each second, so that a request landing
	// late most likely finds one open.
	f.interval = time.Second
	if nf.events == 0 {
		nf.events = 20_000
	}
	prodErr := f.produceInBackground(nf.events, 1_000, 2*time.Minute)
	var out syncbuf.Buffer
	var recoveries atomic.Int64
	log := logTo(&out, slog.LevelInfo, func(msg string, _ map[string]string) {
		if msg == "keyed: recovering from what the sink recorded" {
			recoveries.Add(1)
		}
	})
	build := func() (*keyed.Job, *kafkaio.Sink[result]) {
		j, _, sink := f.build(func(s *jobSpec) {
			s.brokers, s.logger = p.Addr(), log
			for k, v := range nf.settings {
				s.sinkOpts = append(s.sinkOpts, kafkaio.Set(k, v))
			}
			// Commits give up after 3 s (the commit call's deadline is the
			// checkpoint timeout): faults are made longer than that.
			s.opts = []keyed.Opt{keyed.CheckpointTimeout(3 * time.Second), keyed.RestartStrategy(keyed.FixedDelay(5, 500*time.Millisecond))}
		})
		return j, sink
	}
	var commits atomic.Int64
	var crashed atomic.Bool
	injected := make(chan *faultproxy.Fired, 1)
	var fired atomic.Pointer[faultproxy.Fired]
	hook := func(point string) error {
		switch point {
		case failpoint.AfterCommit:
			if commits.Add(1) == nf.commits {
				fd := nf.inject(p)
				fired.Store(fd)
				injected <- fd
			}
		case failpoint.BeforeCommit:
			if fd := fired.Load(); fd != nil && !fd.DoneAt().IsZero() && crashed.CompareAndSwap(false, true) {
				return fmt.Errorf("crash after the fault completed")
			}
		}
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	var sinks []*kafkaio.Sink[result]
	var mu sync.Mutex
	go func() {
		for {
			j, sink := build()
			mu.Lock()
			sinks = append(sinks, sink)
			mu.Unlock()
			err := j.Run(failpoint.WithHook(rctx, hook))
			if !errors.Is(err, failpoint.ErrCrashed) {
				done <- err
				return
			}
			t.Logf("crashed on purpose after the fault: %v", err)
		}
	}()
	var fd *faultproxy.Fired
	select {
	case fd = <-injected:
	case err := <-done:
		t.Fatalf("the job ended before the fault was injected: %v\n%s", err, &out)
	case <-ctx.Done():
		t.Fatalf("no commit %d\n%s", nf.commits, &out)
	}
	select {
	case <-fd.C():
		t.Logf("fault %v fired at %v", fd.Rule().Action, fd.At().Format("15:04:05.000"))
	case err := <-done:
		t.Fatalf("the job ended before the fault fired: %v\n%s", err, &out)
	case <-time.After(time.Minute):
		t.Fatalf("the fault never fired\n%s", &out)
	}
	recs := f.c.ReadAll(t, f.out, f.expected(), true, 2*time.Minute)
	require.NoError(t, <-prodErr)
	<-fd.Done()
	t.Logf("fault done at %v (%v)", fd.DoneAt().Format("15:04:05.000"), fd.Err())
	stop()
	runErr := <-done
	mu.Lock()
	for _, s := range sinks {
		_ = s.Close()
	}
	mu.Unlock()
	require.True(t, crashed.Load(), "the job was not crashed after the fault: the fault completed too late\n%s", &out)
	if nf.broken {
		problems := f.check()
		t.Logf("with the protocol broken: Run returned %v; the verifier found:\n%s", runErr, strings.Join(problems, "\n"))
		require.NotEmpty(t, problems, "the protocol was broken but the output looks exactly-once: this test would not catch the breakage\n%s", &out)
		return
	}
	require.NoError(t, runErr, "%s", &out)
	require.Equal(t, f.expected(), len(recs), "%s", &out)
	t.Logf("recoveries: %d", recoveries.Load())
	require.GreaterOrEqual(t, recoveries.Load(), int64(nf.wantRecoveries), "recoveries\n%s", &out)
	if testing.Verbose() {
		for _, l := range strings.Split(out.String(), "\n") {
			if strings.Contains(l, "WARN") || strings.Contains(l, "recover") {
				t.Log(l)
			}
		}
	}
	f.verify()
}

// TestNetDelayedCommitRequest: the EndTxn that commits a checkpoint is held
// by the network for 8 s, past the commit's 3 s deadline, and then still
// reaches the broker ("lands late", after its producer gave up): the
// Jepsen 2024 scenario that DESIGN.md's "new producer on any unknown
// outcome" rule answers. The job ends that producer; the new one's
// InitTransactions bumps the epoch, so the late commit is fenced.
func TestNetDelayedCommitRequest(t *testing.T) {
	runNetFault(t, netFault{commits: 3, wantRecoveries: 1, inject: func(p *faultproxy.Proxy) *faultproxy.Fired {
		return p.Add(faultproxy.Rule{API: faultproxy.EndTxn, Match: faultproxy.IsCommit, Action: faultproxy.DelayRequest(8 * time.Second)})
	}})
}

// TestNetDelayedCommitResponse: the commit reaches the broker and commits,
// but its answer is held 8 s, past the commit's 3 s deadline. The job ends
// the producer; the new one's InitTransactions sees the commit done, and
// the job restores the checkpoint it recorded.
func TestNetDelayedCommitResponse(t *testing.T) {
	runNetFault(t, netFault{commits: 3, wantRecoveries: 1, inject: func(p *faultproxy.Proxy) *faultproxy.Fired {
		return p.Add(faultproxy.Rule{API: faultproxy.EndTxn, Match: faultproxy.IsCommit, Action: faultproxy.DelayResponse(8 * time.Second)})
	}})
}

// TestNetLostAbort: the sink takes the abort path (failpoint.ForceAbort,
// as after an abortable error) and the abort's answer never comes: its
// outcome is unknown. The job ends the producer without beginning another
// transaction on it; the new producer's InitTransactions settles the
// abort.
func TestNetLostAbort(t *testing.T) {
	t.Cleanup(func() { _ = failpoint.Set("") })
	runNetFault(t, netFault{commits: 3, wantRecoveries: 1, inject: func(p *faultproxy.Proxy) *faultproxy.Fired {
		if err := failpoint.Set(failpoint.ForceAbort); err != nil {
			t.Error(err)
		}
		return p.Add(faultproxy.Rule{API: faultproxy.EndTxn, Match: faultproxy.IsAbort, Action: faultproxy.DropResponse()})
	}})
}

// TestNetSendOffsetsCut: the connection carrying the checkpoint's offsets
// (TxnOffsetCommit) is cut after the request went out: the broker has it,
// the producer never hears back. librdkafka sends it again on a new
// connection (or the commit fails and the job recovers); either way the
// output stays exactly-once.
func TestNetSendOffsetsCut(t *testing.T) {
	runNetFault(t, netFault{commits: 3, inject: func(p *faultproxy.Proxy) *faultproxy.Fired {
		return p.Add(faultproxy.Rule{API: faultproxy.TxnOffsetCommit, Action: faultproxy.CutAfterRequest()})
	}})
}

// TestNetRetrySameProducerBreaks: the same delayed commit, with the sink
// broken on purpose to retry a failed commit on the same producer (and go
// on with it) instead of ending the producer. The held EndTxn (12 s) is
// longer than librdkafka's request timeout (socket.timeout.ms, set to 6 s:
// above the 3 s commit deadline, as the sink requires, and well below the
// 15 s transaction timeout, so that the broker does not abort the
// transaction first and fence the producer), so librdkafka sends it again
// itself, the retry succeeds, the sink begins the next transactions on the
// same producer epoch, and the first EndTxn lands late on one of them: the
// verifier must find the damage.
func TestNetRetrySameProducerBreaks(t *testing.T) {
	kafkaio.BreakRetrySameProducer(true)
	t.Cleanup(func() { kafkaio.BreakRetrySameProducer(false) })
	runNetFault(t, netFault{commits: 3, broken: true, events: 30_000, settings: map[string]string{"socket.timeout.ms": "6000"},
		inject: func(p *faultproxy.Proxy) *faultproxy.Fired {
			return p.Add(faultproxy.Rule{API: faultproxy.EndTxn, Match: faultproxy.IsCommit, Action: faultproxy.DelayRequest(12 * time.Second)})
		}})
}

// TestNetSocketGuardBreaks: the sink's own guard broken on purpose: with
// socket.timeout.ms (2 s) below the commit deadline (3 s), librdkafka times
// out a delayed EndTxn and sends it again itself within the commit call,
// which then succeeds; the sink never learns the outcome was in doubt, goes
// on with the producer, and the first EndTxn lands late on a later
// transaction. The verifier must find the damage. (Without the break the
// sink refuses such a setting: TestSinkRefusesDerivedSettings.)
func TestNetSocketGuardBreaks(t *testing.T) {
	kafkaio.BreakSocketGuard(true)
	t.Cleanup(func() { kafkaio.BreakSocketGuard(false) })
	runNetFault(t, netFault{commits: 3, broken: true, settings: map[string]string{"socket.timeout.ms": "2000"},
		inject: func(p *faultproxy.Proxy) *faultproxy.Fired {
			return p.Add(faultproxy.Rule{API: faultproxy.EndTxn, Match: faultproxy.IsCommit, Action: faultproxy.DelayRequest(5 * time.Second)})
		}})
}

// TestBrokerRestart: the broker (one of this test's own, started by
// scripts/kafka.sh) is stopped and started again while the job runs and
// input arrives, then killed with SIGKILL and started again. The job's clients lose their connections, its commits
// fail or wait, and it restarts or recovers as often as needed; once the
// broker is back, every result is there exactly once.
func TestBrokerRestart(t *testing.T) {
	b := kafkatest.OwnBroker(t)
	f := newFixture(t, b.Cluster(), 6, 200)
	prodErr := f.produceInBackground(40_000, 1_000, 3*time.Minute)
	var out syncbuf.Buffer
	j, _, sink := f.build(func(s *jobSpec) {
		s.logger = logTo(&out, slog.LevelInfo, nil)
		s.opts = []keyed.Opt{keyed.CheckpointTimeout(10 * time.Second), keyed.RestartStrategy(keyed.FixedDelay(20, time.Second))}
	})
	var commits atomic.Int64
	hook := func(point string) error {
		if point == failpoint.AfterCommit {
			commits.Add(1)
		}
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- j.Run(failpoint.WithHook(rctx, hook)) }()
	require.Eventually(t, func() bool { return commits.Load() >= 3 }, time.Minute, 10*time.Millisecond, "%s", &out)
	before := commits.Load()
	t.Logf("restarting the broker after %d commits", before)
	b.Restart(t)
	require.Eventually(t, func() bool { return commits.Load() >= before+3 }, 2*time.Minute, 10*time.Millisecond, "%s", &out)
	before = commits.Load()
	t.Logf("killing (SIGKILL) and starting the broker after %d commits", before)
	b.Kill(t)
	time.Sleep(2 * time.Second)
	b.Start(t)
	recs := f.c.ReadAll(t, f.out, f.expected(), true, 3*time.Minute)
	require.NoError(t, <-prodErr, "the input producer's log:\n%s", &f.prodLog)
	if len(recs) != f.expected() {
		// Tell a job that stalled from a reader that did: Kafka's own
		// offsets say whether the job consumed and committed everything.
		report, done := f.diagnose()
		if !done {
			// A SIGKILLed broker can come back with a transaction it no
			// longer tracks, holding back read_committed readers and the
			// commit group's stable offsets for good (a hanging
			// transaction). No client can end it; an operator aborts it
			// (kafka-transactions.sh find-hanging, abort). Do that, then
			// the job must finish and be exactly-once.
			hung, aborted := f.abortHanging()
			if aborted == 0 {
				t.Fatalf("%d results for %d events; the job did not finish:\n%s\ntransactions:\n%s\nthe job's log:\n%s", len(recs), f.expected(), report, hung, &out)
			}
			t.Logf("the job did not finish:\n%s\nthe broker left hanging transactions; aborted %d:\n%s", report, aborted, hung)
			recs = f.c.ReadAll(t, f.out, f.expected(), true, 2*time.Minute)
			if report, done = f.diagnose(); !done {
				t.Fatalf("%d results for %d events; the job did not finish after the hanging transactions were aborted:\n%s\nthe job's log:\n%s", len(recs), f.expected(), report, &out)
			}
		}
		if len(recs) != f.expected() {
			t.Logf("the reader saw %d results for %d events, but the job finished (the check reads again):\n%s", len(recs), f.expected(), report)
		}
	}
	stop()
	require.NoError(t, <-done, "%s", &out)
	require.NoError(t, sink.Close())
	require.Greater(t, commits.Load(), before, "no commit after the broker came back")
	t.Logf("commits: %d; restarts: %d; recoveries: %d", commits.Load(),
		strings.Count(out.String(), "restarting from the last committed checkpoint"), strings.Count(out.String(), "recovering from what the sink recorded"))
	f.verify()
}

// TestAbortHangingSparesLive: abortHanging, which TestBrokerRestart uses
// to end transactions a SIGKILLed broker left hanging, aborts nothing of a
// live job: its open transaction belongs to the producer the coordinator
// has ongoing. The output stays exactly-once.
func TestAbortHangingSparesLive(t *testing.T) {
	c := kafkatest.Broker(t)
	f := newFixture(t, c, 3, 100)
	prodErr := f.produceInBackground(6_000, 1_000, time.Minute)
	var out syncbuf.Buffer
	j, _, sink := f.build(func(s *jobSpec) { s.logger = logTo(&out, slog.LevelInfo, nil) })
	var commits atomic.Int64
	hook := func(point string) error {
		if point == failpoint.AfterCommit {
			commits.Add(1)
		}
		return nil
	}
	rctx, stop := context.WithCancel(context.Background())
	defer stop()
	done := make(chan error, 1)
	go func() { done <- j.Run(failpoint.WithHook(rctx, hook)) }()
	require.Eventually(t, func() bool { return commits.Load() >= 3 }, time.Minute, 10*time.Millisecond, "%s", &out)
	// Until the helper sees the job's open transaction. Between a commit
	// and the next record there is none, and the input comes in bursts
	// (100 records every 100 ms) that an idle source's poll may meet just
	// before a barrier, which then commits them at once: try for a while,
	// not a number of times.
	var report string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline) && !strings.Contains(report, "open transaction"); time.Sleep(5 * time.Millisecond) {
		var aborted int
		report, aborted = f.abortHanging()
		require.Zero(t, aborted, "a live transaction was taken for a hanging one:\n%s", report)
	}
	t.Logf("mid-run:\n%s", report)
	require.Contains(t, report, "open transaction", "the helper never saw the job's open transaction")
	require.Contains(t, report, "coordinator: "+kafkaio.TransactionalID(f.name))
	require.NoError(t, <-prodErr)
	recs := f.c.ReadAll(t, f.out, f.expected(), true, 2*time.Minute)
	stop()
	require.NoError(t, <-done, "%s", &out)
	require.NoError(t, sink.Close())
	require.Equal(t, f.expected(), len(recs))
	f.verify()
}
