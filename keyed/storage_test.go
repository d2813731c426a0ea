//go:build kordfailpoints

package keyed_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gocloud.dev/blob"
	"gocloud.dev/blob/driver"
	"gocloud.dev/blob/memblob"
	"gocloud.dev/gcerrors"

	"github.com/kordproject/kord/checkpoint"
	"github.com/kordproject/kord/checkpoint/blobstore"
	"github.com/kordproject/kord/internal/failpoint"
	"github.com/kordproject/kord/internal/layout"
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

// blockingBucket is a bucket driver whose writes block until their
// context is done: object storage that stopped answering. (Writes are all
// the test sends it.)
type blockingBucket struct{ driver.Bucket }

func (blockingBucket) NewTypedWriter(ctx context.Context, _, _ string, _ *driver.WriterOptions) (driver.Writer, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

func (blockingBucket) ErrorCode(error) gcerrors.ErrorCode { return gcerrors.Unknown }
func (blockingBucket) Close() error                       { return nil }

// hangingStorage keeps its objects in Storage but puts state files into
// stuck, a blobstore over the blocking bucket, where each put waits for
// its context.
type hangingStorage struct {
	checkpoint.Storage
	stuck  checkpoint.Objects
	once   sync.Once
	hanged chan struct{} // closed at the first put into stuck
}

func (h *hangingStorage) Put(ctx context.Context, name string, data []byte) error {
	if n, ok := layout.ParseName(name); ok && n.Kind == layout.KindState {
		h.once.Do(func() { close(h.hanged) })
		return h.stuck.Put(ctx, name, data)
	}
	return h.Storage.Put(ctx, name, data)
}

// TestCheckpointStorageCancel: cancelling a job reaches its checkpoint
// storage. The bucket stops answering while a checkpoint's state files are
// written; Run's context then passes its deadline, and Run ends within the
// stop timeout and a margin, with the stop timeout's error, instead of
// waiting for the bucket (an hour, the store's own timeout).
func TestCheckpointStorageCancel(t *testing.T) {
	bucket := memblob.OpenBucket(nil)
	defer bucket.Close()
	// Not closed: Close waits for the requests under way, which a store
	// that ignored its context would leave blocked for an hour.
	stuck := blob.NewBucket(blockingBucket{})
	st := &hangingStorage{
		Storage: blobstore.New(bucket, "jobs/users/"),
		stuck:   blobstore.New(stuck, "jobs/users/", blobstore.Timeout(time.Hour)),
		hanged:  make(chan struct{}),
	}
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
	case <-st.hanged:
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
