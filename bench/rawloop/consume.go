package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// ConsumeResult is figure (b).
type ConsumeResult struct {
	Topic         string  `json:"topic"`
	Records       int64   `json:"records"`
	PayloadBytes  int64   `json:"payload_bytes"`
	Seconds       float64 `json:"seconds"` // first record to last record
	RecordsPerSec float64 `json:"records_per_sec"`
	MBPerSec      float64 `json:"mb_per_sec"`
}

// readSpan is what readAll saw.
type readSpan struct {
	records     int64
	first, last time.Time // when the first and last record arrived
}

// reader describes one read of a whole topic.
type reader struct {
	brokers    string
	group      string
	topic      string
	partitions int
	// want returns how many records to wait for, or -1 while that is not
	// known yet.
	want func() int64
	// ready, if not nil, is closed once the consumer is assigned.
	ready chan<- struct{}
}

func wantN(n int64) func() int64 { return func() int64 { return n } }

// readAll reads every partition of the topic from the beginning with a
// read_committed consumer, calling fn for each record, until at least want()
// records arrived and every partition has reported its end since its last
// record. It fails when ctx ends first, saying how far it got.
func (r reader) readAll(ctx context.Context, fn func(*kafka.Message) error) (readSpan, error) {
	var s readSpan
	c, err := kafka.NewConsumer(consumerConfig(r.brokers, r.group))
	if err != nil {
		return s, fmt.Errorf("consumer of %s: %w", r.topic, err)
	}
	defer c.Close()
	if err := assignAll(c, r.topic, r.partitions); err != nil {
		return s, err
	}
	if r.ready != nil {
		close(r.ready)
	}
	atEnd := make([]bool, r.partitions)
	ended := 0
	for {
		if w := r.want(); w >= 0 && s.records >= w && ended == r.partitions {
			return s, nil
		}
		if err := ctx.Err(); err != nil {
			return s, fmt.Errorf("reading %s: %d records (want %d), %d of %d partitions at end: %w",
				r.topic, s.records, r.want(), ended, r.partitions, err)
		}
		switch e := c.Poll(100).(type) {
		case *kafka.Message:
			now := time.Now()
			if s.records == 0 {
				s.first = now
			}
			s.records++
			s.last = now
			if p := e.TopicPartition.Partition; atEnd[p] {
				atEnd[p] = false
				ended--
			}
			if fn != nil {
				if err := fn(e); err != nil {
					return s, err
				}
			}
		case kafka.PartitionEOF:
			if p := e.Partition; !atEnd[p] {
				atEnd[p] = true
				ended++
			}
		case kafka.Error:
			if err := consumerError(e); err != nil {
				return s, fmt.Errorf("reading %s: %w", r.topic, err)
			}
		}
	}
}

// consumeAll is figure (b): read the whole input topic back.
func consumeAll(ctx context.Context, brokers, group, topic string, partitions int, n int64) (ConsumeResult, error) {
	var bytes int64
	r := reader{brokers: brokers, group: group, topic: topic, partitions: partitions, want: wantN(n)}
	s, err := r.readAll(ctx, func(m *kafka.Message) error {
		bytes += int64(len(m.Key) + len(m.Value))
		return nil
	})
	if err != nil {
		return ConsumeResult{}, err
	}
	if s.records != n {
		return ConsumeResult{}, fmt.Errorf("read %d records from %s, want %d", s.records, topic, n)
	}
	secs := s.last.Sub(s.first).Seconds()
	return ConsumeResult{
		Topic:         topic,
		Records:       s.records,
		PayloadBytes:  bytes,
		Seconds:       secs,
		RecordsPerSec: float64(s.records) / secs,
		MBPerSec:      float64(bytes) / 1e6 / secs,
	}, nil
}

// VerifyResult is the exactly-once check of an output topic.
type VerifyResult struct {
	Topic   string `json:"topic"`
	Records int64  `json:"records"`
	// Distinct input records (partition, offset) represented in the output.
	Distinct int64 `json:"distinct_inputs"`
	// Keys, for the keyed engine's output: distinct keys, each of whose
	// counts were checked to run 1, 2, ... in input order (the state
	// counted every input exactly once, across restores).
	Keys int64 `json:"keys,omitempty"`
	OK   bool  `json:"ok"`
}

func (v VerifyResult) String() string {
	s := fmt.Sprintf("ok=%v records=%d distinct_inputs=%d", v.OK, v.Records, v.Distinct)
	if v.Keys > 0 {
		s += fmt.Sprintf(" keys=%d (per-key counts 1..n in input order)", v.Keys)
	}
	return s
}

var errVerify = errors.New("output verification failed")

// outputCheck collects what the exactly-once check needs from each output
// record.
type outputCheck struct {
	partitions int
	seen       [][]int64 // input offsets, by input partition
	records    int64
	misplaced  error // the first output record on another partition than its input
	// counts, for the keyed engine's output: by key, the input offset and
	// the count of each output record.
	counts map[string][]keyCount
}

type keyCount struct{ offset, count int64 }

// newOutputCheck returns a check of an output whose input has partitions
// partitions; with counts, of the keyed engine's output, whose per-key
// counts it checks too.
func newOutputCheck(partitions int, counts bool) *outputCheck {
	o := &outputCheck{partitions: partitions, seen: make([][]int64, partitions)}
	if counts {
		o.counts = map[string][]keyCount{}
	}
	return o
}

// add records one output record. It fails on a record it cannot parse.
func (o *outputCheck) add(m *kafka.Message) (outputFields, error) {
	f, err := parseOutput(m.Value)
	if err != nil {
		return f, fmt.Errorf("%w: %s: %v", errVerify, m.TopicPartition, err)
	}
	if f.inPartition < 0 || int(f.inPartition) >= o.partitions {
		return f, fmt.Errorf("%w: %s names input partition %d", errVerify, m.TopicPartition, f.inPartition)
	}
	if o.counts != nil {
		n, err := countOf(m.Value)
		if err != nil {
			return f, fmt.Errorf("%w: %s: %v", errVerify, m.TopicPartition, err)
		}
		o.counts[string(m.Key)] = append(o.counts[string(m.Key)], keyCount{offset: f.inOffset, count: n})
	}
	if f.inPartition != m.TopicPartition.Partition && o.misplaced == nil {
		o.misplaced = fmt.Errorf("%w: %s holds the output of input partition %d (the same key should give the same partition)",
			errVerify, m.TopicPartition, f.inPartition)
	}
	o.seen[f.inPartition] = append(o.seen[f.inPartition], f.inOffset)
	o.records++
	return f, nil
}

// result checks that the output holds exactly one record for each of the n
// input records: n records, each naming a distinct input (partition,
// offset), the offsets of every input partition forming 0..k-1 (the input
// was written by a non-transactional producer, so its offsets have no
// gaps), and each output record on the partition its input was on (same
// key, same murmur2 placement, same partition count). With counts, each
// key's counts, in the order of its inputs' offsets (a key's inputs share a
// partition), must be 1, 2, 3, ...: every input counted once, in order, by
// state that survived every restore.
func (o *outputCheck) result(topic string, n int64) (VerifyResult, error) {
	res := VerifyResult{Topic: topic, Records: o.records}
	var gap error
	for p, offs := range o.seen {
		slices.Sort(offs)
		offs = slices.Compact(offs)
		res.Distinct += int64(len(offs))
		if len(offs) > 0 && offs[len(offs)-1] != int64(len(offs)-1) && gap == nil {
			gap = fmt.Errorf("%w: input partition %d: %d distinct offsets, highest %d: some inputs have no output",
				errVerify, p, len(offs), offs[len(offs)-1])
		}
	}
	switch {
	case res.Records != n:
		return res, fmt.Errorf("%w: %s holds %d committed records, want exactly %d", errVerify, topic, res.Records, n)
	case res.Distinct != n:
		return res, fmt.Errorf("%w: %s holds %d records but only %d distinct inputs (duplicates)", errVerify, topic, res.Records, res.Distinct)
	case gap != nil:
		return res, gap
	case o.misplaced != nil:
		return res, o.misplaced
	}
	for key, cs := range o.counts {
		slices.SortFunc(cs, func(a, b keyCount) int { return cmp.Compare(a.offset, b.offset) })
		for i, c := range cs {
			if c.count != int64(i+1) {
				return res, fmt.Errorf("%w: key %s: input %d of %d (offset %d) has count %d: the state lost or repeated a record",
					errVerify, key, i+1, len(cs), c.offset, c.count)
			}
		}
		res.Keys++
	}
	res.OK = true
	return res, nil
}

// verifyOutput reads the output topic read_committed and checks it with
// outputCheck (with counts, as the keyed engine's output).
func verifyOutput(ctx context.Context, brokers, group, topic string, partitions int, n int64, counts bool) (VerifyResult, error) {
	check := newOutputCheck(partitions, counts)
	r := reader{brokers: brokers, group: group, topic: topic, partitions: partitions, want: wantN(n)}
	_, err := r.readAll(ctx, func(m *kafka.Message) error {
		_, err := check.add(m)
		return err
	})
	if err != nil {
		return VerifyResult{Topic: topic, Records: check.records}, fmt.Errorf("%w: %w", errVerify, err)
	}
	return check.result(topic, n)
}
