//go:build kordfailpoints

package keyed_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/kordproject/kord/keyed"
	"github.com/kordproject/kord/keyed/connector"
	"github.com/kordproject/kord/partitioner"
	"github.com/kordproject/kord/vfs"
	"github.com/stretchr/testify/require"
)

// Beside windows_test.go (built with the tag), whose window helpers it
// uses.

// TestWindowsAtStageTwo: event time reaches a second stage. A first stage
// (by partition) passes each event on; a second, keyed by user, counts
// them in 100 ms tumbling windows. Its windows fire only on the watermark
// the first stage's tasks forward (the end of the bounded input makes it
// the end of time): every (user, window) comes out once, with the count
// the input has, and none is late; a failure and restart in between.
func TestWindowsAtStageTwo(t *testing.T) {
	const parts = 4
	src := keyed.NewMemorySource[event]("events", parts, true)
	r := rand.New(rand.NewPCG(15, 15))
	want := map[string]int64{} // user/window start -> count
	seq := map[string]int64{}
	base := time.UnixMilli(1_700_000_000_000)
	at := make([]int64, parts) // each partition's time goes forward
	for range 4_000 {
		u := fmt.Sprintf("user-%02d", r.IntN(40))
		p := partitioner.KeyPartition([]byte(u), parts)
		at[p] += int64(r.IntN(7))
		src.AppendAt(p, []byte(u), event{UUID: u, Seq: seq[u]}, base.Add(time.Duration(at[p])*time.Millisecond))
		seq[u]++
		want[fmt.Sprintf("%s/%d", u, (base.UnixMilli()+at[p])/100*100)]++
	}
	sink := keyed.NewMemorySink[windowCount]()
	fail, failed := failOnce(1)
	j := keyed.NewJob("stage-two-windows", keyed.FS(vfs.NewMem()), keyed.Dir("/ckpt"), keyed.CheckpointInterval(5*time.Millisecond),
		keyed.RestartStrategy(keyed.FixedDelay(1, time.Millisecond)), fail)
	events := keyed.FromSource(j, "events", 2, connector.Source[event](src)).Watermarks(0)
	passed := keyed.ProcessFunc(keyed.ByPartition(events), "pass", 2, func(_ []byte, e event, out *keyed.Collector[event]) error {
		out.Emit(e)
		return nil
	})
	byUser := keyed.KeyBy("uuid", func(e event) []byte { return []byte(e.UUID) }, passed)
	keyed.ToSink(countWindows(byUser, 3, keyed.Tumbling(100*time.Millisecond), false, nil), "out", connector.Sink[windowCount](sink))
	require.NoError(t, j.Validate())
	require.NoError(t, runJob(t, j))
	require.True(t, *failed, "the job failed and restarted")
	require.Zero(t, j.LateRecords())
	got := map[string]int64{}
	for _, w := range sink.Committed() {
		k := fmt.Sprintf("%s/%d", w.Key, w.Start)
		require.NotContains(t, got, k, "window %s fired twice", k)
		got[k] = w.Count
	}
	require.Equal(t, want, got)
}
