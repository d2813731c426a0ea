package main

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// TxLoopResult is figure (c).
type TxLoopResult struct {
	Input          string  `json:"input"`
	Output         string  `json:"output"`
	Events         int64   `json:"events"`
	Seconds        float64 `json:"seconds"` // first record read to last commit returned
	EventsPerSec   float64 `json:"events_per_sec"`
	CommitInterval string  `json:"commit_interval"`
	Transactions   int     `json:"transactions"`
	// Commit = SendOffsetsToTransaction + CommitTransaction, which
	// includes flushing the transaction's outstanding records.
	Commit DurationStats `json:"commit"`
	// Lag is, at each commit, how long ago the last record read had been
	// produced: small when the loop keeps up with a paced input (d),
	// meaningless for a pre-written input (c).
	Lag      DurationStats `json:"lag"`
	Verified *VerifyResult `json:"verified,omitempty"`
}

// txLoop is the raw consume→transform→produce loop with a transactional
// producer, in one goroutine: poll a record, produce its output, and every
// interval commit the consumed positions with the output.
type txLoop struct {
	brokers    string
	group      string // fixed group the offsets are committed to
	txnID      string
	input      string
	output     string
	partitions int
	valueBytes int
	interval   time.Duration

	// target is the number of input records to process before the last
	// commit, or -1 while not yet known (the latency mode sets it when
	// its producer is done).
	target *atomic.Int64
	// ready, if not nil, is closed once the loop is set up and reading.
	ready chan<- struct{}
}

// run processes records until target records were read and committed.
func (l *txLoop) run(ctx context.Context) (TxLoopResult, error) {
	res := TxLoopResult{Input: l.input, Output: l.output, CommitInterval: l.interval.String()}

	c, err := kafka.NewConsumer(consumerConfig(l.brokers, l.group))
	if err != nil {
		return res, fmt.Errorf("txloop consumer: %w", err)
	}
	defer c.Close()
	p, err := kafka.NewProducer(txProducerConfig(l.brokers, l.txnID))
	if err != nil {
		return res, fmt.Errorf("txloop producer: %w", err)
	}
	defer p.Close()
	meta, err := kafka.NewTestConsumerGroupMetadata(l.group)
	if err != nil {
		return res, fmt.Errorf("group metadata for %s: %w", l.group, err)
	}

	initCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
	err = p.InitTransactions(initCtx)
	cancel()
	if err != nil {
		return res, fmt.Errorf("InitTransactions(%s): %w", l.txnID, err)
	}
	if err := p.BeginTransaction(); err != nil {
		return res, fmt.Errorf("BeginTransaction: %w", err)
	}
	if err := assignAll(c, l.input, l.partitions); err != nil {
		return res, err
	}
	if l.ready != nil {
		close(l.ready)
	}

	// next[p] is the offset after the last record read from partition p,
	// -1 before the first.
	next := make([]int64, l.partitions)
	for i := range next {
		next[i] = -1
	}
	var (
		commits []time.Duration
		lags    []time.Duration
		lastAt  int64 // produce time of the last record read, Unix ns
	)
	// commit commits the open transaction with the consumed positions and,
	// when more is to come, begins the next one.
	commit := func(begin bool) error {
		offsets := make([]kafka.TopicPartition, 0, l.partitions)
		for i, o := range next {
			if o >= 0 {
				offsets = append(offsets, kafka.TopicPartition{Topic: &l.input, Partition: int32(i), Offset: kafka.Offset(o)})
			}
		}
		cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		t0 := time.Now()
		lags = append(lags, time.Duration(t0.UnixNano()-lastAt))
		if err := p.SendOffsetsToTransaction(cctx, offsets, meta); err != nil {
			return l.abort(p, fmt.Errorf("SendOffsetsToTransaction (transaction %d): %w", len(commits)+1, err))
		}
		if err := p.CommitTransaction(cctx); err != nil {
			err = fmt.Errorf("CommitTransaction (transaction %d): %w", len(commits)+1, err)
			// Abort only what librdkafka says failed before the commit
			// was sent; after a timeout the outcome is unknown and an
			// abort could land on the wrong transaction (DESIGN.md).
			if ke := (kafka.Error{}); errors.As(err, &ke) && ke.TxnRequiresAbort() {
				return l.abort(p, err)
			}
			return err
		}
		commits = append(commits, time.Since(t0))
		if !begin {
			return nil
		}
		if err := p.BeginTransaction(); err != nil {
			return fmt.Errorf("BeginTransaction: %w", err)
		}
		return nil
	}

	out := make([]byte, l.valueBytes)
	msg := &kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &l.output, Partition: kafka.PartitionAny}}
	var (
		read        int64
		uncommitted int64
		first       time.Time
		lastCommit  = time.Now()
	)
	for {
		if t := l.target.Load(); t >= 0 && read >= t {
			if read > t {
				return res, fmt.Errorf("read %d records from %s, more than the %d written", read, l.input, t)
			}
			break
		}
		if err := ctx.Err(); err != nil {
			return res, l.abort(p, fmt.Errorf("txloop stopped after %d records: %w", read, err))
		}
		wait := l.interval - time.Since(lastCommit)
		wait = min(max(wait, time.Millisecond), 100*time.Millisecond)
		switch e := c.Poll(int(wait.Milliseconds())).(type) {
		case *kafka.Message:
			if read == 0 {
				first = time.Now()
				lastCommit = first
			}
			tp := e.TopicPartition
			fillOutput(out, e.Value, tp.Partition, int64(tp.Offset))
			msg.Key, msg.Value = e.Key, out
			if err := produceRetry(ctx, p, msg); err != nil {
				return res, l.abort(p, err)
			}
			next[tp.Partition] = int64(tp.Offset) + 1
			if at, err := producedAt(e.Value); err == nil {
				lastAt = at
			}
			read++
			uncommitted++
		case kafka.Error:
			if err := consumerError(e); err != nil {
				return res, l.abort(p, fmt.Errorf("txloop reading %s: %w", l.input, err))
			}
		}
		if uncommitted > 0 && time.Since(lastCommit) >= l.interval {
			if err := commit(true); err != nil {
				return res, err
			}
			uncommitted = 0
			lastCommit = time.Now()
		}
	}
	if uncommitted > 0 {
		if err := commit(false); err != nil {
			return res, err
		}
	}
	// An open transaction left here has no records (librdkafka begins
	// transactions locally); closing the producer drops it.
	end := time.Now()

	res.Events = read
	res.Seconds = end.Sub(first).Seconds()
	if read > 0 {
		res.EventsPerSec = float64(read) / res.Seconds
	}
	res.Transactions = len(commits)
	res.Commit = durationStats(commits)
	res.Lag = durationStats(lags)
	return res, nil
}

// abort aborts the open transaction after err, which happened before its
// commit was sent, unless the producer is unusable (fatal error). It returns
// err, with the abort's failure if any. The run fails either way.
func (l *txLoop) abort(p *kafka.Producer, err error) error {
	var ke kafka.Error
	if errors.As(err, &ke) && ke.IsFatal() {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if aerr := p.AbortTransaction(ctx); aerr != nil {
		return fmt.Errorf("%w (abort also failed: %v)", err, aerr)
	}
	return err
}

// newTarget returns a fixed loop target of n records.
func newTarget(n int64) *atomic.Int64 {
	t := new(atomic.Int64)
	t.Store(n)
	return t
}
