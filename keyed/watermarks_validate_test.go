package keyed_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kordproject/kord/keyed"
	"github.com/kordproject/kord/keyed/connector"
	"github.com/kordproject/kord/serde"
	"github.com/kordproject/kord/vfs"
)

// TestWindowWithoutWatermarks: a window stage fed by a source without
// Watermarks would never fire, not even at the end of a bounded input;
// Validate refuses it, naming the stage and the source, also through a
// first stage and a re-key.
func TestWindowWithoutWatermarks(t *testing.T) {
	count := func(k *keyed.KeyedStream[string, string]) {
		out := keyed.WindowAggregate(k, "windows", 1, keyed.Tumbling(time.Second), serde.Int64(),
			keyed.Aggregator[string, int64]{Init: func() int64 { return 0 }, Add: func(n int64, _ string) int64 { return n + 1 }},
			func(key string, _ keyed.Window, n int64) int64 { return n }, nil)
		keyed.ToSink(out, "results", connector.Sink[int64](keyed.NewMemorySink[int64]()))
	}
	job := func(name string) (*keyed.Job, *keyed.Stream[string]) {
		j := keyed.NewJob(name, keyed.FS(vfs.NewMem()), keyed.Dir("/ckpt"))
		return j, keyed.FromSource(j, "clicks", 1, connector.Source[string](keyed.NewMemorySource[string]("clicks", 1, true)))
	}
	byValue := func(s *keyed.Stream[string]) *keyed.KeyedStream[string, string] {
		return keyed.KeyByString("value", func(v string) string { return v }, s)
	}

	j, s := job("no-watermarks")
	count(byValue(s))
	require.ErrorContains(t, j.Validate(), `stage "windows" works in event time and source "clicks" sends no watermarks`)

	j, s = job("two-stages")
	first := keyed.ProcessValue(byValue(s), "first", 1, serde.Int64(),
		func(key string, v string, _ *keyed.ValueState[int64], out *keyed.Collector[string]) error {
			out.Emit(v)
			return nil
		})
	count(byValue(keyed.MapValues(first, func(v string) string { return v })))
	require.ErrorContains(t, j.Validate(), `source "clicks" sends no watermarks`)

	j, s = job("with-watermarks")
	count(byValue(s.Watermarks(0)))
	require.NoError(t, j.Validate())
}

// TestNilCodec: a state codec left nil is a declaration error, not a
// panic inside Run.
func TestNilCodec(t *testing.T) {
	j := keyed.NewJob("nil-codec", keyed.FS(vfs.NewMem()), keyed.Dir("/ckpt"))
	s := keyed.FromSource(j, "clicks", 1, connector.Source[string](keyed.NewMemorySource[string]("clicks", 1, true))).Watermarks(0)
	k := keyed.KeyByString("value", func(v string) string { return v }, s)
	a := keyed.ProcessValue(k, "count", 1, nil,
		func(key string, v string, _ *keyed.ValueState[int64], out *keyed.Collector[string]) error { return nil })
	b := keyed.WindowApply(k, "windows", 1, keyed.Tumbling(time.Second), nil,
		func(key string, _ keyed.Window, vs []string) string { return key }, nil)
	keyed.ToSink(keyed.Union(a, b), "results", connector.Sink[string](keyed.NewMemorySink[string]()))
	err := j.Validate()
	require.ErrorContains(t, err, `operator "count": ProcessValue needs a codec`)
	require.ErrorContains(t, err, `operator "windows": a window's state needs a codec`)
}

// TestWatermarkAfterBoundedRun: the end of a bounded input fires every
// window; the checkpoint after it records the latest time those made
// final, so that a later run on more input takes a record of a fired
// window as late (counted, sent on as late) instead of opening the window
// again and firing it twice, the second time with part of its records;
// and a record past every fired window is on time. (Found by a newcomer's
// trial, issue 36: the checkpoint recorded no watermark after the end.)
func TestWatermarkAfterBoundedRun(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	src := keyed.NewMemorySource[string]("hits", 1, true)
	sink := keyed.NewMemorySink[string]()
	fsys := vfs.NewMem()
	add := func(s int) { src.AppendAt(0, []byte("k"), "hit", t0.Add(time.Duration(s)*time.Second)) }
	run := func() *keyed.Job {
		j := keyed.NewJob("rerun", keyed.FS(fsys), keyed.Dir("/ckpt"))
		s := keyed.FromSource(j, "hits", 1, connector.Source[string](src)).Watermarks(5 * time.Second)
		out := keyed.WindowAggregate(keyed.ByPartition(s), "windows", 1, keyed.Tumbling(time.Minute), serde.Int64(),
			keyed.Aggregator[string, int64]{Init: func() int64 { return 0 }, Add: func(n int64, _ string) int64 { return n + 1 }},
			func(_ []byte, w keyed.Window, n int64) string { return fmt.Sprintf("%s %d", w.Start.Sub(t0), n) },
			func(_ []byte, _ string) (string, bool) { return "late", true })
		keyed.ToSink(out, "results", connector.Sink[string](sink))
		require.NoError(t, j.Run(context.Background()))
		return j
	}
	add(10)
	add(70)
	add(130) // the end fires [0s, 60s), [60s, 120s) and [120s, 180s)
	run()
	require.Equal(t, []string{"0s 1", "1m0s 1", "2m0s 1"}, sink.Committed())
	add(20)  // its window fired in run 1
	add(135) // so did this one's, at the end
	add(200) // a new window
	j := run()
	require.Equal(t, []string{"0s 1", "1m0s 1", "2m0s 1", "late", "late", "3m0s 1"}, sink.Committed())
	require.Equal(t, int64(2), j.LateRecords())
}

// TestWatermarkRestoredPerPartition: a restore starts each partition's
// watermark where it stood at the checkpoint. Partition 1's one record is
// far ahead and no more come; partition 0 goes on after the restore, and
// its new record must fire the window it closes, as it would have without
// the restore. Forgetting partition 1's time held the watermark back for
// ever (TestScaledHopWindows met that on Kafka: after a handover, a source
// task whose partitions had been read to their ends).
func TestWatermarkRestoredPerPartition(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	src := keyed.NewMemorySource[string]("hits", 2, false)
	sink := keyed.NewMemorySink[string]()
	fsys := vfs.NewMem()
	add := func(p int32, s int) { src.AppendAt(p, []byte("k"), "hit", t0.Add(time.Duration(s)*time.Second)) }
	run := func(want int) {
		j := keyed.NewJob("restored-times", keyed.FS(fsys), keyed.Dir("/ckpt"), keyed.CheckpointInterval(10*time.Millisecond))
		s := keyed.FromSource(j, "hits", 1, connector.Source[string](src)).Watermarks(0)
		out := keyed.WindowAggregate(keyed.ByPartition(s), "windows", 1, keyed.Tumbling(10*time.Second), serde.Int64(),
			keyed.Aggregator[string, int64]{Init: func() int64 { return 0 }, Add: func(n int64, _ string) int64 { return n + 1 }},
			func(_ []byte, w keyed.Window, n int64) string { return fmt.Sprintf("%s %d", w.Start.Sub(t0), n) }, nil)
		keyed.ToSink(out, "results", connector.Sink[string](sink))
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		done := make(chan error, 1)
		go func() { done <- j.Run(ctx) }()
		deadline := time.After(20 * time.Second)
		for len(sink.Committed()) < want {
			select {
			case err := <-done:
				t.Fatalf("the run ended with %d results of %d: %v", len(sink.Committed()), want, err)
			case <-deadline:
				cancel()
				<-done
				t.Fatalf("no result %d in 20 s (the watermark held back): %q", want, sink.Committed())
			case <-time.After(5 * time.Millisecond):
			}
		}
		cancel()
		require.NoError(t, <-done)
	}
	add(1, 100) // partition 1: one record, far ahead, and no more
	add(0, 5)
	add(0, 15) // closes [0s, 10s)
	run(1)
	add(0, 25) // closes [10s, 20s): partition 1 stood at 100 s
	run(2)
	require.Equal(t, []string{"0s 1", "10s 1"}, sink.Committed())
}

// batchSink is a MemorySink that is a connector.BatchWriter: it counts the
// batches and the records that came through Write instead.
type batchSink struct {
	*keyed.MemorySink[string]
	batches, records, writes int
}

func (s *batchSink) Write(ctx context.Context, epoch uint64, v string) error {
	s.writes++
	return s.MemorySink.Write(ctx, epoch, v)
}

func (s *batchSink) WriteBatch(ctx context.Context, epoch uint64, vs []string) error {
	s.batches++
	s.records += len(vs)
	for _, v := range vs {
		if err := s.MemorySink.Write(ctx, epoch, v); err != nil {
			return err
		}
	}
	return nil
}

// TestSinkBatchWriter: the sink task hands a connector.BatchWriter each
// message's records in one WriteBatch, in their order, and calls its Write
// for none of them.
func TestSinkBatchWriter(t *testing.T) {
	const n = 5000
	src := keyed.NewMemorySource[string]("lines", 2, true)
	for i := range n {
		src.Append(int32(i%2), []byte("k"), fmt.Sprintf("%d %d", i%2, i))
	}
	sink := &batchSink{MemorySink: keyed.NewMemorySink[string]()}
	j := keyed.NewJob("batches", keyed.FS(vfs.NewMem()), keyed.Dir("/ckpt"), keyed.BatchSize(64))
	s := keyed.FromSource(j, "lines", 2, connector.Source[string](src))
	keyed.ToSink(keyed.ProcessFunc(keyed.ByPartition(s), "same", 2, func(_ []byte, v string, out *keyed.Collector[string]) error { out.Emit(v); return nil }), "out", connector.Sink[string](sink))
	require.NoError(t, j.Run(t.Context()))
	got := sink.Committed()
	require.Len(t, got, n)
	require.Equal(t, n, sink.records)
	require.Zero(t, sink.writes, "records written one by one")
	require.Greater(t, sink.batches, 1)
	require.Less(t, sink.batches, n/10, "batches of %d records", n)
	next := map[string]int{"0": 0, "1": 1}
	for _, line := range got {
		var p string
		var i int
		_, err := fmt.Sscanf(line, "%s %d", &p, &i)
		require.NoError(t, err)
		require.Equal(t, next[p], i, "partition %s out of order", p)
		next[p] = i + 2
	}
}
