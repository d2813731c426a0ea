package keyed

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kordproject/kord/keyed/connector"
	"github.com/kordproject/kord/serde"
	"github.com/kordproject/kord/vfs"
)

// waitSource records the wait of every poll of its one reader, and
// signals each poll that returned records.
type waitSource struct {
	*MemorySource[int]
	mu    sync.Mutex
	waits []time.Duration
	got   chan struct{}
}

func (s *waitSource) Reader(ctx context.Context) (connector.Reader[int], error) {
	r, err := s.MemorySource.Reader(ctx)
	return &waitReader{Reader: r, s: s}, err
}

func (s *waitSource) polls() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Duration(nil), s.waits...)
}

type waitReader struct {
	connector.Reader[int]
	s *waitSource
}

func (r *waitReader) Poll(ctx context.Context, max int, wait time.Duration) ([]connector.SourceRecord[int], bool, error) {
	r.s.mu.Lock()
	r.s.waits = append(r.s.waits, wait)
	r.s.mu.Unlock()
	recs, done, err := r.Reader.Poll(ctx, max, wait)
	if len(recs) > 0 {
		r.s.got <- struct{}{}
	}
	return recs, done, err
}

// TestIdleJobDoesNotWake: with no input, a source task polls with the idle
// wait (a quarter of the checkpoint interval, at most 100 ms) instead of
// every BufferTimeout, and an operator task without timers does not tick
// at all; a partial batch still gets polls of BufferTimeout, and every
// record gets through.
func TestIdleJobDoesNotWake(t *testing.T) {
	const buffer = 90 * time.Millisecond // idle wait: min(400 ms / 4, 100 ms) = 100 ms
	var ticks atomic.Int64
	testHookTick = func() { ticks.Add(1) }
	defer func() { testHookTick = nil }()
	src := &waitSource{MemorySource: NewMemorySource[int]("events", 1, false), got: make(chan struct{}, 16)}
	sink := NewMemorySink[int]()
	j := NewJob("idle", FS(vfs.NewMem()), Dir("/ckpt"), CheckpointInterval(400*time.Millisecond), BufferTimeout(buffer))
	s := FromSource(j, "events", 1, connector.Source[int](src))
	out := ProcessValue(ByPartition(s), "pass", 1, serde.Int64(), func(_ []byte, v int, _ *ValueState[int64], out *Collector[int]) error {
		out.Emit(v)
		return nil
	})
	ToSink(out, "results", connector.Sink[int](sink))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- j.Run(ctx) }()

	require.Eventually(t, func() bool { return len(src.polls()) >= 3 }, 10*time.Second, 5*time.Millisecond)
	before := ticks.Load()
	time.Sleep(5 * buffer)
	require.Equal(t, before, ticks.Load(), "an idle operator task ticked")
	for i, w := range src.polls() {
		require.Equal(t, 100*time.Millisecond, w, "idle poll %d", i)
	}

	// Two records, the second while the first's flush is recent: it
	// waits in a partial batch, and the next poll is BufferTimeout's.
	src.Append(0, []byte("a"), 1)
	<-src.got
	src.Append(0, []byte("b"), 2)
	<-src.got
	require.Eventually(t, func() bool { return len(sink.Committed()) == 2 }, 10*time.Second, 5*time.Millisecond)
	require.Contains(t, src.polls(), buffer, "a poll while a partial batch waited")
	cancel()
	require.NoError(t, <-done)
	require.Equal(t, []int{1, 2}, sink.Committed())
}
