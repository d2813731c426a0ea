//go:build kordfailpoints

package keyed_test

import (
	"context"
	"errors"
	"path"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gocloud.dev/blob/memblob"

	"github.com/kordproject/kord/checkpoint/blobstore"
	"github.com/kordproject/kord/internal/failpoint"
	"github.com/kordproject/kord/internal/layout"
	"github.com/kordproject/kord/internal/rig/faultbucket"
	"github.com/kordproject/kord/keyed"
	"github.com/kordproject/kord/keyed/connector"
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
		s := keyed.FromSource(j, "events", 2, connector.Source[event](src))
		out := keyed.Process(keyed.ByPartition(s), "count", 2, func() keyed.Operator[event, result] { return &counter{} })
		keyed.ToSink(out, "results", connector.Sink[result](sink))
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
	require.Contains(t, names, layout.CommittedName, "the committed marker is in the bucket")
	require.Positive(t, metas, "checkpoints are in the bucket: %v", names)
	local, err := mem.ReadDir("/unused")
	require.True(t, err != nil || len(local) == 0, "nothing in the directory: %v %v", local, err)
}

// TestCheckpointStorageCancel: cancelling a job reaches its checkpoint
// storage. The bucket stops answering while a checkpoint's state files are
// written; Run's context then passes its deadline, and Run ends within the
// stop timeout and a margin, with the stop timeout's error, instead of
// waiting for the bucket (an hour, the store's own timeout).
func TestCheckpointStorageCancel(t *testing.T) {
	bucket := memblob.OpenBucket(nil)
	defer bucket.Close()
	// A state file's put waits for its context: the bucket stopped
	// answering. Not closed: Close waits for the requests under way, which
	// a store that ignored its context would leave blocked for an hour.
	fb := faultbucket.New(bucket)
	hanged := make(chan struct{})
	var once sync.Once
	fb.Set(func(ctx context.Context, op faultbucket.Op, key string) error {
		if n, ok := layout.ParseName(path.Base(key)); op == faultbucket.Write && ok && n.Kind == layout.KindState {
			once.Do(func() { close(hanged) })
			return faultbucket.Hang(ctx)
		}
		return nil
	})
	st := blobstore.New(fb.Blob(), "jobs/users/", blobstore.Timeout(time.Hour))
	src, _ := inputOf(11, 4, 50, 1_000, false)
	j := keyed.NewJob("users", keyed.CheckpointStorage(st), keyed.FS(vfs.NewMem()), keyed.Dir("/unused"),
		keyed.CheckpointInterval(2*time.Millisecond), keyed.StopTimeout(200*time.Millisecond))
	s := keyed.FromSource(j, "events", 2, connector.Source[event](src))
	out := keyed.Process(keyed.ByPartition(s), "count", 2, func() keyed.Operator[event, result] { return &counter{} })
	keyed.ToSink(out, "results", connector.Sink[result](keyed.NewMemorySink[result]()))

	// Checkpoint 0 (the fresh start) has no state files: checkpoint 1 hangs.
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- j.Run(ctx) }()
	select {
	case <-hanged:
	case <-ctx.Done():
		t.Fatal("no state file was put before the deadline")
	}
	<-ctx.Done()
	dl, _ := ctx.Deadline()
	select {
	case err := <-done:
		t.Logf("Run returned %v after the deadline: %v", time.Since(dl), err)
		require.ErrorIs(t, err, keyed.ErrStopTimeout)
	case <-time.After(10 * time.Second):
		t.Fatal("Run still waits for the bucket 10s after its context's deadline")
	}
}

// TestClaimStorageFailureRetried: the storage failing while the job claims
// it (the JOB object's write) is a storage fault like any other, retried by
// the restart strategy, not a refusal: the job starts once the bucket
// answers. Another job's name in the JOB object is refused at once,
// whatever the restart strategy.
func TestClaimStorageFailureRetried(t *testing.T) {
	bucket := memblob.OpenBucket(nil)
	defer bucket.Close()
	fb := faultbucket.New(bucket)
	var mu sync.Mutex
	failed := 0
	fb.Set(func(ctx context.Context, op faultbucket.Op, key string) error {
		mu.Lock()
		defer mu.Unlock()
		if op == faultbucket.Write && path.Base(key) == layout.JobName && failed < 2 {
			failed++
			return errors.New("injected: the bucket refused the write")
		}
		return nil
	})
	st := blobstore.New(fb.Blob(), "jobs/users/")
	build := func(name string) *keyed.Job {
		src, _ := inputOf(11, 4, 50, 200, true)
		j := keyed.NewJob(name, keyed.CheckpointStorage(st), keyed.FS(vfs.NewMem()), keyed.Dir("/unused"),
			keyed.CheckpointInterval(2*time.Millisecond), keyed.RestartStrategy(keyed.FixedDelay(5, 10*time.Millisecond)))
		s := keyed.FromSource(j, "events", 2, connector.Source[event](src))
		out := keyed.Process(keyed.ByPartition(s), "count", 2, func() keyed.Operator[event, result] { return &counter{} })
		keyed.ToSink(out, "results", connector.Sink[result](keyed.NewMemorySink[result]()))
		return j
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	require.NoError(t, build("users").Run(ctx))
	require.Equal(t, 2, failed, "both injected failures were met and retried")

	err := build("other").Run(ctx)
	require.ErrorIs(t, err, keyed.ErrPermanent)
	require.ErrorContains(t, err, `not of job "other"`)
}
