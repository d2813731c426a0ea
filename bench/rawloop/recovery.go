package main

// (j) engine recovery: the keyed engine job of engine.go runs in a child
// process (this binary, re-executed with childEnv set) on a paced input; the
// parent SIGKILLs it mid-run, restarts it at once on the same checkpoint
// directory, and times the SIGKILL to the first committed output of an
// input produced after the kill, as a read_committed reader of the output
// sees it. The input starts with one record for each of its keys, and the
// first kill waits until a checkpoint covers them: every restart restores
// that many keys.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kordproject/kord/kafkaio"
)

// childEnv, set to childEngine, makes this binary run one incarnation of
// the engine job (settings in the RAWLOOP_JOB_* environment) instead of the
// benchmark.
const (
	childEnv    = "RAWLOOP_CHILD"
	childEngine = "engine"
)

// RecoverySample is one SIGKILL and restart; times are ms after the
// SIGKILL.
type RecoverySample struct {
	// SinceCommitMs: how long before the SIGKILL the killed incarnation
	// had committed its last checkpoint (the phase of the kill).
	SinceCommitMs float64 `json:"since_commit_ms"`
	// StartMs: the restarted process is in main.
	StartMs float64 `json:"start_ms"`
	// RecoveryMs: the job took its recovery decision (after
	// InitTransactions fenced the killed incarnation and aborted its open
	// transaction, and the commit group was read): it passes its
	// during-restore failure point.
	RecoveryMs float64 `json:"recovery_ms"`
	// RunningMs: every operator task has restored its key groups and
	// processed a record.
	RunningMs float64 `json:"running_ms"`
	// FirstCommitMs: the restarted job's first checkpoint committed (its
	// after-commit failure point).
	FirstCommitMs float64 `json:"first_commit_ms"`
	// FirstNewMs: the first output record whose input was produced after
	// the SIGKILL reached a read_committed reader of the output.
	FirstNewMs float64 `json:"first_new_ms"`
}

// RecoveryResult is figure (j).
type RecoveryResult struct {
	Job string `json:"job"` // "keyed"
	// StateKeys: the distinct keys of the input, all in the job's state
	// from before the first kill on.
	StateKeys      int              `json:"state_keys,omitempty"`
	Input          string           `json:"input"`
	Output         string           `json:"output"`
	Rate           float64          `json:"rate"`
	AchievedRate   float64          `json:"achieved_rate"`
	Produced       int64            `json:"produced"`
	CommitInterval string           `json:"commit_interval"`
	Samples        []RecoverySample `json:"samples"`
	// Recovery: SIGKILL to the first new committed output (FirstNewMs).
	Recovery    DurationStats `json:"recovery"`
	ToRecovery  DurationStats `json:"to_recovery_decision"`
	ToRunning   DurationStats `json:"to_running"`
	FirstCommit DurationStats `json:"to_first_commit"`
	// Verified checks the output of every incarnation together: exactly
	// one committed output per input despite the kills.
	Verified *VerifyResult `json:"verified,omitempty"`
}

type recoveryRun struct {
	// The job's tasks per stage and its keying.
	parallelism int
	keyBy       bool
	brokers     string
	name        string
	input       string
	output      string
	partitions  int
	valueBytes  int
	interval    time.Duration
	rate        float64
	// keys key the input, a pool of users keys: the input starts with one
	// record for each (written before the first incarnation starts), and
	// the paced input begins once a checkpoint covers them.
	keys  keySource
	users int
	kills int
	// killAfter: each incarnation runs this long after its first commit
	// (plus a random part of one interval) before it is killed.
	killAfter time.Duration
	timeout   time.Duration // bounds each wait
	logf      func(string, ...any)
}

// childProc is one incarnation of the job.
type childProc struct {
	cmd  *exec.Cmd
	done chan error

	mu        sync.Mutex
	start     time.Time
	recovery  time.Time
	running   time.Time
	commits   int
	firstCmt  time.Time
	lastCmt   time.Time
	lastLines []string
}

func (c *childProc) times() (start, recovery, running, firstCmt, lastCmt time.Time, commits int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.start, c.recovery, c.running, c.firstCmt, c.lastCmt, c.commits
}

func (r recoveryRun) startChild(dir string) (*childProc, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(),
		childEnv+"="+childEngine,
		"RAWLOOP_JOB_PARALLELISM="+strconv.Itoa(r.parallelism), "RAWLOOP_JOB_KEYBY="+strconv.FormatBool(r.keyBy),
		"RAWLOOP_JOB_NAME="+r.name, "RAWLOOP_JOB_BROKERS="+r.brokers,
		"RAWLOOP_JOB_INPUT="+r.input, "RAWLOOP_JOB_OUTPUT="+r.output, "RAWLOOP_JOB_DIR="+dir,
		"RAWLOOP_JOB_INTERVAL="+r.interval.String(),
		"RAWLOOP_JOB_PARTITIONS="+strconv.Itoa(r.partitions),
		"RAWLOOP_JOB_VALUE_BYTES="+strconv.Itoa(r.valueBytes),
		"RAWLOOP_JOB_PRODUCER_CONF="+joinConf(extra.producer),
		"RAWLOOP_JOB_CONSUMER_CONF="+joinConf(extra.consumer))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	c := &childProc{cmd: cmd, done: make(chan error, 1)}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	lines := make(chan struct{})
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) < 2 {
				continue
			}
			ns, err := strconv.ParseInt(f[len(f)-1], 10, 64)
			if err != nil {
				continue
			}
			at := time.Unix(0, ns)
			c.mu.Lock()
			switch f[0] {
			case "start":
				c.start = at
			case "recovery":
				c.recovery = at
			case "running":
				c.running = at
			case "committed":
				c.commits++
				if c.firstCmt.IsZero() {
					c.firstCmt = at
				}
				c.lastCmt = at
			}
			c.lastLines = append(c.lastLines, sc.Text())
			if len(c.lastLines) > 20 {
				c.lastLines = c.lastLines[1:]
			}
			c.mu.Unlock()
		}
	}()
	go func() {
		<-lines // Wait closes the pipe: read it all first
		c.done <- cmd.Wait()
	}()
	return c, nil
}

func joinConf(m map[string]string) string {
	var parts []string
	for k, v := range m {
		parts = append(parts, k+"="+v)
	}
	return strings.Join(parts, ",")
}

// waitFor polls cond every 5 ms until it holds, the child exits, or
// timeout.
func (r recoveryRun) waitFor(ctx context.Context, c *childProc, what string, cond func() bool) error {
	deadline := time.Now().Add(r.timeout)
	for !cond() {
		select {
		case err := <-c.done:
			c.done <- err
			c.mu.Lock()
			defer c.mu.Unlock()
			return fmt.Errorf("waiting for %s: child exited (%v); its last output:\n%s", what, err, strings.Join(c.lastLines, "\n"))
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, context.Cause(ctx))
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("waiting for %s: not within %s", what, r.timeout)
		}
	}
	return nil
}

func (r recoveryRun) run(ctx context.Context) (RecoveryResult, error) {
	res := RecoveryResult{Job: "keyed", StateKeys: r.users, Input: r.input, Output: r.output, Rate: r.rate, CommitInterval: r.interval.String()}
	if r.kills < 1 || r.rate <= 0 || r.users < 1 {
		return res, fmt.Errorf("recovery: want at least 1 kill, a rate > 0 and 1 key, got %d, %g, %d", r.kills, r.rate, r.users)
	}
	dir, err := os.MkdirTemp("", "rawloop-engine-recovery-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)

	var (
		target atomic.Int64
		// cur is the latest SIGKILL (nil before the first) and the arrival
		// of the first output of an input produced after it: one value, so
		// that the reader never pairs an arrival with an older kill.
		cur       atomic.Pointer[killMark]
		check     = newOutputCheck(r.partitions, true)
		readReady = make(chan struct{})
		readDone  = make(chan error, 1)
		stopProd  = make(chan struct{})
		prodDone  = make(chan prodResult, 1)
	)
	target.Store(-1)
	go func() {
		rd := reader{brokers: r.brokers, group: r.name + ".reader", topic: r.output,
			partitions: r.partitions, want: target.Load, ready: readReady}
		_, err := rd.readAll(ctx, func(m *kafka.Message) error {
			now := time.Now().UnixNano()
			f, err := check.add(m)
			if err != nil {
				return err
			}
			if k := cur.Load(); k != nil && f.producedAtNs > k.at && now >= k.at {
				k.firstNew.CompareAndSwap(0, now)
			}
			return nil
		})
		readDone <- err
	}()
	select {
	case <-readReady:
	case err := <-readDone:
		return res, fmt.Errorf("recovery: output reader: %w", err)
	}
	prefix := int64(r.users)
	if _, err := produceN(ctx, r.brokers, r.input, prefix, r.valueBytes, r.keys); err != nil {
		return res, fmt.Errorf("recovery: one record per key: %w", err)
	}

	c, err := r.startChild(dir)
	if err != nil {
		return res, err
	}
	children := []*childProc{c}
	defer func() {
		for _, c := range children {
			_ = c.cmd.Process.Kill()
		}
	}()
	if err := r.waitFor(ctx, c, "the first incarnation to run", func() bool { _, _, run, _, _, _ := c.times(); return !run.IsZero() }); err != nil {
		return res, fmt.Errorf("recovery: %w", err)
	}
	if err := r.waitCovered(ctx, c, prefix); err != nil {
		return res, fmt.Errorf("recovery: %w", err)
	}
	prodStart := time.Now()
	go func() {
		n, err := producePaced(ctx, r.brokers, r.input, r.rate, 0, stopProd, r.valueBytes, r.keys)
		if err == nil {
			target.Store(prefix + n)
		}
		prodDone <- prodResult{n: n, rate: float64(n) / time.Since(prodStart).Seconds(), err: err}
	}()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))

	var recs, toRec, toRun, toCmt []time.Duration
	for k := 1; k <= r.kills; k++ {
		// Let the incarnation commit, then run a while.
		if err := r.waitFor(ctx, c, "a committed checkpoint", func() bool { _, _, _, _, _, n := c.times(); return n >= 1 }); err != nil {
			return res, fmt.Errorf("recovery: kill %d: %w", k, err)
		}
		// The first incarnation may have committed before the paced input
		// began (its first records were the per-key prefix).
		_, _, _, first, _, _ := c.times()
		first = later(first, prodStart)
		wait := time.Until(first.Add(r.killAfter + time.Duration(rng.Int64N(int64(r.interval)))))
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return res, context.Cause(ctx)
		case p := <-prodDone:
			return res, fmt.Errorf("recovery: producer stopped: %v", p.err)
		}
		kill := time.Now()
		mark := &killMark{at: kill.UnixNano()}
		cur.Store(mark)
		if err := c.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			return res, fmt.Errorf("recovery: SIGKILL: %w", err)
		}
		werr := <-c.done
		var ee *exec.ExitError
		if !errors.As(werr, &ee) || !ee.Sys().(syscall.WaitStatus).Signaled() {
			return res, fmt.Errorf("recovery: kill %d: the child had exited on its own before the SIGKILL: %v", k, werr)
		}
		_, _, _, _, last, _ := c.times()
		if c, err = r.startChild(dir); err != nil {
			return res, err
		}
		children = append(children, c)
		if err := r.waitFor(ctx, c, "the first new output", func() bool { return mark.firstNew.Load() != 0 }); err != nil {
			return res, fmt.Errorf("recovery: kill %d: %w", k, err)
		}
		// The child's first commit may be reported a moment after the reader
		// saw its output.
		_ = r.waitFor(ctx, c, "the restarted job's first commit", func() bool { _, _, _, f, _, _ := c.times(); return !f.IsZero() })
		start, decided, running, firstCmt, _, _ := c.times()
		since := func(t time.Time) float64 {
			if t.IsZero() {
				return -1
			}
			return ms(t.Sub(kill))
		}
		s := RecoverySample{
			SinceCommitMs: ms(kill.Sub(last)), StartMs: since(start), RecoveryMs: since(decided),
			RunningMs: since(running), FirstCommitMs: since(firstCmt),
			FirstNewMs: ms(time.Duration(mark.firstNew.Load() - kill.UnixNano())),
		}
		res.Samples = append(res.Samples, s)
		recs = append(recs, time.Duration(mark.firstNew.Load()-kill.UnixNano()))
		toRec = append(toRec, decided.Sub(kill))
		toRun = append(toRun, running.Sub(kill))
		toCmt = append(toCmt, firstCmt.Sub(kill))
		if r.logf != nil {
			r.logf("(j) kill %d (%.0fms after a commit): restarted process up %.0fms, recovery decided %.0fms, running %.0fms, first commit %.0fms, first new output visible %.0fms",
				k, s.SinceCommitMs, s.StartMs, s.RecoveryMs, s.RunningMs, s.FirstCommitMs, s.FirstNewMs)
		}
	}
	res.Recovery = durationStats(recs)
	res.ToRecovery = durationStats(toRec)
	res.ToRunning = durationStats(toRun)
	res.FirstCommit = durationStats(toCmt)

	// Run on a little, stop the input, let the last incarnation finish the
	// output, stop it gracefully, and check every incarnation's output
	// together.
	select {
	case <-time.After(r.killAfter):
	case <-ctx.Done():
		return res, context.Cause(ctx)
	}
	close(stopProd)
	p := <-prodDone
	res.Produced, res.AchievedRate = prefix+p.n, p.rate
	if p.err != nil {
		return res, fmt.Errorf("recovery: paced producer: %w", p.err)
	}
	select {
	case err := <-readDone:
		if err != nil {
			return res, fmt.Errorf("recovery: output reader: %w", err)
		}
	case <-time.After(r.timeout):
		return res, fmt.Errorf("recovery: output not complete %s after the input stopped", r.timeout)
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-c.done:
		c.done <- err
		if err != nil {
			return res, fmt.Errorf("recovery: last incarnation's graceful stop: %v", err)
		}
	case <-time.After(r.timeout):
		return res, fmt.Errorf("recovery: last incarnation did not stop within %s", r.timeout)
	}
	v, err := check.result(r.output, res.Produced)
	res.Verified = &v
	if err != nil {
		return res, fmt.Errorf("recovery: %w", err)
	}
	return res, nil
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// waitCovered waits until the job's commit group covers the first n
// records of the input, reading the group after each commit of c; the
// input holds no more than them yet.
func (r recoveryRun) waitCovered(ctx context.Context, c *childProc, n int64) error {
	q, err := kafka.NewConsumer(consumerConfig(r.brokers, kafkaio.CommitGroup(r.name)))
	if err != nil {
		return fmt.Errorf("commit group reader: %w", err)
	}
	defer q.Close()
	seen := 0
	var qerr error
	err = r.waitFor(ctx, c, fmt.Sprintf("a checkpoint covering the first %d records", n), func() bool {
		_, _, _, _, _, commits := c.times()
		if commits == seen {
			return false
		}
		seen = commits
		sum, err := committedSum(q, r.input, r.partitions)
		if err != nil {
			qerr = err
			return true
		}
		return sum >= n
	})
	if err == nil {
		err = qerr
	}
	return err
}

type prodResult struct {
	n    int64
	rate float64
	err  error
}

// childMain runs one incarnation of the job kind (childEngine) until
// SIGTERM. It prints to stdout "start", "recovery", "running" and
// "committed" lines, each ending in the Unix ns it happened.
func childMain(kind string) int {
	if kind != childEngine {
		fmt.Fprintf(os.Stderr, "rawloop child: unknown job %q\n", kind)
		return 2
	}
	say := func(what string, at time.Time) { fmt.Printf("%s %d\n", what, at.UnixNano()) }
	say("start", time.Now())
	env := os.Getenv
	interval, err := time.ParseDuration(env("RAWLOOP_JOB_INTERVAL"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "rawloop child:", err)
		return 2
	}
	parts, _ := strconv.Atoi(env("RAWLOOP_JOB_PARTITIONS"))
	vb, _ := strconv.Atoi(env("RAWLOOP_JOB_VALUE_BYTES"))
	if extra.producer, err = parseConf(env("RAWLOOP_JOB_PRODUCER_CONF")); err == nil {
		extra.consumer, err = parseConf(env("RAWLOOP_JOB_CONSUMER_CONF"))
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "rawloop child:", err)
		return 2
	}
	par, _ := strconv.Atoi(env("RAWLOOP_JOB_PARALLELISM"))
	keyBy, _ := strconv.ParseBool(env("RAWLOOP_JOB_KEYBY"))
	e := engineJob{brokers: env("RAWLOOP_JOB_BROKERS"), name: env("RAWLOOP_JOB_NAME"),
		input: env("RAWLOOP_JOB_INPUT"), output: env("RAWLOOP_JOB_OUTPUT"), dir: env("RAWLOOP_JOB_DIR"),
		partitions: parts, valueBytes: vb, parallelism: par, keyBy: keyBy, interval: interval, log: os.Stderr}
	run := e.childRun(say)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "rawloop child: job:", err)
		return 3
	}
	return 0
}

func printRecovery(w io.Writer, r *RecoveryResult) {
	fmt.Fprintf(w, "(j) eng rec   %d SIGKILLs at %.0f/s (achieved %.0f/s), %d keys of state, checkpoint every %s; ms after the SIGKILL:\n",
		len(r.Samples), r.Rate, r.AchievedRate, r.StateKeys, r.CommitInterval)
	fmt.Fprintf(w, "    first new output visible  %s\n", r.Recovery)
	fmt.Fprintf(w, "    recovery decided          %s\n", r.ToRecovery)
	fmt.Fprintf(w, "    state restored, running   %s\n", r.ToRunning)
	fmt.Fprintf(w, "    first commit              %s\n", r.FirstCommit)
	for i, s := range r.Samples {
		fmt.Fprintf(w, "    kill %d: %.0fms after a commit; up %.0f, decided %.0f, running %.0f, committed %.0f, visible %.0f\n",
			i+1, s.SinceCommitMs, s.StartMs, s.RecoveryMs, s.RunningMs, s.FirstCommitMs, s.FirstNewMs)
	}
	if v := r.Verified; v != nil {
		fmt.Fprintf(w, "    verified  %s (all incarnations)\n", v)
	}
}

// killMark is one SIGKILL of a recovery run: its time (Unix ns) and the
// arrival of the first output of an input produced after it.
type killMark struct {
	at       int64
	firstNew atomic.Int64
}
