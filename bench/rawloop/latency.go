package main

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// LatencyResult is figure (d).
type LatencyResult struct {
	Input          string        `json:"input"`
	Output         string        `json:"output"`
	Rate           float64       `json:"rate"` // records/s asked for
	AchievedRate   float64       `json:"achieved_rate"`
	WarmupSeconds  float64       `json:"warmup_seconds"`
	WindowSeconds  float64       `json:"window_seconds"`
	Produced       int64         `json:"produced"`
	Measured       int64         `json:"measured"` // records produced inside the window
	CommitInterval string        `json:"commit_interval"`
	Transactions   int           `json:"transactions"`
	Commit         DurationStats `json:"commit"`
	// LoopLag is the loop's lag behind the paced input at each commit
	// (TxLoopResult.Lag; for a kord job, at each committed checkpoint).
	LoopLag DurationStats `json:"loop_lag"`
	// Latency = when a read_committed consumer of the output got the
	// record − when the input record was handed to Produce.
	Latency DurationStats `json:"latency"`
	// DrainSeconds is how long after the producer's last record the
	// reader had read the whole output. Much more than one commit
	// interval means the loop did not keep up with Rate.
	DrainSeconds float64       `json:"drain_seconds"`
	Verified     *VerifyResult `json:"verified,omitempty"`
}

// pacedRun measures end-to-end latency around a pipeline under test: a
// producer paced at rate writes the input, the pipeline turns it into
// output, and a read_committed reader of the output times each record from
// the produce time its value carries. Records produced during the warmup
// are processed and checked but not measured.
type pacedRun struct {
	name       string // prefixes errors: "latency", "kord latency", ...
	brokers    string
	group      string // the raw loop commits to it; the reader uses group + ".reader"
	input      string
	output     string
	partitions int
	valueBytes int
	interval   time.Duration // the pipeline's commit interval
	rate       float64
	warmup     time.Duration
	window     time.Duration
	// drain bounds the wait for the pipeline and the reader after the
	// producer has stopped.
	drain time.Duration
	keys  keySource
	// counts: the output is the keyed engine's; check its per-key counts.
	counts bool
}

// pipeline is what a latency run measures. It turns the input into the
// output, closes ready once it is reading, and returns once it has
// processed target records (target is -1 until the producer is done) or ctx
// is cancelled, which happens when the whole output has been read.
type pipeline func(ctx context.Context, target *atomic.Int64, ready chan<- struct{}) (commitFigures, error)

// commitFigures are what a pipeline knows of its own commits.
type commitFigures struct {
	transactions int           // commits (transactions or checkpoints)
	commit       DurationStats // how long each commit took, if known
	lag          DurationStats // at each commit: now - produce time of the last record read
}

// loop is the raw transactional loop (c) as a pipeline.
func (r pacedRun) loop(txnID string) pipeline {
	return func(ctx context.Context, target *atomic.Int64, ready chan<- struct{}) (commitFigures, error) {
		l := &txLoop{
			brokers: r.brokers, group: r.group, txnID: txnID,
			input: r.input, output: r.output, partitions: r.partitions,
			valueBytes: r.valueBytes, interval: r.interval,
			target: target, ready: ready,
		}
		res, err := l.run(ctx)
		return commitFigures{transactions: res.Transactions, commit: res.Commit, lag: res.Lag}, err
	}
}

// measure runs p between the paced producer and the reader.
func (r pacedRun) measure(ctx context.Context, p pipeline) (LatencyResult, error) {
	res := LatencyResult{
		Input: r.input, Output: r.output, Rate: r.rate,
		WarmupSeconds: r.warmup.Seconds(), WindowSeconds: r.window.Seconds(),
		CommitInterval: r.interval.String(),
	}
	// The first failure cancels the rest and is the one reported.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	// The pipeline's context ends once the output is complete.
	pctx, pcancel := context.WithCancel(ctx)
	defer pcancel()

	var target atomic.Int64 // records written, once the producer is done
	target.Store(-1)
	var windowStart atomic.Int64 // Unix ns; records produced before are not measured
	windowStart.Store(math.MaxInt64)

	var (
		wg        sync.WaitGroup
		figs      commitFigures
		lats      []time.Duration
		check     = newOutputCheck(r.partitions, r.counts)
		pipeReady = make(chan struct{})
		readReady = make(chan struct{})
	)
	wg.Add(2)
	go func() {
		defer wg.Done()
		var err error
		if figs, err = p(pctx, &target, pipeReady); err != nil {
			cancel(fmt.Errorf("%s: %w", r.name, err))
		}
	}()
	go func() {
		defer wg.Done()
		defer pcancel()
		rd := reader{brokers: r.brokers, group: r.group + ".reader", topic: r.output,
			partitions: r.partitions, want: target.Load, ready: readReady}
		_, err := rd.readAll(ctx, func(m *kafka.Message) error {
			now := time.Now().UnixNano()
			f, err := check.add(m)
			if err != nil {
				return err
			}
			if f.producedAtNs >= windowStart.Load() {
				lats = append(lats, time.Duration(now-f.producedAtNs))
			}
			return nil
		})
		if err != nil {
			cancel(fmt.Errorf("%s: output reader: %w", r.name, err))
		}
	}()

	// Measure only once the pipeline and the reader are set up.
	for _, ch := range []chan struct{}{pipeReady, readReady} {
		select {
		case <-ch:
		case <-ctx.Done():
		}
	}
	if ctx.Err() == nil {
		windowStart.Store(time.Now().Add(r.warmup).UnixNano())
		start := time.Now()
		n, err := producePaced(ctx, r.brokers, r.input, r.rate, r.warmup+r.window, nil, r.valueBytes, r.keys)
		res.Produced = n
		res.AchievedRate = float64(n) / time.Since(start).Seconds()
		if err != nil {
			cancel(fmt.Errorf("%s: paced producer: %w", r.name, err))
		} else {
			target.Store(n)
		}
	}
	// The pipeline and the reader end once they reach the target; bound
	// that.
	produced := time.Now()
	stop := time.AfterFunc(r.drain, func() {
		cancel(fmt.Errorf("%s: pipeline and reader not done %s after the producer stopped", r.name, r.drain))
	})
	wg.Wait()
	stop.Stop()
	res.DrainSeconds = time.Since(produced).Seconds()
	if ctx.Err() != nil {
		return res, context.Cause(ctx)
	}
	res.Transactions = figs.transactions
	res.Commit = figs.commit
	res.LoopLag = figs.lag
	res.Measured = int64(len(lats))
	res.Latency = durationStats(lats)
	v, err := check.result(r.output, res.Produced)
	res.Verified = &v
	if err != nil {
		return res, fmt.Errorf("%s: %w", r.name, err)
	}
	return res, nil
}
