package keyed_test

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kordproject/kord/keyed"
	"github.com/kordproject/kord/keyed/connector"
	"github.com/kordproject/kord/metrics"
	"github.com/kordproject/kord/partitioner"
	"github.com/kordproject/kord/vfs"
)

// failMidway fails the run once, at the job's 1000th record, then counts
// as testjob's Counter does.
type failMidway struct {
	counter
	seen *atomic.Int64
}

func (f *failMidway) Process(key []byte, e event, out *keyed.Collector[result]) error {
	if f.seen.Add(1) == 1000 {
		return errors.New("failed on purpose")
	}
	return f.counter.Process(key, e, out)
}

// samples collects j's samples by name and labels.
func samples(j *keyed.Job) map[string]float64 {
	out := map[string]float64{}
	j.Collect(func(s metrics.Sample) {
		k := s.Name
		for _, l := range s.Labels {
			k += fmt.Sprintf(",%s=%s", l.Name, l.Value)
		}
		out[k] = s.Value
	})
	return out
}

// TestJobMetrics: a job's figures (Job.Collect). A run of n events counts
// n records into each stage and n out of the keyed stage, and its
// checkpoints; a second job fails once midway and is restarted: the restart is counted, the records it read again are
// counted again (the figures are the process's, across runs), and the
// series are the same ones, none per run.
func TestJobMetrics(t *testing.T) {
	const parts, n = 4, 2000
	src := keyed.NewMemorySource[event]("events", parts, true)
	seq := map[string]int64{}
	for i := range n {
		u := fmt.Sprintf("user-%02d", i%30)
		src.Append(partitioner.KeyPartition([]byte(u), parts), []byte(u), event{UUID: u, Seq: seq[u]})
		seq[u]++
	}
	build := func(fail bool) *keyed.Job {
		seen := &atomic.Int64{}
		j := keyed.NewJob("counts", keyed.FS(vfs.NewMem()), keyed.Dir("/ckpt"), keyed.CheckpointInterval(5*time.Millisecond), keyed.BatchSize(8),
			keyed.RestartStrategy(keyed.FixedDelay(3, 0)))
		s := keyed.FromSource(j, "events", 2, connector.Source[event](src))
		out := keyed.Process(keyed.ByPartition(s), "count", 2, func() keyed.Operator[event, result] {
			if fail {
				return &failMidway{seen: seen}
			}
			return &counter{}
		})
		keyed.ToSink(out, "results", connector.Sink[result](keyed.NewMemorySink[result]()))
		return j
	}
	j := build(false)
	require.Equal(t, keyed.Status{}, j.Status())
	require.NoError(t, j.Run(t.Context()))
	m := samples(j)
	require.Equal(t, float64(n), m["kord_stage_records_in_total,kord_job=counts,stage=events,kind=source"])
	require.Equal(t, float64(n), m["kord_stage_records_in_total,kord_job=counts,stage=count,kind=operator"])
	require.Equal(t, float64(n), m["kord_stage_records_out_total,kord_job=counts,stage=count,kind=operator"])
	require.Equal(t, float64(n), m["kord_stage_records_in_total,kord_job=counts,stage=results,kind=sink"])
	require.Positive(t, m["kord_checkpoints_completed_total,kord_job=counts"])
	require.Equal(t, float64(j.Status().LastCheckpoint), m["kord_checkpoint_last_id,kord_job=counts"])
	require.Positive(t, m["kord_checkpoint_last_committed_timestamp_seconds,kord_job=counts"])
	require.Zero(t, m["kord_job_running,kord_job=counts"])
	require.Zero(t, m["kord_job_restarts_total,kord_job=counts"])
	st := j.Status()
	require.False(t, st.Running)
	require.WithinDuration(t, time.Now(), st.LastCommitted, time.Minute)

	j = build(true)
	require.NoError(t, j.Run(t.Context()))
	again := samples(j)
	require.Equal(t, 1.0, again["kord_job_restarts_total,kord_job=counts"])
	require.GreaterOrEqual(t, again["kord_stage_records_in_total,kord_job=counts,stage=events,kind=source"], float64(n))
	require.Len(t, again, len(m), "the same series after a restart")
	for k := range m {
		require.Contains(t, again, k)
	}
}
