package blobstore_test

import (
	"context"
	"io/fs"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gocloud.dev/blob/fileblob"
	"gocloud.dev/blob/memblob"

	"github.com/kordproject/kord/checkpoint"
	"github.com/kordproject/kord/checkpoint/blobstore"
	"github.com/kordproject/kord/internal/rig/faultbucket"
	"github.com/kordproject/kord/internal/rig/objectstest"
)

func TestMemBucket(t *testing.T) {
	objectstest.Run(t, func(t *testing.T) checkpoint.Objects {
		b := memblob.OpenBucket(nil)
		t.Cleanup(func() { b.Close() })
		return blobstore.New(b, "jobs/j/")
	})
}

func TestFileBucket(t *testing.T) {
	objectstest.Run(t, func(t *testing.T) checkpoint.Objects {
		b, err := fileblob.OpenBucket(t.TempDir(), &fileblob.Options{NoTempDir: true})
		require.NoError(t, err)
		t.Cleanup(func() { b.Close() })
		return blobstore.New(b, "")
	}, objectstest.Options{SingleWriter: true})
}

// TestPrefixes: two jobs in one bucket see only their own objects, and
// keys deeper than a job's prefix are not its objects.
func TestPrefixes(t *testing.T) {
	ctx := context.Background()
	b := memblob.OpenBucket(nil)
	defer b.Close()
	a, c := blobstore.New(b, "jobs/a/"), blobstore.New(b, "jobs/b/")
	require.NoError(t, a.Put(t.Context(), "x", []byte("a")))
	require.NoError(t, c.Put(t.Context(), "x", []byte("b")))
	require.NoError(t, b.WriteAll(ctx, "jobs/a/sub/y", []byte("deeper"), nil))
	names, err := a.List(t.Context(), "")
	require.NoError(t, err)
	require.Equal(t, []string{"x"}, names)
	got, err := c.Get(t.Context(), "x")
	require.NoError(t, err)
	require.Equal(t, "b", string(got))
	keys := []string{}
	it := b.List(nil)
	for {
		o, err := it.Next(ctx)
		if err != nil {
			break
		}
		keys = append(keys, o.Key)
	}
	require.ElementsMatch(t, []string{"jobs/a/x", "jobs/b/x", "jobs/a/sub/y"}, keys)
}

// TestFailingBucket: a bucket that fails says which key failed, and a
// failure is not mistaken for a missing or an existing object.
func TestFailingBucket(t *testing.T) {
	b := memblob.OpenBucket(nil)
	s := blobstore.New(b, "jobs/j/")
	require.NoError(t, b.Close())
	err := s.Put(t.Context(), "x", []byte("y"))
	require.ErrorContains(t, err, "put jobs/j/x")
	require.NotErrorIs(t, err, fs.ErrExist)
	_, err = s.Get(t.Context(), "x")
	require.ErrorContains(t, err, "get jobs/j/x")
	require.NotErrorIs(t, err, fs.ErrNotExist)
	require.ErrorContains(t, s.Delete(t.Context(), "x"), "delete jobs/j/x")
	_, err = s.List(t.Context(), "")
	require.ErrorContains(t, err, "list jobs/j/")
}

// TestContext: every request goes to the bucket under the caller's
// context, so that cancelling it ends a request the bucket does not
// answer, long before the store's own timeout.
func TestContext(t *testing.T) {
	// Every request blocks until its context is done: object storage
	// that stopped answering. Not closed: Close waits for the requests
	// under way, which a broken store would leave blocked for an hour.
	inner := memblob.OpenBucket(nil)
	defer inner.Close()
	fb := faultbucket.New(inner)
	fb.Set(func(ctx context.Context, _ faultbucket.Op, _ string) error { return faultbucket.Hang(ctx) })
	b := fb.Blob()
	s := blobstore.New(b, "jobs/j/", blobstore.Timeout(time.Hour))
	for name, call := range map[string]func(ctx context.Context) error{
		"put":         func(ctx context.Context) error { return s.Put(ctx, "x", []byte("y")) },
		"get":         func(ctx context.Context) error { _, err := s.Get(ctx, "x"); return err },
		"list":        func(ctx context.Context) error { _, err := s.List(ctx, ""); return err },
		"delete":      func(ctx context.Context) error { return s.Delete(ctx, "x") },
		"set pointer": func(ctx context.Context) error { return s.SetPointer(ctx, "p", []byte("y")) },
		"pointer":     func(ctx context.Context) error { _, _, err := s.Pointer(ctx, "p"); return err },
	} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- call(ctx) }()
			select {
			case err := <-done:
				require.ErrorIs(t, err, context.DeadlineExceeded)
				require.ErrorContains(t, err, "jobs/j/")
			case <-time.After(10 * time.Second):
				t.Fatalf("%s: still waiting for the bucket 10s after its context's deadline", name)
			}
		})
	}
}
