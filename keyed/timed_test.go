package keyed_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kordproject/kord/keyed"
	"github.com/kordproject/kord/keyed/connector"
	"github.com/kordproject/kord/partitioner"
	"github.com/kordproject/kord/vfs"
)

// timedSink is a MemorySink that is a connector.Timed: it notes each
// record's time and the watermarks it is given.
type timedSink struct {
	*keyed.MemorySink[event]
	mu       sync.Mutex
	wm       int64
	advances []int64
	times    map[string]int64 // record -> the time it came with
	late     []string         // records older than the watermark before them
}

func (s *timedSink) WriteAt(ctx context.Context, epoch uint64, v event, ts int64) error {
	s.mu.Lock()
	id := fmt.Sprintf("%s/%d", v.UUID, v.Seq)
	s.times[id] = ts
	if len(s.advances) > 0 && ts < s.wm {
		s.late = append(s.late, id)
	}
	s.mu.Unlock()
	return s.MemorySink.Write(ctx, epoch, v)
}

func (s *timedSink) Advance(wm int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.wm = wm
	s.advances = append(s.advances, wm)
}

func (s *timedSink) seen() (records, advances int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.times), len(s.advances)
}

// TestTimedSink: a connector.Timed sink gets each record with its time,
// and the sink task's watermark as it advances: never backwards, never
// past a record still to come (each partition's times are in order, with
// no lateness). The input comes in two halves, the second once the
// first's watermark reached the sink.
func TestTimedSink(t *testing.T) {
	const parts, n = 4, 2_000
	src := keyed.NewMemorySource[event]("events", parts, false)
	base := time.UnixMilli(1_700_000_000_000)
	want := map[string]int64{}
	add := func(from, to int) {
		for i := from; i < to; i++ {
			u := fmt.Sprintf("user-%02d", i%37)
			at := base.Add(time.Duration(i) * time.Millisecond)
			src.AppendAt(partitioner.KeyPartition([]byte(u), parts), []byte(u), event{UUID: u, Seq: int64(i)}, at)
			want[fmt.Sprintf("%s/%d", u, i)] = at.UnixMilli()
		}
	}
	sink := &timedSink{MemorySink: keyed.NewMemorySink[event](), times: map[string]int64{}}
	j := keyed.NewJob("timed-sink", keyed.FS(vfs.NewMem()), keyed.Dir("/ckpt"), keyed.CheckpointInterval(5*time.Millisecond))
	events := keyed.FromSource(j, "events", 2, connector.Source[event](src)).Watermarks(0)
	passed := keyed.ProcessFunc(keyed.ByPartition(events), "pass", 2, func(_ []byte, e event, out *keyed.Collector[event]) error {
		out.Emit(e)
		return nil
	})
	keyed.ToSink(passed, "out", connector.Sink[event](sink))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- j.Run(ctx) }()
	add(0, n/2)
	require.Eventually(t, func() bool { r, a := sink.seen(); return r == n/2 && a > 0 }, 30*time.Second, time.Millisecond)
	add(n/2, n)
	require.Eventually(t, func() bool { r, _ := sink.seen(); return r == n }, 30*time.Second, time.Millisecond)
	cancel()
	require.NoError(t, <-done)
	require.Equal(t, want, sink.times, "each record with its time")
	require.Empty(t, sink.late, "a watermark passed a record still to come")
	for i := 1; i < len(sink.advances); i++ {
		require.Greater(t, sink.advances[i], sink.advances[i-1], "watermarks go forward")
	}
	require.Less(t, sink.advances[0], base.Add(n/2*time.Millisecond).UnixMilli(), "a watermark of the first half")
}
