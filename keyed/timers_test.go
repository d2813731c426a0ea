//go:build kordfailpoints

package keyed_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kordproject/kord/internal/failpoint"
	"github.com/kordproject/kord/keyed"
	"github.com/kordproject/kord/keyed/connector"
	"github.com/kordproject/kord/partitioner"
	"github.com/kordproject/kord/serde"
	"github.com/kordproject/kord/vfs"
)

// bucketCounter counts each key's events per second of event time in map
// state and registers an event-time timer at each second's last
// millisecond; the timer emits the second's count and forgets it: a
// tumbling one-second window built on timers.
type bucketCounter struct {
	counts *keyed.MapState[int64, int64]
}

func (c *bucketCounter) Open(b *keyed.Backend) (err error) {
	c.counts, err = keyed.Map(b, "counts", serde.Int64(), serde.Int64())
	return err
}

func (c *bucketCounter) Process(key []byte, e event, out *keyed.Collector[result]) error {
	sec := out.Timestamp().UnixMilli() / 1000
	n, _ := c.counts.Get(sec)
	c.counts.Put(sec, n+1)
	out.RegisterTimer(keyed.EventTime, time.UnixMilli((sec+1)*1000-1))
	return nil
}

func (c *bucketCounter) OnTimer(key []byte, t keyed.Timer, out *keyed.Collector[result]) error {
	if t.Kind != keyed.EventTime {
		return fmt.Errorf("a %v timer", t.Kind)
	}
	if !out.Timestamp().Equal(t.Time) || string(out.Key()) != string(key) {
		return fmt.Errorf("the collector says %v %q during timer %v of %q", out.Timestamp(), out.Key(), t.Time, key)
	}
	sec := (t.Time.UnixMilli()+1)/1000 - 1
	n, ok := c.counts.Get(sec)
	if !ok {
		return fmt.Errorf("key %s: timer of second %d with no count", key, sec)
	}
	c.counts.Delete(sec)
	out.Emit(result{UUID: string(key), Seq: sec, Count: n})
	return nil
}

// TestEventTimersExactlyOnce: every key's per-second counts, emitted by
// event-time timers, equal a model's computed from the input, each once,
// across crashes at random checkpoint steps and restores at another
// parallelism (timers are keyed state and move with their key groups).
func TestEventTimersExactlyOnce(t *testing.T) {
	seeds := 20
	if testing.Short() {
		seeds = 5
	}
	for seed := uint64(1); seed <= uint64(seeds); seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 5))
			const parts = 4
			src := keyed.NewMemorySource[event]("events", parts, true)
			model := map[string]int64{} // "key/second" → count
			seq := map[string]int64{}
			clock := make([]int64, parts)
			n := 3_000 + r.IntN(5_000)
			for i := 0; i < n; i++ {
				u := fmt.Sprintf("user-%02d", r.IntN(30))
				p := partitioner.KeyPartition([]byte(u), parts)
				clock[p] += int64(r.IntN(12))
				src.AppendAt(p, []byte(u), event{UUID: u, Seq: seq[u]}, time.UnixMilli(clock[p]))
				seq[u]++
				model[fmt.Sprintf("%s/%d", u, clock[p]/1000)]++
			}
			mem := vfs.NewMem()
			sink := keyed.NewMemorySink[result]()
			keyBy := r.IntN(2) == 0
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			crashes := 0
			for incarnation := 0; ; incarnation++ {
				require.Less(t, incarnation, 10)
				j := keyed.NewJob("timers", keyed.FS(mem), keyed.Dir("/ckpt"), keyed.CheckpointInterval(time.Duration(1+r.IntN(4))*time.Millisecond),
					keyed.BatchSize(1+r.IntN(64)))
				s := keyed.FromSource(j, "events", 1+r.IntN(3), connector.Source[event](src)).Watermarks(10 * time.Millisecond)
				k := keyed.ByPartition(s)
				if keyBy {
					k = keyed.KeyBy("uuid", func(e event) []byte { return []byte(e.UUID) }, s)
				}
				out := keyed.Process(k, "buckets", 1+r.IntN(3), func() keyed.Operator[event, result] { return &bucketCounter{} })
				keyed.ToSink(out, "results", connector.Sink[result](sink))
				rctx := ctx
				if incarnation < 3 {
					rctx = failpoint.WithHook(ctx, crashAt(crashPoints[r.IntN(len(crashPoints))], 1+r.IntN(4)))
				}
				err := j.Run(rctx)
				if errors.Is(err, failpoint.ErrCrashed) {
					mem = mem.CrashClone()
					crashes++
					continue
				}
				require.NoError(t, err)
				break
			}
			t.Logf("seed %d: %d events, keyBy %v, %d crashes", seed, n, keyBy, crashes)
			got := map[string]int64{}
			for _, res := range sink.Committed() {
				id := fmt.Sprintf("%s/%d", res.UUID, res.Seq)
				_, dup := got[id]
				require.False(t, dup, "second %s emitted twice", id)
				got[id] = res.Count
			}
			require.Equal(t, model, got)
		})
	}
}

// TestTimerWithoutOnTimer: an operator that is no TimerOperator and
// registers a timer fails the job, saying why.
func TestTimerWithoutOnTimer(t *testing.T) {
	src, _ := stampedInput(2, 5, 50)
	j := keyed.NewJob("timers", keyed.FS(vfs.NewMem()), keyed.Dir("/ckpt"), keyed.RestartStrategy(keyed.FixedDelay(0, 0)))
	s := keyed.FromSource(j, "events", 1, connector.Source[event](src))
	out := keyed.ProcessValue(keyed.ByPartition(s), "count", 1, serde.Int64(),
		func(key []byte, e event, n *keyed.ValueState[int64], out *keyed.Collector[result]) error {
			out.RegisterTimer(keyed.EventTime, out.Timestamp())
			return nil
		})
	keyed.ToSink(out, "results", connector.Sink[result](keyed.NewMemorySink[result]()))
	require.ErrorContains(t, j.Run(context.Background()), "no keyed.TimerOperator")
}

// pinger fires three processing-time timers per key, one after the
// other, 20 ms apart, each emitting a result numbered by its firing.
type pinger struct {
	fired *keyed.ValueState[int64]
}

func (p *pinger) Open(b *keyed.Backend) (err error) {
	p.fired, err = keyed.Value(b, "fired", serde.Int64())
	return err
}

func (p *pinger) Process(key []byte, e event, out *keyed.Collector[result]) error {
	if e.Seq == 0 {
		out.RegisterTimer(keyed.ProcessingTime, time.Now().Add(20*time.Millisecond))
	}
	return nil
}

func (p *pinger) OnTimer(key []byte, t keyed.Timer, out *keyed.Collector[result]) error {
	n, _ := p.fired.Get()
	p.fired.Set(n + 1)
	out.Emit(result{UUID: string(key), Seq: n, Count: -1})
	if n+1 < 3 {
		out.RegisterTimer(keyed.ProcessingTime, time.Now().Add(20*time.Millisecond))
	}
	return nil
}

// TestProcessingTimersExactlyOnce: each key's chain of three
// processing-time timers fires three times in the committed output, in
// order, across a crash and a restore (whose timers then fire on the new
// run's clock).
func TestProcessingTimersExactlyOnce(t *testing.T) {
	const keys = 40
	src := keyed.NewMemorySource[event]("events", 2, false)
	for i := 0; i < keys; i++ {
		u := fmt.Sprintf("user-%02d", i)
		src.AppendAt(partitioner.KeyPartition([]byte(u), 2), []byte(u), event{UUID: u}, time.UnixMilli(1))
	}
	mem := vfs.NewMem()
	sink := keyed.NewMemorySink[result]()
	build := func() *keyed.Job {
		j := keyed.NewJob("pings", keyed.FS(mem), keyed.Dir("/ckpt"), keyed.CheckpointInterval(5*time.Millisecond))
		s := keyed.FromSource(j, "events", 1, connector.Source[event](src))
		out := keyed.Process(keyed.ByPartition(s), "ping", 2, func() keyed.Operator[event, result] { return &pinger{} })
		keyed.ToSink(out, "results", connector.Sink[result](sink))
		return j
	}
	err := build().Run(failpoint.WithHook(context.Background(), crashAt(failpoint.AfterCommit, 6)))
	require.ErrorIs(t, err, failpoint.ErrCrashed)
	mem = mem.CrashClone()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- build().Run(ctx) }()
	require.Eventually(t, func() bool { return len(sink.Committed()) >= 3*keys }, 20*time.Second, 10*time.Millisecond)
	time.Sleep(100 * time.Millisecond) // any further firing would show
	cancel()
	require.NoError(t, <-done)
	next := map[string]int64{}
	for _, r := range sink.Committed() {
		require.Equal(t, next[r.UUID], r.Seq, "key %s: firing %d", r.UUID, r.Seq)
		next[r.UUID]++
	}
	require.Len(t, next, keys)
	for k, n := range next {
		require.Equal(t, int64(3), n, "key %s", k)
	}
}

// TestReservedStateNames: state names starting with __ are kord's.
func TestReservedStateNames(t *testing.T) {
	b, err := keyed.NewBackend("op", 4, keyed.KeyGroupRange{Start: 0, End: 3})
	require.NoError(t, err)
	_, err = keyed.Map(b, "__timers-event", serde.Int64(), serde.Int64())
	require.ErrorContains(t, err, "kord's")
	_, err = keyed.Value(b, "_one_underscore", serde.Int64())
	require.NoError(t, err)
}
