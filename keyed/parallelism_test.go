package keyed_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kordproject/kord/keyed"
	"github.com/kordproject/kord/keyed/connector"
	"github.com/kordproject/kord/vfs"
)

// readerCount counts the readers a job opens on its source: one per
// source task.
type readerCount struct {
	*keyed.MemorySource[event]
	n atomic.Int32
}

func (s *readerCount) Reader(ctx context.Context) (connector.Reader[event], error) {
	s.n.Add(1)
	return s.MemorySource.Reader(ctx)
}

// TestDefaultParallelism: parallelism 0 is resolved when the job runs, to
// the source's partition count bounded by the CPUs, for the source and the
// keyed stage alike, in both keying modes; an explicit parallelism stays
// what it is, above the CPUs too. The output is the counting job's either
// way.
func TestDefaultParallelism(t *testing.T) {
	for _, c := range []struct {
		cpus, srcP, opP int
		wantSrc, wantOp int
		byPartition     bool
	}{
		{cpus: 8, wantSrc: 3, wantOp: 3},                    // the partition count
		{cpus: 2, wantSrc: 2, wantOp: 2},                    // bounded by the CPUs
		{cpus: 2, wantSrc: 2, wantOp: 2, byPartition: true}, // partition mode alike
		{cpus: 8, wantSrc: 3, wantOp: 3, byPartition: true},
		{cpus: 2, srcP: 3, opP: 1, wantSrc: 3, wantOp: 1}, // explicit values stay
		{cpus: 1, srcP: 0, opP: 3, wantSrc: 1, wantOp: 3, byPartition: true},
	} {
		t.Run(fmt.Sprintf("cpus=%d,src=%d,op=%d,byPartition=%v", c.cpus, c.srcP, c.opP, c.byPartition), func(t *testing.T) {
			defer keyed.SetNumCPU(c.cpus)()
			in, want := input(5, 3, 50, 2_000)
			src := &readerCount{MemorySource: in}
			sink := keyed.NewMemorySink[result]()
			j := keyed.NewJob("users", keyed.FS(vfs.NewMem()), keyed.Dir("/ckpt"), keyed.CheckpointInterval(20*time.Millisecond))
			s := keyed.FromSource(j, "events", c.srcP, connector.Source[event](src))
			k := keyed.KeyBy("uuid", func(e event) []byte { return []byte(e.UUID) }, s)
			if c.byPartition {
				k = keyed.ByPartition(s)
			}
			var ops atomic.Int32
			out := keyed.Process(k, "count", c.opP, func() keyed.Operator[event, result] {
				ops.Add(1)
				return &counter{}
			})
			keyed.ToSink(out, "results", connector.Sink[result](sink))
			require.NoError(t, j.Validate())
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			require.NoError(t, j.Run(ctx))
			require.Equal(t, c.wantSrc, int(src.n.Load()), "source tasks")
			require.Equal(t, c.wantOp, int(ops.Load()), "operator tasks")
			checkOutput(t, sink.Committed(), want)
		})
	}
}

// TestNegativeParallelism: a negative parallelism is an error naming the
// stage; 0 is not.
func TestNegativeParallelism(t *testing.T) {
	src := keyed.NewMemorySource[event]("events", 3, true)
	newJob := func(srcP, opP int) *keyed.Job {
		j := keyed.NewJob("users", keyed.FS(vfs.NewMem()), keyed.Dir("/ckpt"))
		s := keyed.FromSource(j, "events", srcP, connector.Source[event](src))
		out := keyed.Process(keyed.ByPartition(s), "count", opP, func() keyed.Operator[event, result] { return &counter{} })
		keyed.ToSink(out, "results", connector.Sink[result](keyed.NewMemorySink[result]()))
		return j
	}
	require.NoError(t, newJob(0, 0).Validate())
	require.ErrorContains(t, newJob(-1, 0).Validate(), `keyed: job "users": source "events": parallelism -1`)
	require.ErrorContains(t, newJob(0, -2).Validate(), `keyed: job "users": operator "count": parallelism -2`)
}
