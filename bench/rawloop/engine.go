package main

// kord's keyed engine (package keyed) measured against the raw
// transactional loop, on the same kind of input, in the same run:
//
//	(h) engine           the (a) input through the engine job: events/s, as (c)
//	(i) engine latency   a paced input through it: end-to-end latency, as (d)
//	(j) engine recovery  the job in a child process with -recovery-users keys
//	                     of state, SIGKILLed and restarted (recovery.go)
//
// The job is a user-behavior count (examples/userbehavior): kafkaio.Source →
// ByPartition (KeyBy the record key with -keyby) → a counter operator with a
// keyed.ValueState[int64] per key, -parallelism tasks → kafkaio.Sink, one
// output per input, exactly-once checkpoints every -commit-interval.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kordproject/kord/consumer"
	"github.com/kordproject/kord/internal/failpoint"
	"github.com/kordproject/kord/kafkaio"
	"github.com/kordproject/kord/keyed"
)

// defaultEngineUsers is the number of distinct keys of the engine modes'
// inputs when -users is 0, as examples/userbehavior's default.
const defaultEngineUsers = 10_000

// EngineResult is figure (h): the engine job over the (a) input.
type EngineResult struct {
	Input  string `json:"input"`
	Output string `json:"output"`
	Events int64  `json:"events"`
	// Seconds runs from the first record the job read (its sources' first
	// decode) to the commit of the checkpoint that made the last output
	// committed (its commit group's offsets then add up to Events), as the
	// job reports it (its after-commit failure point, through a
	// failpoint.WithHook hook).
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
	// Alignment: how long each task's barrier alignment took (first
	// barrier to snapshot), over every checkpoint (keyed.Job.AlignmentTimes).
	Alignment DurationStats `json:"alignment"`
}

// engineJob describes one engine job set up like the raw loop: same input,
// output values made by fillOutput (with the key's count), same librdkafka
// overrides.
type engineJob struct {
	brokers string
	// name is the job's name (keyed.NewJob), unique to the run: its sink's
	// transactional.id is kafkaio.TransactionalID(name), "kord.<name>", and
	// its commit group kafkaio.CommitGroup(name), "kord.<name>.commit".
	name        string
	input       string
	output      string
	dir         string
	partitions  int
	valueBytes  int
	parallelism int
	keyBy       bool
	interval    time.Duration
	log         io.Writer // warnings and errors of the job
}

// engineWatch observes a running job; every field may be nil.
type engineWatch struct {
	// read gets the produce time of every input record the sources decode,
	// on the source tasks' goroutines.
	read func(producedAtNs int64)
	// point gets every failure point the job passes (a failpoint.Hook on
	// the context of Run): failpoint.DuringRestore once the recovery
	// decision is taken, failpoint.AfterCommit after each checkpoint's
	// commit.
	point func(point string)
	// processing is called by each operator task at its first record: its
	// key groups are restored and it runs.
	processing func()
}

// engineIn is an input record as the job carries it.
type engineIn struct {
	partition int32
	offset    int64
	key       []byte
	value     []byte
}

// engineOut is an output record.
type engineOut struct{ key, value []byte }

// counter counts each key's records in keyed state and emits one output
// per input: fillOutput's value, with the key's count after the record in
// [20:28).
type counter struct {
	n          *keyed.ValueState[int64]
	valueBytes int
	first      func() // called at the first record, then dropped
}

func (c *counter) Open(b *keyed.Backend) (err error) {
	c.n, err = keyed.Value(b, "count", keyed.Int64())
	return err
}

func (c *counter) Process(key []byte, in engineIn, out *keyed.Collector[engineOut]) error {
	if c.first != nil {
		c.first()
		c.first = nil
	}
	n, _ := c.n.Get()
	n++
	c.n.Set(n)
	v := make([]byte, c.valueBytes) // the sink holds it until its checkpoint commits
	fillOutput(v, in.value, in.partition, in.offset)
	putCount(v, n)
	out.Emit(engineOut{key: key, value: v})
	return nil
}

func (e engineJob) commitGroup() string { return kafkaio.CommitGroup(e.name) }

func keying(keyBy bool) string {
	if keyBy {
		return "keyby"
	}
	return "partition"
}

// builtJob is a job declared by build, with its sink and the hook that
// reports its failure points to the watch.
type builtJob struct {
	job  *keyed.Job
	sink *kafkaio.Sink[engineOut]
	hook failpoint.Hook // nil: nothing watches the points
}

// run runs the job until ctx is done, then closes its sink.
func (b builtJob) run(ctx context.Context) error {
	defer b.sink.Close()
	if b.hook != nil {
		ctx = failpoint.WithHook(ctx, b.hook)
	}
	return b.job.Run(ctx)
}

// build declares the job, watched by w.
func (e engineJob) build(w engineWatch) builtJob {
	logw := e.log
	if logw == nil {
		logw = io.Discard
	}
	log := slog.New(slog.NewTextHandler(logw, &slog.HandlerOptions{Level: slog.LevelWarn}))
	j := keyed.NewJob(e.name, keyed.Dir(e.dir), keyed.CheckpointInterval(e.interval), keyed.Logger(log))
	client, err := kafkaio.NewClient(kafkaio.Brokers(strings.Split(e.brokers, ",")...), kafkaio.Logger(log))
	if err != nil {
		panic(err) // brokers and a logger only: nothing that can fail
	}
	var srcOpts []kafkaio.SourceOpt
	for k, v := range extra.consumer {
		srcOpts = append(srcOpts, kafkaio.ConsumerSet(k, v))
	}
	src := kafkaio.NewSource(client, e.input, func(rec consumer.Record) (engineIn, error) {
		if w.read != nil {
			at, _ := producedAt(rec.Value)
			w.read(at)
		}
		return engineIn{partition: rec.Partition, offset: rec.Offset, key: rec.Key, value: rec.Value}, nil
	}, srcOpts...)
	// transaction.timeout.ms and transactional.id come from the job (its
	// checkpoint settings, its name); the sink refuses them here.
	var sinkOpts []kafkaio.SinkOpt
	for k, v := range extra.producer {
		sinkOpts = append(sinkOpts, kafkaio.ProducerSet(k, v))
	}
	sink := kafkaio.NewSink(client, e.output, func(o engineOut) ([]byte, []byte, error) {
		return o.key, o.value, nil
	}, sinkOpts...)

	s := keyed.FromSource(j, "input", e.parallelism, keyed.Source[engineIn](src))
	vb := e.valueBytes
	newOp := func() keyed.Operator[engineIn, engineOut] { return &counter{valueBytes: vb, first: w.processing} }
	var out *keyed.Output[engineOut]
	if e.keyBy {
		out = keyed.Process(keyed.KeyBy(func(in engineIn) []byte { return in.key }, s), "count", e.parallelism, newOp)
	} else {
		out = keyed.Process(keyed.ByPartition(s), "count", e.parallelism, newOp)
	}
	keyed.ToSink(out, "output", keyed.Sink[engineOut](sink))
	b := builtJob{job: j, sink: sink}
	if w.point != nil {
		b.hook = func(point string) error {
			w.point(point)
			return nil
		}
	}
	return b
}

// afterCommit returns an engineWatch.point that calls fn after each commit.
func afterCommit(fn func()) func(string) {
	return func(point string) {
		if point == failpoint.AfterCommit {
			fn()
		}
	}
}

// runN is figure (h): the job reads the n records of its input; it is
// stopped once the checkpoint holding the last output has committed.
func (e engineJob) runN(ctx context.Context, n int64) (EngineResult, error) {
	res := EngineResult{Input: e.input, Output: e.output, Events: n, CommitInterval: e.interval.String()}
	p := newJobProgress()
	b := e.build(engineWatch{
		read:  func(int64) { p.readOne() },
		point: afterCommit(p.commits.add),
	})
	err := timeJob(ctx, &res, e.brokers, e.commitGroup(), e.partitions, p, b.run)
	res.Alignment = durationStats(b.job.AlignmentTimes())
	if err != nil {
		return res, fmt.Errorf("engine %w", err)
	}
	return res, nil
}

// pipeline is the job as the pipeline of figure (i): (d) with the job in
// place of the raw loop. It is ready once its first checkpoint has
// committed (every task runs). Its lag is taken after each commit;
// Transactions counts checkpoints committed, and Commit stays empty.
func (e engineJob) pipeline() pipeline {
	return func(ctx context.Context, _ *atomic.Int64, ready chan<- struct{}) (commitFigures, error) {
		var (
			lag  lagLog
			once sync.Once
		)
		b := e.build(engineWatch{read: lag.read, point: afterCommit(func() {
			lag.committed()
			once.Do(func() { close(ready) })
		})})
		err := b.run(ctx)
		if err == nil && ctx.Err() == nil {
			err = errors.New("stopped on its own")
		}
		if err != nil {
			err = fmt.Errorf("job: %w", err)
		}
		return lag.figures(), err
	}
}

// childRun is one incarnation of figure (j) in a child process
// (childMain): it says "recovery" when the job has decided what to restore,
// "running" once every operator task has restored its key groups and
// processed a record, and "committed" after each checkpoint's commit.
func (e engineJob) childRun(say func(what string, at time.Time)) func(context.Context) error {
	var running atomic.Int64
	b := e.build(engineWatch{
		point: func(point string) {
			switch point {
			case failpoint.DuringRestore:
				say("recovery", time.Now())
			case failpoint.AfterCommit:
				say("committed", time.Now())
			}
		},
		processing: func() {
			if running.Add(1) == int64(e.parallelism) {
				say("running", time.Now())
			}
		},
	})
	return b.run
}

// newEngineJob returns the job of figure (h), (i) or (j) for c, with a fresh
// checkpoint directory that cleanup removes.
func (c config) newEngineJob(name, input, output string) (e engineJob, cleanup func(), err error) {
	dir, err := os.MkdirTemp("", "rawloop-engine-")
	if err != nil {
		return engineJob{}, nil, err
	}
	return engineJob{brokers: c.brokers, name: name, input: input, output: output, dir: dir,
		partitions: c.partitions, valueBytes: c.valueBytes, parallelism: c.parallelism, keyBy: c.keyBy,
		interval: c.commitInterval, log: c.log}, func() { os.RemoveAll(dir) }, nil
}

// runEngine runs (h) over the (a) input.
func runEngine(ctx context.Context, c config, sum *Summary, id, input string, create func(...string) error, logf func(string, ...any)) error {
	output := "rawloop." + id + ".engine.out"
	if err := create(output); err != nil {
		return err
	}
	e, cleanup, err := c.newEngineJob("rawloop."+id+".engine", input, output)
	if err != nil {
		return err
	}
	defer cleanup()
	logf("(h) engine %s -> %s, %s x%d, checkpoint every %s, dir %s", input, output, keying(c.keyBy), c.parallelism, c.commitInterval, e.dir)
	sctx, cancel := context.WithTimeout(ctx, c.stepTimeout)
	res, err := e.runN(sctx, c.n)
	cancel()
	sum.Engine = &res
	if err != nil {
		return fmt.Errorf("(h) %w", err)
	}
	logf("(h) %d events in %.2fs: %.0f events/s, %d checkpoints, startup %.2fs, stop %.2fs",
		res.Events, res.Seconds, res.EventsPerSec, res.Checkpoints, res.StartupSeconds, res.StopSeconds)
	sctx, cancel = context.WithTimeout(ctx, c.stepTimeout)
	v, err := verifyOutput(sctx, c.brokers, c.group+".everify", output, c.partitions, c.n, true)
	cancel()
	res.Verified = &v
	if err != nil {
		return fmt.Errorf("(h) engine: %w", err)
	}
	logf("(h) verified: %s holds exactly %d committed records, one per input; %d keys counted 1..n", output, v.Records, v.Keys)
	return nil
}

// runEnginePaced runs (i) and (j) as c.mode asks.
func runEnginePaced(ctx context.Context, c config, sum *Summary, id string, create func(...string) error, logf func(string, ...any)) error {
	if c.mode == "engine-latency" || c.mode == "engine-compare" {
		rate := c.rate
		switch {
		case rate > 0:
		case sum.Engine != nil:
			rate = sum.Engine.EventsPerSec / 2
		default:
			rate = defaultLatencyRate
		}
		lin, lout := "rawloop."+id+".elat.in", "rawloop."+id+".elat.out"
		if err := create(lin, lout); err != nil {
			return err
		}
		e, cleanup, err := c.newEngineJob("rawloop."+id+".elatency", lin, lout)
		if err != nil {
			return err
		}
		defer cleanup()
		logf("(i) engine latency at %.0f records/s for %s + %s warmup, checkpoint every %s", rate, c.duration, c.warmup, c.commitInterval)
		res, err := c.pacedRun("engine latency", e.name, lin, lout, rate, true).measure(ctx, e.pipeline())
		sum.EngineLatency = &res
		if err != nil {
			return fmt.Errorf("(i) %w", err)
		}
		logf("(i) %d measured of %d produced, latency %s, drain %.2fs%s",
			res.Measured, res.Produced, res.Latency, res.DrainSeconds, backlogNote(&res))
	}
	if c.mode == "engine-recovery" || c.mode == "engine-compare" {
		rin, rout := "rawloop."+id+".erec.in", "rawloop."+id+".erec.out"
		if err := create(rin, rout); err != nil {
			return err
		}
		r := recoveryRun{parallelism: c.parallelism, keyBy: c.keyBy,
			brokers: c.brokers, name: "rawloop." + id + ".erecovery", input: rin, output: rout,
			partitions: c.partitions, valueBytes: c.valueBytes, interval: c.commitInterval,
			rate: c.recoveryRate, keys: newKeys(c.recoveryUsers), users: c.recoveryUsers,
			kills: c.kills, killAfter: c.killAfter, timeout: c.stepTimeout, logf: logf}
		logf("(j) engine recovery: %d keys of state, %d SIGKILLs at %.0f records/s, checkpoint every %s",
			c.recoveryUsers, c.kills, c.recoveryRate, c.commitInterval)
		res, err := r.run(ctx)
		sum.EngineRecovery = &res
		if err != nil {
			return fmt.Errorf("(j) %w", err)
		}
		logf("(j) SIGKILL to first new committed output: %s", res.Recovery)
	}
	return nil
}

// printEngine prints (h), (i) and (j).
func printEngine(w io.Writer, s *Summary) {
	if r := s.Engine; r != nil {
		fmt.Fprintf(w, "(h) engine    %9.0f events/s   (%d events, %.2fs, %d checkpoints, checkpoint every %s; startup %.2fs, stop %.2fs)\n",
			r.EventsPerSec, r.Events, r.Seconds, r.Checkpoints, r.CommitInterval, r.StartupSeconds, r.StopSeconds)
		fmt.Fprintf(w, "    commit gap %s\n", r.CommitGap)
		fmt.Fprintf(w, "    alignment %s\n", r.Alignment)
		if v := r.Verified; v != nil {
			fmt.Fprintf(w, "    verified  %s\n", v)
		}
		if s.TxLoop != nil && s.TxLoop.EventsPerSec > 0 {
			fmt.Fprintf(w, "    engine/raw %.2f (events/s of (h) over (c), same input)\n", r.EventsPerSec/s.TxLoop.EventsPerSec)
		}
	}
	if r := s.EngineLatency; r != nil {
		fmt.Fprintf(w, "(i) eng lat   rate=%.0f/s (achieved %.0f/s), window %.0fs after %.0fs warmup, checkpoint every %s, %d checkpoints\n",
			r.Rate, r.AchievedRate, r.WindowSeconds, r.WarmupSeconds, r.CommitInterval, r.Transactions)
		fmt.Fprintf(w, "    latency   %s\n", r.Latency)
		fmt.Fprintf(w, "    drain     %.2fs from the last input produced to the whole output read%s\n",
			r.DrainSeconds, backlogNote(r))
		fmt.Fprintf(w, "    job lag   %s  (after each commit: now - produce time of the last record read)\n", r.LoopLag)
		if v := r.Verified; v != nil {
			fmt.Fprintf(w, "    verified  %s\n", v)
		}
	}
	if r := s.EngineRecovery; r != nil {
		printRecovery(w, r)
	}
}
