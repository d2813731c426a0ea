package keyed

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/kordproject/kord/checkpoint"
	"github.com/kordproject/kord/keyed/connector"
)

// MemorySource is an in-memory, replayable, partitioned source: records
// are addressed by partition and offset like a Kafka topic's. Bounded
// sources end when every partition is read to its end; unbounded ones wait
// for Append. Safe for concurrent use.
type MemorySource[T any] struct {
	topic   string
	bounded bool
	mu      sync.RWMutex
	parts   [][]connector.SourceRecord[T]
	grew    chan struct{} // closed and replaced on Append
}

// NewMemorySource returns a source of partitions empty partitions.
func NewMemorySource[T any](topic string, partitions int, bounded bool) *MemorySource[T] {
	return &MemorySource[T]{topic: topic, bounded: bounded, parts: make([][]connector.SourceRecord[T], partitions), grew: make(chan struct{})}
}

// Append adds a record to a partition and returns its offset.
func (s *MemorySource[T]) Append(partition int32, key []byte, v T) int64 {
	return s.AppendAt(partition, key, v, time.Time{})
}

// AppendAt is Append of a record whose timestamp is ts.
func (s *MemorySource[T]) AppendAt(partition int32, key []byte, v T, ts time.Time) int64 {
	s.mu.Lock()
	off := int64(len(s.parts[partition]))
	s.parts[partition] = append(s.parts[partition], connector.SourceRecord[T]{Partition: partition, Offset: off, Key: key, Value: v, Timestamp: ts})
	close(s.grew)
	s.grew = make(chan struct{})
	s.mu.Unlock()
	return off
}

// Len returns the number of records in a partition.
func (s *MemorySource[T]) Len(partition int32) int64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return int64(len(s.parts[partition]))
}

// Topic implements connector.Source.
func (s *MemorySource[T]) Topic() string { return s.topic }

// Partitions implements connector.Source.
func (s *MemorySource[T]) Partitions(context.Context) ([]int32, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]int32, len(s.parts))
	for i := range out {
		out[i] = int32(i)
	}
	return out, nil
}

// Start implements connector.Source: every partition from offset 0.
func (s *MemorySource[T]) Start(_ context.Context, partitions []int32) ([]connector.Position, error) {
	out := make([]connector.Position, len(partitions))
	for i, p := range partitions {
		out[i] = connector.Position{Partition: p}
	}
	return out, nil
}

// Reader implements connector.Source.
func (s *MemorySource[T]) Reader(context.Context) (connector.Reader[T], error) {
	return &memoryReader[T]{s: s}, nil
}

type memoryReader[T any] struct {
	s    *MemorySource[T]
	pos  []connector.Position
	next int
}

func (r *memoryReader[T]) Assign(_ context.Context, positions []connector.Position) error {
	r.s.mu.RLock()
	defer r.s.mu.RUnlock()
	for _, p := range positions {
		if int(p.Partition) >= len(r.s.parts) || p.Partition < 0 {
			return fmt.Errorf("keyed: memory source %q: no partition %d", r.s.topic, p.Partition)
		}
		if p.Offset < 0 || p.Offset > int64(len(r.s.parts[p.Partition])) {
			return fmt.Errorf("keyed: memory source %q: partition %d offset %d out of range [0, %d]", r.s.topic, p.Partition, p.Offset, len(r.s.parts[p.Partition]))
		}
	}
	r.pos = append([]connector.Position(nil), positions...)
	return nil
}

func (r *memoryReader[T]) Poll(ctx context.Context, max int, wait time.Duration) ([]connector.SourceRecord[T], bool, error) {
	for {
		r.s.mu.RLock()
		var out []connector.SourceRecord[T]
		for i := 0; i < len(r.pos) && len(out) < max; i++ {
			k := (r.next + i) % len(r.pos)
			p := &r.pos[k]
			recs := r.s.parts[p.Partition]
			n := min(int64(len(recs))-p.Offset, int64(max-len(out)), 64)
			if n > 0 {
				out = append(out, recs[p.Offset:p.Offset+n]...)
				p.Offset += n
			}
		}
		atEnd := true
		for _, p := range r.pos {
			if p.Offset < int64(len(r.s.parts[p.Partition])) {
				atEnd = false
			}
		}
		if len(r.pos) > 0 {
			r.next = (r.next + 1) % len(r.pos)
		}
		grew := r.s.grew
		r.s.mu.RUnlock()
		if len(out) > 0 || wait <= 0 {
			return out, atEnd && r.s.bounded, nil
		}
		if r.s.bounded && atEnd {
			return nil, true, nil
		}
		t := time.NewTimer(wait)
		select {
		case <-grew:
			t.Stop()
			wait = 0
		case <-t.C:
			return nil, false, nil
		case <-ctx.Done():
			t.Stop()
			return nil, false, nil
		}
	}
}

// Behind implements connector.BacklogReader: records past the reader's position.
func (r *memoryReader[T]) Behind(_ context.Context, partition int32) (bool, error) {
	r.s.mu.RLock()
	defer r.s.mu.RUnlock()
	for _, p := range r.pos {
		if p.Partition == partition {
			return p.Offset < int64(len(r.s.parts[partition])), nil
		}
	}
	return false, nil
}

var _ connector.BacklogReader = (*memoryReader[int])(nil)

func (r *memoryReader[T]) Close() error { return nil }

// MemorySink keeps output in memory and makes it visible only when the
// checkpoint that carries it commits, like a read_committed reader of a
// transactional topic: output not committed is lost on Reset (a restart).
// It records the committed checkpoint as Kafka's commit group does. Safe
// for concurrent use.
type MemorySink[T any] struct {
	mu        sync.Mutex
	pending   map[uint64][]T
	committed []T
	record    *connector.Recorded
	commits   int
	// An output (MemoryOutput) has its leader, and a leader its outputs.
	leader  any
	follows []memoryFollower
	// FailCommit, if set, is called before each commit; an error fails it
	// (with nothing committed).
	FailCommit func(ref checkpoint.Ref) error
}

var _ connector.Sink[int] = (*MemorySink[int])(nil)

// NewMemorySink returns an empty sink.
func NewMemorySink[T any]() *MemorySink[T] { return &MemorySink[T]{pending: map[uint64][]T{}} }

// Write implements connector.Sink.
func (s *MemorySink[T]) Write(_ context.Context, epoch uint64, v T) error {
	s.mu.Lock()
	s.pending[epoch] = append(s.pending[epoch], v)
	s.mu.Unlock()
	return nil
}

// Commit implements connector.Sink: the output of every epoch ≤ ref.ID becomes
// visible, in epoch order, and ref is recorded with offsets.
func (s *MemorySink[T]) Commit(_ context.Context, ref checkpoint.Ref, offsets []checkpoint.PartitionOffset) error {
	if s.leader != nil {
		return errors.New("keyed: a MemoryOutput commits with its leader, not by itself")
	}
	if s.FailCommit != nil {
		if err := s.FailCommit(ref); err != nil {
			return err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var epochs []uint64
	for e := range s.pending {
		if e <= ref.ID {
			epochs = append(epochs, e)
		}
	}
	s.commitUpTo(ref.ID)
	for _, f := range s.follows { // under s.mu: one step with this commit
		f.commitUpTo(ref.ID)
	}
	s.record = &connector.Recorded{Ref: ref, Offsets: append([]checkpoint.PartitionOffset(nil), offsets...), Where: "memory sink"}
	s.commits++
	return nil
}

// memoryFollower is a MemoryOutput, of any type, seen from its leader.
type memoryFollower interface {
	commitUpTo(id uint64)
	dropPending()
}

// commitUpTo makes the output of every epoch ≤ id visible, in epoch
// order; called with s.mu held by s or its leader.
func (s *MemorySink[T]) commitUpTo(id uint64) {
	if s.leader != nil {
		s.mu.Lock()
		defer s.mu.Unlock()
	}
	var epochs []uint64
	for e := range s.pending {
		if e <= id {
			epochs = append(epochs, e)
		}
	}
	sort.Slice(epochs, func(a, b int) bool { return epochs[a] < epochs[b] })
	for _, e := range epochs {
		s.committed = append(s.committed, s.pending[e]...)
		delete(s.pending, e)
	}
}

func (s *MemorySink[T]) dropPending() {
	s.mu.Lock()
	s.pending = map[uint64][]T{}
	s.mu.Unlock()
}

// MemoryOutput returns a further sink for a job whose first sink is
// leader: what it is given becomes visible with leader's commits, in the
// same step, as kafkaio.Output's records commit in the Kafka sink's
// transactions. Its own Commit and Recorded are not for use: the job
// commits through leader.
func MemoryOutput[O, T any](leader *MemorySink[T]) *MemorySink[O] {
	out := &MemorySink[O]{pending: map[uint64][]O{}, leader: leader}
	leader.mu.Lock()
	leader.follows = append(leader.follows, out)
	leader.mu.Unlock()
	return out
}

// CommitsWith implements connector.Participant: the leader of a
// MemoryOutput, nil for a sink of its own.
func (s *MemorySink[T]) CommitsWith() any { return s.leader }

// Recorded implements connector.Sink.
func (s *MemorySink[T]) Recorded(context.Context) (*connector.Recorded, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.record == nil {
		return nil, nil
	}
	r := *s.record
	r.Offsets = append([]checkpoint.PartitionOffset(nil), r.Offsets...)
	return &r, nil
}

// Reset implements connector.Sink: uncommitted output is dropped.
func (s *MemorySink[T]) Reset(context.Context, connector.SinkInfo) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pending = map[uint64][]T{}
	for _, f := range s.follows {
		f.dropPending()
	}
	return nil
}

// Forget implements connector.Forgetter: the record of what committed is dropped
// (the committed output stays).
func (s *MemorySink[T]) Forget(context.Context, connector.SinkInfo) error {
	s.mu.Lock()
	s.record = nil
	s.mu.Unlock()
	return nil
}

// Committed returns the committed output, in commit order.
func (s *MemorySink[T]) Committed() []T {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]T(nil), s.committed...)
}

// Commits returns how many commits succeeded.
func (s *MemorySink[T]) Commits() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.commits
}
