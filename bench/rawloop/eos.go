package main

// kord's checkpoint.CountJob measured against the raw transactional loop,
// on the same input, in the same run:
//
//	(e) kord eos       the (a) input through CountJob: events/s, as (c)
//	(f) kord latency   a paced input through CountJob: end-to-end latency, as (d)
//	(g) kord recovery  CountJob in a child process, SIGKILLed and restarted
//	                   (recovery.go)

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kordproject/kord/checkpoint"
	"github.com/kordproject/kord/consumer"
)

// producesInput reports whether mode writes the (a) input first.
func producesInput(mode string) bool {
	switch mode {
	case "latency", "eos-latency", "recovery", "engine-latency", "engine-recovery":
		return false
	}
	return true
}

// KordEOSResult is figure (e): kord's CountJob over the (a) input; and,
// in EngineResult, figure (h), the keyed engine's.
type KordEOSResult struct {
	Input  string `json:"input"`
	Output string `json:"output"`
	Events int64  `json:"events"`
	// Seconds runs from the first record the job read (CountJob: its first
	// Emit; the engine: its sources' first decode) to the commit of the
	// checkpoint that made the last output committed (its commit group's
	// offsets then add up to Events), as the job reports it (CountJob:
	// OnCommitted; the engine: its after-commit failure point, Config.Hook).
	Seconds        float64 `json:"seconds"`
	EventsPerSec   float64 `json:"events_per_sec"`
	CommitInterval string  `json:"commit_interval"`
	// Checkpoints committed within Seconds, and the time between
	// consecutive commits.
	Checkpoints int           `json:"checkpoints"`
	CommitGap   DurationStats `json:"commit_gap"`
	// Ambiguous: a later checkpoint committed while the commit group was
	// being read; Seconds then ends at that later one (conservative).
	Ambiguous bool `json:"ambiguous,omitempty"`
	// StartupSeconds: Run called to the first record read (InitTransactions,
	// recovery decision, fresh checkpoint 0 committed, assign).
	StartupSeconds float64 `json:"startup_seconds"`
	// StopSeconds: context cancelled to Run returned (a final checkpoint).
	StopSeconds float64       `json:"stop_seconds"`
	Verified    *VerifyResult `json:"verified,omitempty"`
}

// kordJob describes one CountJob set up like the raw loop: same input,
// 100-byte output values made by fillOutput, same librdkafka overrides.
type kordJob struct {
	brokers    string
	name       string
	input      string
	output     string
	dir        string
	partitions int
	valueBytes int
	interval   time.Duration
	log        io.Writer // warnings and errors of the job
}

// countJob returns the job. onEmit (if not nil) gets the produce time of
// every input record, on the job's goroutine; onMessage gets every log
// message of the job (Info and up) with its time.
func (k kordJob) countJob(onEmit func(producedAtNs int64), onCommitted func(uint64), onMessage func(string, time.Time)) *checkpoint.CountJob {
	vb := k.valueBytes
	logw := k.log
	if logw == nil {
		logw = io.Discard
	}
	var h slog.Handler = slog.NewTextHandler(logw, &slog.HandlerOptions{Level: slog.LevelWarn})
	if onMessage != nil {
		h = watchHandler{next: h, on: onMessage}
	}
	return &checkpoint.CountJob{
		Name: k.name, Brokers: k.brokers, Input: k.input, Output: k.output, Dir: k.dir,
		Checkpoint: checkpoint.Config{Interval: k.interval},
		Emit: func(rec consumer.Record, count int64) []byte {
			// The job keeps the value until its checkpoint commits: a new
			// slice per record (the raw loop reuses one; librdkafka copies).
			out := make([]byte, vb)
			fillOutput(out, rec.Value, rec.Partition, rec.Offset)
			if onEmit != nil {
				at, _ := producedAt(rec.Value)
				onEmit(at)
			}
			return out
		},
		ProducerSettings: extra.producer,
		ConsumerSettings: extra.consumer,
		Logger:           slog.New(h),
		OnCommitted:      onCommitted,
	}
}

// watchHandler shows every message of Info and up to on, and passes what
// next wants on to next.
type watchHandler struct {
	next slog.Handler
	on   func(msg string, at time.Time)
}

func (h watchHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelInfo || h.next.Enabled(ctx, l)
}

func (h watchHandler) Handle(ctx context.Context, r slog.Record) error {
	h.on(r.Message, r.Time)
	if h.next.Enabled(ctx, r.Level) {
		return h.next.Handle(ctx, r)
	}
	return nil
}

func (h watchHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return watchHandler{next: h.next.WithAttrs(as), on: h.on}
}

func (h watchHandler) WithGroup(name string) slog.Handler {
	return watchHandler{next: h.next.WithGroup(name), on: h.on}
}

// The job's log message once it has recovered and reads (checkpoint/job.go).
const (
	msgRunning  = "kord job: running"
	msgRecovery = "kord job: recovery"
)

// commitLog records when OnCommitted was called.
type commitLog struct {
	mu     sync.Mutex
	at     []time.Time
	notify chan struct{}
}

func newCommitLog() *commitLog { return &commitLog{notify: make(chan struct{}, 1)} }

func (l *commitLog) add(uint64) {
	now := time.Now()
	l.mu.Lock()
	l.at = append(l.at, now)
	l.mu.Unlock()
	select {
	case l.notify <- struct{}{}:
	default:
	}
}

func (l *commitLog) snapshot() []time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]time.Time(nil), l.at...)
}

// committedSum returns the sum of the committed offsets of group on every
// partition of topic: the number of input records its last committed
// checkpoint covers (the input has no gaps: offsets start at 0).
func committedSum(q *kafka.Consumer, topic string, partitions int) (int64, error) {
	tps := make([]kafka.TopicPartition, partitions)
	for i := range tps {
		tps[i] = kafka.TopicPartition{Topic: &topic, Partition: int32(i)}
	}
	got, err := q.Committed(tps, 10000)
	if err != nil {
		return 0, fmt.Errorf("committed offsets: %w", err)
	}
	var sum int64
	for _, tp := range got {
		if tp.Error != nil {
			return 0, fmt.Errorf("committed offset of %s: %w", tp, tp.Error)
		}
		if tp.Offset >= 0 {
			sum += int64(tp.Offset)
		}
	}
	return sum, nil
}

// jobProgress is what timeEOS watches of a job: the records it has read
// and its commits.
type jobProgress struct {
	read    atomic.Int64
	first   atomic.Int64 // Unix ns of the first record read
	commits *commitLog
}

func newJobProgress() *jobProgress { return &jobProgress{commits: newCommitLog()} }

// readOne counts one record read; safe from several goroutines.
func (p *jobProgress) readOne() {
	if p.read.Add(1) == 1 {
		p.first.Store(time.Now().UnixNano())
	}
}

// timeEOS is figures (e) and (h): run runs a job, until its context is
// cancelled, over the res.Events records of res.Input, reporting to p; the
// job is stopped once the checkpoint holding the last output has committed,
// which timeEOS learns by reading the job's commit group at each commit
// once the job has read every record. It fills in res's timings.
func timeEOS(ctx context.Context, res *KordEOSResult, brokers, commitGroup string, partitions int, p *jobProgress, run func(context.Context) error) error {
	n := res.Events
	q, err := kafka.NewConsumer(consumerConfig(brokers, commitGroup))
	if err != nil {
		return fmt.Errorf("commit group reader: %w", err)
	}
	defer q.Close()

	jctx, jcancel := context.WithCancel(ctx)
	defer jcancel()
	started := time.Now()
	done := make(chan error, 1)
	go func() { done <- run(jctx) }()
	stopJob := func() error { jcancel(); return <-done }

	var end time.Time
	for end.IsZero() {
		select {
		case err := <-done:
			return fmt.Errorf("job ended after %d records, before its output was complete: %v", p.read.Load(), err)
		case <-ctx.Done():
			return fmt.Errorf("job: %d of %d records read: %w (stop: %v)", p.read.Load(), n, ctx.Err(), stopJob())
		case <-p.commits.notify:
		}
		if p.read.Load() < n {
			continue
		}
		before := len(p.commits.snapshot())
		sum, err := committedSum(q, res.Input, partitions)
		if err != nil {
			return fmt.Errorf("job: %w (stop: %v)", err, stopJob())
		}
		if sum > n {
			return fmt.Errorf("job: commit group covers %d records, more than the %d written (stop: %v)", sum, n, stopJob())
		}
		if sum < n {
			continue
		}
		at := p.commits.snapshot()
		end = at[before-1]
		if len(at) != before {
			res.Ambiguous = true
			end = at[len(at)-1]
		}
	}
	stopAt := time.Now()
	if err := stopJob(); err != nil {
		return fmt.Errorf("job stop: %w", err)
	}
	res.StopSeconds = time.Since(stopAt).Seconds()
	f := time.Unix(0, p.first.Load())
	res.StartupSeconds = f.Sub(started).Seconds()
	res.Seconds = end.Sub(f).Seconds()
	res.EventsPerSec = float64(n) / res.Seconds
	var gaps []time.Duration
	prev := f
	for _, t := range p.commits.snapshot() {
		if t.After(f) && !t.After(end) {
			res.Checkpoints++
			gaps = append(gaps, t.Sub(prev))
			prev = t
		}
	}
	res.CommitGap = durationStats(gaps)
	return nil
}

// runN is figure (e): the job reads the n records of its input; it is
// stopped once the checkpoint holding the last output has committed.
func (k kordJob) runN(ctx context.Context, n int64) (KordEOSResult, error) {
	res := KordEOSResult{Input: k.input, Output: k.output, Events: n, CommitInterval: k.interval.String()}
	p := newJobProgress()
	job := k.countJob(func(int64) { p.readOne() }, p.commits.add, nil)
	if err := timeEOS(ctx, &res, k.brokers, job.CommitGroup(), k.partitions, p, job.Run); err != nil {
		return res, fmt.Errorf("kord %w", err)
	}
	return res, nil
}

// lagLog is a job's lag behind a paced input: at each commit, now - the
// produce time of the last record the job read.
type lagLog struct {
	lastAt  atomic.Int64 // Unix ns
	mu      sync.Mutex
	commits int
	lags    []time.Duration
}

// read notes the produce time of a record read.
func (l *lagLog) read(producedAtNs int64) { l.lastAt.Store(producedAtNs) }

// committed notes a commit.
func (l *lagLog) committed() {
	now := time.Now().UnixNano()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.commits++
	if at := l.lastAt.Load(); at > 0 {
		l.lags = append(l.lags, time.Duration(now-at))
	}
}

// figures returns the commits and lags; the job's commit durations are not
// known.
func (l *lagLog) figures() commitFigures {
	l.mu.Lock()
	defer l.mu.Unlock()
	return commitFigures{transactions: l.commits, lag: durationStats(l.lags)}
}

// pipeline is the job as the pipeline of figure (f): (d) with the job in
// place of the raw loop. It is ready once the job logs that it is running.
// Its lag is taken at each OnCommitted; Transactions counts checkpoints
// committed, and Commit stays empty (the job does not expose its commit
// duration).
func (k kordJob) pipeline() pipeline {
	return func(ctx context.Context, _ *atomic.Int64, ready chan<- struct{}) (commitFigures, error) {
		var (
			lag  lagLog
			once sync.Once
		)
		job := k.countJob(lag.read, func(uint64) { lag.committed() }, func(msg string, _ time.Time) {
			if msg == msgRunning {
				once.Do(func() { close(ready) })
			}
		})
		err := job.Run(ctx)
		if err == nil && ctx.Err() == nil {
			err = errors.New("stopped on its own")
		}
		if err != nil {
			err = fmt.Errorf("job: %w", err)
		}
		return lag.figures(), err
	}
}

// runKordEOS runs (e) over the (a) input.
func runKordEOS(ctx context.Context, c config, sum *Summary, id, input string, create func(...string) error, logf func(string, ...any)) error {
	output := "rawloop." + id + ".kord.out"
	if err := create(output); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "rawloop-kord-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	k := kordJob{brokers: c.brokers, name: "rawloop." + id + ".eos", input: input, output: output, dir: dir,
		partitions: c.partitions, valueBytes: c.valueBytes, interval: c.commitInterval, log: c.log}
	logf("(e) kord CountJob %s -> %s, checkpoint every %s, dir %s", input, output, c.commitInterval, dir)
	sctx, cancel := context.WithTimeout(ctx, c.stepTimeout)
	res, err := k.runN(sctx, c.n)
	cancel()
	sum.KordEOS = &res
	if err != nil {
		return fmt.Errorf("(e) kord: %w", err)
	}
	logf("(e) %d events in %.2fs: %.0f events/s, %d checkpoints, startup %.2fs, stop %.2fs",
		res.Events, res.Seconds, res.EventsPerSec, res.Checkpoints, res.StartupSeconds, res.StopSeconds)
	sctx, cancel = context.WithTimeout(ctx, c.stepTimeout)
	v, err := verifyOutput(sctx, c.brokers, c.group+".kverify", output, c.partitions, c.n, false)
	cancel()
	res.Verified = &v
	if err != nil {
		return fmt.Errorf("(e) kord: %w", err)
	}
	logf("(e) verified: %s holds exactly %d committed records, one per input", output, v.Records)
	return nil
}

// runKordPaced runs (f) and (g) as c.mode asks.
func runKordPaced(ctx context.Context, c config, sum *Summary, id string, create func(...string) error, logf func(string, ...any)) error {
	if c.mode == "eos-latency" || c.mode == "compare" {
		rate := c.rate
		if rate <= 0 {
			rate = defaultLatencyRate
		}
		lin, lout := "rawloop."+id+".klat.in", "rawloop."+id+".klat.out"
		if err := create(lin, lout); err != nil {
			return err
		}
		dir, err := os.MkdirTemp("", "rawloop-kord-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		k := kordJob{brokers: c.brokers, name: "rawloop." + id + ".latency", input: lin, output: lout, dir: dir,
			partitions: c.partitions, valueBytes: c.valueBytes, interval: c.commitInterval, log: c.log}
		logf("(f) kord latency at %.0f records/s for %s + %s warmup, checkpoint every %s", rate, c.duration, c.warmup, c.commitInterval)
		res, err := c.pacedRun("kord latency", k.name, lin, lout, rate, false).measure(ctx, k.pipeline())
		sum.KordLatency = &res
		if err != nil {
			return fmt.Errorf("(f) %w", err)
		}
		logf("(f) %d measured of %d produced, latency %s, drain %.2fs%s",
			res.Measured, res.Produced, res.Latency, res.DrainSeconds, backlogNote(&res))
	}
	if c.mode == "recovery" || c.mode == "compare" {
		rin, rout := "rawloop."+id+".rec.in", "rawloop."+id+".rec.out"
		if err := create(rin, rout); err != nil {
			return err
		}
		r := recoveryRun{child: childCountJob, brokers: c.brokers, name: "rawloop." + id + ".recovery", input: rin, output: rout,
			partitions: c.partitions, valueBytes: c.valueBytes, interval: c.commitInterval,
			rate: c.recoveryRate, keys: newKeys(c.keysFor()), kills: c.kills, killAfter: c.killAfter, timeout: c.stepTimeout, logf: logf}
		logf("(g) kord recovery: %d SIGKILLs at %.0f records/s, checkpoint every %s", c.kills, c.recoveryRate, c.commitInterval)
		res, err := r.run(ctx)
		sum.Recovery = &res
		if err != nil {
			return fmt.Errorf("(g) %w", err)
		}
		logf("(g) SIGKILL to first new committed output: %s", res.Recovery)
	}
	return nil
}

// printKord prints (e), (f) and (g).
func printKord(w io.Writer, s *Summary) {
	if r := s.KordEOS; r != nil {
		fmt.Fprintf(w, "(e) kord eos  %9.0f events/s   (%d events, %.2fs, %d checkpoints, checkpoint every %s; startup %.2fs, stop %.2fs)\n",
			r.EventsPerSec, r.Events, r.Seconds, r.Checkpoints, r.CommitInterval, r.StartupSeconds, r.StopSeconds)
		fmt.Fprintf(w, "    commit gap %s\n", r.CommitGap)
		if v := r.Verified; v != nil {
			fmt.Fprintf(w, "    verified  %s\n", v)
		}
		if s.TxLoop != nil && s.TxLoop.EventsPerSec > 0 {
			fmt.Fprintf(w, "    kord/raw  %.2f (events/s of (e) over (c), same input)\n", r.EventsPerSec/s.TxLoop.EventsPerSec)
		}
	}
	if r := s.KordLatency; r != nil {
		fmt.Fprintf(w, "(f) kord lat  rate=%.0f/s (achieved %.0f/s), window %.0fs after %.0fs warmup, checkpoint every %s, %d checkpoints\n",
			r.Rate, r.AchievedRate, r.WindowSeconds, r.WarmupSeconds, r.CommitInterval, r.Transactions)
		fmt.Fprintf(w, "    latency   %s\n", r.Latency)
		fmt.Fprintf(w, "    drain     %.2fs from the last input produced to the whole output read%s\n",
			r.DrainSeconds, backlogNote(r))
		fmt.Fprintf(w, "    job lag   %s  (at each OnCommitted: now - produce time of the last record read)\n", r.LoopLag)
		if v := r.Verified; v != nil {
			fmt.Fprintf(w, "    verified  %s\n", v)
		}
	}
	if r := s.Recovery; r != nil {
		printRecovery(w, r)
	}
}
