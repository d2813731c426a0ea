package main

// What the engine modes watch of a running job: its progress over a
// pre-written input, timed by timeJob (figure (h)), and its lag behind a
// paced input (figure (i)).

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// commitLog records when the job committed a checkpoint.
type commitLog struct {
	mu     sync.Mutex
	at     []time.Time
	notify chan struct{}
}

func newCommitLog() *commitLog { return &commitLog{notify: make(chan struct{}, 1)} }

func (l *commitLog) add() {
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

// jobProgress is what timeJob watches of a job: the records it has read
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

// timeJob is figure (h): run runs a job, until its context is cancelled,
// over the res.Events records of res.Input, reporting to p; the job is
// stopped once the checkpoint holding the last output has committed, which
// timeJob learns by reading the job's commit group at each commit once the
// job has read every record. It fills in res's timings.
func timeJob(ctx context.Context, res *EngineResult, brokers, commitGroup string, partitions int, p *jobProgress, run func(context.Context) error) error {
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
