package keyed_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gocloud.dev/blob/memblob"

	"github.com/kordproject/kord/checkpoint"
	"github.com/kordproject/kord/checkpoint/blobstore"
	"github.com/kordproject/kord/internal/failpoint"
	"github.com/kordproject/kord/keyed"
	"github.com/kordproject/kord/vfs"
)

// TestCheckpointStorage: a job keeps its checkpoints in object storage
// (checkpoint/blobstore over a memory bucket) instead of a directory,
// crashes at checkpoint steps, is restarted from what the bucket holds, and
// its output is exactly-once; nothing is written to the directory it was
// not given.
func TestCheckpointStorage(t *testing.T) {
	bucket := memblob.OpenBucket(nil)
	defer bucket.Close()
	st := blobstore.New(bucket, "jobs/users/")
	src, want := input(11, 4, 50, 40_000)
	sink := keyed.NewMemorySink[result]()
	mem := vfs.NewMem()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	crashes := []struct {
		point string
		nth   int
	}{{failpoint.AfterMetadata, 2}, {failpoint.AfterCommit, 2}, {failpoint.DuringRestore, 1}, {failpoint.BeforeCommit, 1}, {failpoint.AfterMarker, 1}}
	crashed := 0
	for incarnation := 0; ; incarnation++ {
		require.Less(t, incarnation, 10)
		rctx := ctx
		if incarnation < len(crashes) {
			rctx = failpoint.WithHook(ctx, crashAt(crashes[incarnation].point, crashes[incarnation].nth))
		}
		j := keyed.NewJob("users", keyed.CheckpointStorage(st), keyed.FS(mem), keyed.Dir("/unused"),
			keyed.CheckpointInterval(2*time.Millisecond), keyed.BatchSize(16))
		s := keyed.FromSource(j, "events", 2, keyed.Source[event](src))
		out := keyed.Process(keyed.ByPartition(s), "count", 2, func() keyed.Operator[event, result] { return &counter{} })
		keyed.ToSink(out, "results", keyed.Sink[result](sink))
		err := j.Run(rctx)
		if errors.Is(err, failpoint.ErrCrashed) {
			t.Logf("incarnation %d crashed: %v", incarnation, err)
			crashed++
			continue
		}
		require.NoError(t, err)
		break
	}
	require.Equal(t, len(crashes), crashed, "every planned crash happened")
	checkOutput(t, sink.Committed(), want)
	names, err := st.List(t.Context(), "")
	require.NoError(t, err)
	var metas int
	for _, n := range names {
		if strings.HasSuffix(n, ".meta") {
			metas++
		}
	}
	require.Contains(t, names, checkpoint.CommittedName, "the committed marker is in the bucket")
	require.Positive(t, metas, "checkpoints are in the bucket: %v", names)
	local, err := mem.ReadDir("/unused")
	require.True(t, err != nil || len(local) == 0, "nothing in the directory: %v %v", local, err)
}
