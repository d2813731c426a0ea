package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// ProduceResult is figure (a).
type ProduceResult struct {
	Topic         string  `json:"topic"`
	Records       int64   `json:"records"`
	PayloadBytes  int64   `json:"payload_bytes"` // keys + values
	Seconds       float64 `json:"seconds"`       // first Produce to last delivery report
	RecordsPerSec float64 `json:"records_per_sec"`
	MBPerSec      float64 `json:"mb_per_sec"` // payload, 10^6 bytes
}

// deliveries counts the delivery reports of a producer's Events channel
// until the channel is closed by Producer.Close.
type deliveries struct {
	mu       sync.Mutex
	ok       int64
	failed   int64
	firstErr error
	last     time.Time     // when the latest report arrived
	want     int64         // reports wait is waiting for; -1 before wait
	reached  chan struct{} // closed when want reports or a failure arrived
	closed   bool          // reached is closed
	done     chan struct{} // closed when the goroutine ends
}

// countDeliveries starts the goroutine that reads p's Events channel. It
// ends when p.Close closes the channel; read done after Close.
func countDeliveries(p *kafka.Producer) *deliveries {
	d := &deliveries{want: -1, reached: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(d.done)
		for ev := range p.Events() {
			m, ok := ev.(*kafka.Message)
			if !ok {
				continue // kafka.Error events are client-level and retried
			}
			d.mu.Lock()
			if m.TopicPartition.Error != nil {
				d.failed++
				if d.firstErr == nil {
					d.firstErr = fmt.Errorf("delivery to %s: %w", m.TopicPartition, m.TopicPartition.Error)
				}
			} else {
				d.ok++
			}
			d.last = time.Now()
			d.signal()
			d.mu.Unlock()
		}
	}()
	return d
}

// signal closes reached when its condition holds. Call with mu held.
func (d *deliveries) signal() {
	if !d.closed && (d.firstErr != nil || (d.want >= 0 && d.ok+d.failed >= d.want)) {
		close(d.reached)
		d.closed = true
	}
}

// wait blocks until n reports arrived, or the first failure. It returns the
// time of the last report.
func (d *deliveries) wait(ctx context.Context, n int64) (time.Time, error) {
	d.mu.Lock()
	d.want = n
	d.signal()
	d.mu.Unlock()
	select {
	case <-d.reached:
	case <-ctx.Done():
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case d.firstErr != nil:
		return d.last, fmt.Errorf("%d of %d records failed, first: %w", d.failed, n, d.firstErr)
	case d.ok < n:
		return d.last, fmt.Errorf("waiting for deliveries: %d of %d delivered: %w", d.ok, n, ctx.Err())
	}
	return d.last, nil
}

// produceN writes n records keyed by keys to topic with an idempotent
// producer and waits for every delivery report.
func produceN(ctx context.Context, brokers, topic string, n int64, valueBytes int, keys keySource) (ProduceResult, error) {
	p, err := kafka.NewProducer(producerConfig(brokers))
	if err != nil {
		return ProduceResult{}, fmt.Errorf("producer: %w", err)
	}
	d := countDeliveries(p)
	defer func() {
		p.Close()
		<-d.done
	}()

	key := make([]byte, keyLen)
	val := make([]byte, valueBytes)
	m := &kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: kafka.PartitionAny}}
	start := time.Now()
	for i := range n {
		m.Key = keys.next(key)
		fillInput(val, time.Now().UnixNano(), uint64(i))
		m.Value = val
		if err := produceRetry(ctx, p, m); err != nil {
			return ProduceResult{}, err
		}
	}
	last, err := d.wait(ctx, n)
	if err != nil {
		return ProduceResult{}, err
	}
	secs := last.Sub(start).Seconds()
	bytes := n * int64(keyLen+valueBytes)
	return ProduceResult{
		Topic:         topic,
		Records:       n,
		PayloadBytes:  bytes,
		Seconds:       secs,
		RecordsPerSec: float64(n) / secs,
		MBPerSec:      float64(bytes) / 1e6 / secs,
	}, nil
}

// producePaced writes records keyed by keys to topic at rate records/s,
// with the produce wall time in each value, for d (d <= 0: no limit) or
// until stop is closed (nil: never), then waits for every delivery report.
// It returns how many records it wrote.
func producePaced(ctx context.Context, brokers, topic string, rate float64, d time.Duration, stop <-chan struct{}, valueBytes int, keys keySource) (int64, error) {
	p, err := kafka.NewProducer(producerConfig(brokers))
	if err != nil {
		return 0, fmt.Errorf("paced producer: %w", err)
	}
	dl := countDeliveries(p)
	defer func() {
		p.Close()
		<-dl.done
	}()

	key := make([]byte, keyLen)
	val := make([]byte, valueBytes)
	m := &kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: kafka.PartitionAny}}
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	start := time.Now()
	var sent int64
	for stopped := false; !stopped; {
		elapsed := time.Since(start)
		if d > 0 && elapsed >= d {
			elapsed, stopped = d, true
		}
		// Catch up to the schedule: the ticker may fire late, never early.
		for due := int64(rate * elapsed.Seconds()); sent < due; sent++ {
			m.Key = keys.next(key)
			fillInput(val, time.Now().UnixNano(), uint64(sent))
			m.Value = val
			if err := produceRetry(ctx, p, m); err != nil {
				return sent, err
			}
		}
		if stopped {
			break
		}
		select {
		case <-stop:
			stopped = true
		case <-tick.C:
		case <-ctx.Done():
			return sent, ctx.Err()
		}
	}
	if _, err := dl.wait(ctx, sent); err != nil {
		return sent, err
	}
	return sent, nil
}
