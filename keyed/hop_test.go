package keyed_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kordproject/kord/checkpoint"
	"github.com/kordproject/kord/keyed"
	"github.com/kordproject/kord/keyed/connector"
	"github.com/kordproject/kord/partitioner"
	"github.com/kordproject/kord/serde"
	"github.com/kordproject/kord/vfs"
)

// memGroup is the Kafka side of a job of several processes, in memory:
// a record per partition (the commit group's) and the hop topics, whose
// records become readable when the checkpoint that wrote them commits.
type memGroup struct {
	mu       sync.Mutex
	recs     map[string]connector.PartitionRecord // by topic[partition]
	hops     map[string]*keyed.MemorySource[connector.HopRecord]
	hopParts int
}

func newMemGroup() *memGroup {
	return &memGroup{recs: map[string]connector.PartitionRecord{}, hops: map[string]*keyed.MemorySource[connector.HopRecord]{}}
}

// memProc is one process's first sink: a MemorySink that assigns it fixed
// partitions (connector.Membership), keeps the group's records, and
// carries hops (connector.Hops).
type memProc[T any] struct {
	*keyed.MemorySink[T]
	g        *memGroup
	assigned map[string][]int32
	mu       sync.Mutex
	pending  map[uint64][]hopWrite // by epoch: hop records not committed yet
}

type hopWrite struct {
	topic string
	r     connector.HopRecord
}

func hopTopic(stage string) string { return "hop." + stage }

func (p *memProc[T]) Assignment(context.Context) (map[string][]int32, <-chan struct{}, error) {
	return p.assigned, make(chan struct{}), nil
}
func (p *memProc[T]) Released() {}

func (p *memProc[T]) Reset(ctx context.Context, info connector.SinkInfo) error {
	p.mu.Lock()
	p.pending = map[uint64][]hopWrite{}
	p.mu.Unlock()
	return p.MemorySink.Reset(ctx, info)
}

func (p *memProc[T]) Commit(ctx context.Context, ref checkpoint.Ref, offsets []checkpoint.PartitionOffset) error {
	if err := p.MemorySink.Commit(ctx, ref, offsets); err != nil {
		return err
	}
	p.g.mu.Lock()
	defer p.g.mu.Unlock()
	for _, o := range offsets {
		p.g.recs[fmt.Sprintf("%s[%d]", o.Topic, o.Partition)] = connector.PartitionRecord{Topic: o.Topic, Partition: o.Partition, Offset: o.Offset, Ref: ref}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for epoch, ws := range p.pending {
		if epoch > ref.ID {
			continue
		}
		for _, w := range ws {
			h := p.g.hops[w.topic]
			part := w.r.Partition
			if w.r.Mark == nil {
				part = partitioner.KeyPartition(w.r.Key, p.g.hopParts)
			}
			h.AppendAt(part, w.r.Key, w.r, time.UnixMilli(max(w.r.Time, 0)))
		}
		delete(p.pending, epoch)
	}
	return nil
}

func (p *memProc[T]) Recorded(context.Context) (*connector.Recorded, error) {
	p.g.mu.Lock()
	defer p.g.mu.Unlock()
	if len(p.g.recs) == 0 {
		return nil, nil
	}
	rec := &connector.Recorded{Where: "the test's group"}
	for _, r := range p.g.recs {
		rec.Parts = append(rec.Parts, r)
	}
	return rec, nil
}

func (p *memProc[T]) Hop(_, stage string) (connector.Sink[connector.HopRecord], connector.Source[connector.HopRecord]) {
	p.g.mu.Lock()
	defer p.g.mu.Unlock()
	return &memHopOut[T]{p: p, topic: hopTopic(stage)}, p.g.hops[hopTopic(stage)]
}

func (p *memProc[T]) CreateHop(_ context.Context, topic string, partitions int) error {
	p.g.mu.Lock()
	defer p.g.mu.Unlock()
	if _, ok := p.g.hops[topic]; !ok || p.g.hopParts != partitions {
		return fmt.Errorf("hop %s: %d partitions, want %d", topic, p.g.hopParts, partitions)
	}
	return nil
}

// memHopOut writes a hop into its process's pending records.
type memHopOut[T any] struct {
	p     *memProc[T]
	topic string
}

func (o *memHopOut[T]) CommitsWith() any                                { return o.p }
func (o *memHopOut[T]) Reset(context.Context, connector.SinkInfo) error { return nil }
func (o *memHopOut[T]) Write(_ context.Context, epoch uint64, r connector.HopRecord) error {
	o.p.mu.Lock()
	defer o.p.mu.Unlock()
	o.p.pending[epoch] = append(o.p.pending[epoch], hopWrite{o.topic, r})
	return nil
}
func (o *memHopOut[T]) Commit(context.Context, checkpoint.Ref, []checkpoint.PartitionOffset) error {
	return fmt.Errorf("a hop commits with its process")
}
func (o *memHopOut[T]) Recorded(context.Context) (*connector.Recorded, error) { return nil, nil }

// userWindow is a count of one user's events in one window.
type userWindow struct {
	User  string
	Start int64
	Count int64
}

// TestHopWatermarks: event time across a hop, between two processes that
// own fixed input partitions. Users' events, 20 ms apart, are counted per
// user in one-second windows after a hop keyed by user, coming while the
// job runs, then a record an hour ahead in every partition. Process p0 owns
// input partitions 0 and 1 and every hop partition; p1 owns input
// partitions 2 and 3, whose events run 30 s behind in event time, and no
// hop partition: its records and its marks reach the stage through the
// hop alone. Every window fires exactly once with the model's count, and
// no record is late. Taking the most of the writers' marks instead of the
// least fires p1's users' windows before their records come (late: it
// failed 1 run of 1), and so does taking the least of those heard before
// every writer was (2 runs of 3).
func TestHopWatermarks(t *testing.T) {
	const parts, events, step, lag = 4, 4000, 20 * time.Millisecond, 30 * time.Second
	in := keyed.NewMemorySource[event]("events", parts, false)
	want := map[string]int64{}
	base := time.UnixMilli(1_700_000_000_000)
	type rec struct {
		p  int32
		u  string
		at time.Time
	}
	var input []rec
	for i := range events {
		u := fmt.Sprintf("user-%02d", i%24)
		p := partitioner.KeyPartition([]byte(u), parts)
		at := base.Add(time.Duration(i) * step)
		if p >= 2 {
			at = at.Add(-lag)
		}
		input = append(input, rec{p, u, at})
		want[fmt.Sprintf("%s/%d", u, at.UnixMilli()/1000*1000)]++
	}
	// The events come as the job runs, 100 every 25 ms; then a record far
	// ahead in every partition closes every window of theirs.
	feed := func() {
		for i, r := range input {
			in.AppendAt(r.p, []byte(r.u), event{UUID: r.u}, r.at)
			if i%100 == 99 {
				time.Sleep(25 * time.Millisecond)
			}
		}
		for p := range int32(parts) {
			in.AppendAt(p, []byte("ahead"), event{UUID: "ahead"}, base.Add(time.Hour))
		}
	}
	g := newMemGroup()
	g.hops[hopTopic("count")] = keyed.NewMemorySource[connector.HopRecord](hopTopic("count"), parts, false)
	g.hopParts = parts
	mem := vfs.NewMem()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	type proc struct {
		j    *keyed.Job
		sink *memProc[userWindow]
		done chan error
	}
	start := func(id string, assigned map[string][]int32) proc {
		sink := &memProc[userWindow]{MemorySink: keyed.NewMemorySink[userWindow](), g: g, assigned: assigned, pending: map[uint64][]hopWrite{}}
		j := keyed.NewJob("windows", keyed.FS(mem), keyed.Dir("/ckpt"), keyed.Instance(id), keyed.CheckpointInterval(20*time.Millisecond), keyed.BatchSize(16))
		s := keyed.FromSource(j, "events", 1, connector.Source[event](in)).Watermarks(0)
		counts := keyed.WindowAggregate(keyed.KeyByString("user", func(e event) string { return e.UUID }, s).Serde(serde.JSON[event]()), "count", 2,
			keyed.Tumbling(time.Second), serde.Int64(),
			keyed.Aggregator[event, int64]{Init: func() int64 { return 0 }, Add: func(n int64, _ event) int64 { return n + 1 }},
			func(user string, w keyed.Window, n int64) userWindow {
				return userWindow{User: user, Start: w.Start.UnixMilli(), Count: n}
			}, nil)
		keyed.ToSink(counts, "windows", connector.Sink[userWindow](sink))
		p := proc{j: j, sink: sink, done: make(chan error, 1)}
		go func() { p.done <- j.Run(ctx) }()
		return p
	}
	p0 := start("p0", map[string][]int32{"events": {0, 1}, hopTopic("count"): {0, 1, 2, 3}})
	p1 := start("p1", map[string][]int32{"events": {2, 3}})
	go feed()
	committed := func() []userWindow { return append(p0.sink.Committed(), p1.sink.Committed()...) }
	for deadline := time.Now().Add(time.Minute); len(committed()) < len(want); {
		select {
		case err := <-p0.done:
			t.Fatalf("p0 ended: %v", err)
		case err := <-p1.done:
			t.Fatalf("p1 ended: %v", err)
		case <-time.After(10 * time.Millisecond):
		}
		require.Zero(t, p0.j.LateRecords()+p1.j.LateRecords(), "late records")
		require.True(t, time.Now().Before(deadline), "%d windows of %d fired in a minute", len(committed()), len(want))
	}
	time.Sleep(100 * time.Millisecond) // any window twice would come now
	cancel()
	require.NoError(t, <-p0.done)
	require.NoError(t, <-p1.done)
	got := map[string]int64{}
	for _, w := range committed() {
		k := fmt.Sprintf("%s/%d", w.User, w.Start)
		require.NotContains(t, got, k, "window %s fired twice", k)
		got[k] = w.Count
	}
	require.Zero(t, p0.j.LateRecords()+p1.j.LateRecords(), "late records")
	require.Equal(t, want, got)
	require.Empty(t, p1.sink.Committed(), "p1 owns no hop partition: no window of its own")
}
