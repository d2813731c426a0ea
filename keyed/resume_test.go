package keyed_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kordproject/kord/checkpoint"
	"github.com/kordproject/kord/keyed"
	"github.com/kordproject/kord/keyed/connector"
	"github.com/kordproject/kord/vfs"
)

// memberSink is a MemorySink that runs its job as one of several processes
// (connector.Membership) holding every partition, with a record per partition
// as a Kafka commit group keeps them.
type memberSink[T any] struct {
	*keyed.MemorySink[T]
	topic   string
	parts   int32
	mu      sync.Mutex
	recs    map[int32]connector.PartitionRecord
	resumes []uint64 // what Resume was told, in order
}

// Resume implements connector.Resumer (MemorySink needs none); it records
// what the engine says.
func (s *memberSink[T]) Resume(after uint64) {
	s.mu.Lock()
	s.resumes = append(s.resumes, after)
	s.mu.Unlock()
}

func newMemberSink[T any](topic string, parts int) *memberSink[T] {
	return &memberSink[T]{MemorySink: keyed.NewMemorySink[T](), topic: topic, parts: int32(parts), recs: map[int32]connector.PartitionRecord{}}
}

func (s *memberSink[T]) Assignment(context.Context) (map[string][]int32, <-chan struct{}, error) {
	var ps []int32
	for p := range s.parts {
		ps = append(ps, p)
	}
	return map[string][]int32{s.topic: ps}, make(chan struct{}), nil
}

func (s *memberSink[T]) Released() {}

func (s *memberSink[T]) Commit(ctx context.Context, ref checkpoint.Ref, offsets []checkpoint.PartitionOffset) error {
	if err := s.MemorySink.Commit(ctx, ref, offsets); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, o := range offsets {
		s.recs[o.Partition] = connector.PartitionRecord{Topic: o.Topic, Partition: o.Partition, Offset: o.Offset, Ref: ref}
	}
	return nil
}

func (s *memberSink[T]) Recorded(context.Context) (*connector.Recorded, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.recs) == 0 {
		return nil, nil
	}
	rec := &connector.Recorded{Where: "member sink"}
	for p := range s.parts {
		if r, ok := s.recs[p]; ok {
			rec.Parts = append(rec.Parts, r)
		}
	}
	return rec, nil
}

func (s *memberSink[T]) named() map[checkpoint.Ref]bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	named := map[checkpoint.Ref]bool{}
	for _, r := range s.recs {
		named[r.Ref] = true
	}
	return named
}

// resumeSink is a MemorySink that records what Resume is told.
type resumeSink struct {
	*keyed.MemorySink[result]
	resumes []uint64
}

func (s *resumeSink) Resume(after uint64) { s.resumes = append(s.resumes, after) }

// TestResume: before a run writes, the engine tells a connector.Resumer
// sink the checkpoint the run resumes after: 0 on a fresh start, the
// restored checkpoint's id after a restart, and 0 on every run of one of
// several processes, whose checkpoints are numbered from 1 again. (A Kafka
// sink's open transaction takes that epoch plus one; TestSinkResume in
// kafkaio.)
func TestResume(t *testing.T) {
	failAt1 := func() keyed.Opt {
		failed := false
		return keyed.OnCommit(func(id uint64) error {
			if id == 1 && !failed {
				failed = true
				return errors.New("on purpose")
			}
			return nil
		})
	}
	restart := keyed.RestartStrategy(keyed.FixedDelay(1, time.Millisecond))

	src, want := input(5, 4, 50, 5_000)
	sink := &resumeSink{MemorySink: keyed.NewMemorySink[result]()}
	j := keyed.NewJob("users", keyed.FS(vfs.NewMem()), keyed.Dir("/ckpt"), keyed.CheckpointInterval(20*time.Millisecond), restart, failAt1())
	out := keyed.Process(keyed.ByPartition(keyed.FromSource(j, "events", 2, connector.Source[event](src))), "count", 2, func() keyed.Operator[event, result] { return &counter{} })
	keyed.ToSink(out, "results", connector.Sink[result](sink))
	require.NoError(t, runJob(t, j))
	checkOutput(t, sink.Committed(), want)
	require.Equal(t, []uint64{0, 1}, sink.resumes, "a fresh start, then the restart from checkpoint 1")

	src, want = input(6, 4, 50, 5_000)
	ms := newMemberSink[result]("events", 4)
	j = keyed.NewJob("users", keyed.Instance("p0"), keyed.FS(vfs.NewMem()), keyed.Dir("/shared"), keyed.CheckpointInterval(20*time.Millisecond), restart, failAt1())
	out = keyed.Process(keyed.ByPartition(keyed.FromSource(j, "events", 2, connector.Source[event](src))), "count", 2, func() keyed.Operator[event, result] { return &counter{} })
	keyed.ToSink(out, "results", connector.Sink[result](ms))
	require.NoError(t, runJob(t, j))
	checkOutput(t, ms.Committed(), want)
	require.Equal(t, []uint64{0, 0}, ms.resumes, "each run of one of several processes numbers its checkpoints from 1")
}
