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
	// (TxLoopResult.Lag).
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

type latencyRun struct {
	brokers    string
	group      string
	txnID      string
	input      string
	output     string
	partitions int
	valueBytes int
	interval   time.Duration
	rate       float64
	warmup     time.Duration
	window     time.Duration
	// drain bounds the wait for the loop and the reader after the
	// producer has stopped.
	drain time.Duration
}

// run is figure (d): a paced producer writes the input, the transactional
// loop turns it into output, and a read_committed reader of the output
// measures each record's latency. Records produced during the warmup are
// processed and checked but not measured.
func (r latencyRun) run(ctx context.Context) (LatencyResult, error) {
	res := LatencyResult{
		Input: r.input, Output: r.output, Rate: r.rate,
		WarmupSeconds: r.warmup.Seconds(), WindowSeconds: r.window.Seconds(),
		CommitInterval: r.interval.String(),
	}
	// The first failure cancels the rest and is the one reported.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)

	var target atomic.Int64 // records written, once the producer is done
	target.Store(-1)
	var windowStart atomic.Int64 // Unix ns; records produced before are not measured
	windowStart.Store(math.MaxInt64)

	var (
		wg        sync.WaitGroup
		loopRes   TxLoopResult
		lats      []time.Duration
		check     = newOutputCheck(r.partitions)
		loopReady = make(chan struct{})
		readReady = make(chan struct{})
	)
	loop := &txLoop{
		brokers: r.brokers, group: r.group, txnID: r.txnID,
		input: r.input, output: r.output, partitions: r.partitions,
		valueBytes: r.valueBytes, interval: r.interval,
		target: &target, ready: loopReady,
	}
	wg.Add(2)
	go func() {
		defer wg.Done()
		var err error
		if loopRes, err = loop.run(ctx); err != nil {
			cancel(fmt.Errorf("latency: %w", err))
		}
	}()
	go func() {
		defer wg.Done()
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
			cancel(fmt.Errorf("latency: output reader: %w", err))
		}
	}()

	// Measure only once the loop and the reader are set up.
	for _, ch := range []chan struct{}{loopReady, readReady} {
		select {
		case <-ch:
		case <-ctx.Done():
		}
	}
	if ctx.Err() == nil {
		windowStart.Store(time.Now().Add(r.warmup).UnixNano())
		start := time.Now()
		n, err := producePaced(ctx, r.brokers, r.input, r.rate, r.warmup+r.window, r.valueBytes)
		res.Produced = n
		res.AchievedRate = float64(n) / time.Since(start).Seconds()
		if err != nil {
			cancel(fmt.Errorf("latency: paced producer: %w", err))
		} else {
			target.Store(n)
		}
	}
	// The loop and the reader end on their own once they reach the target;
	// bound that.
	produced := time.Now()
	stop := time.AfterFunc(r.drain, func() {
		cancel(fmt.Errorf("latency: loop and reader not done %s after the producer stopped", r.drain))
	})
	wg.Wait()
	stop.Stop()
	res.DrainSeconds = time.Since(produced).Seconds()
	if ctx.Err() != nil {
		return res, context.Cause(ctx)
	}
	res.Transactions = loopRes.Transactions
	res.Commit = loopRes.Commit
	res.LoopLag = loopRes.Lag
	res.Measured = int64(len(lats))
	res.Latency = durationStats(lats)
	v, err := check.result(r.output, res.Produced)
	res.Verified = &v
	if err != nil {
		return res, fmt.Errorf("latency: %w", err)
	}
	return res, nil
}
