package faultbucket_test

import (
	"context"
	"errors"
	"io/fs"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gocloud.dev/blob/memblob"

	"github.com/kordproject/kord/checkpoint"
	"github.com/kordproject/kord/checkpoint/blobstore"
	"github.com/kordproject/kord/internal/rig/faultbucket"
	"github.com/kordproject/kord/internal/rig/objectstest"
)

// TestPassesThrough: with no fault the rig is the bucket it wraps: a
// store over it passes the conformance suite.
func TestPassesThrough(t *testing.T) {
	objectstest.Run(t, func(t *testing.T) checkpoint.Objects {
		inner := memblob.OpenBucket(nil)
		t.Cleanup(func() { inner.Close() })
		b := faultbucket.New(inner).Blob()
		t.Cleanup(func() { b.Close() })
		return blobstore.New(b, "jobs/j/")
	})
}

// TestFaults: a request meets the fault set, with its key, and fails with
// its error or hangs until its context ends; clearing the fault lets the
// next request through.
func TestFaults(t *testing.T) {
	inner := memblob.OpenBucket(nil)
	defer inner.Close()
	fb := faultbucket.New(inner)
	s := blobstore.New(fb.Blob(), "jobs/j/")
	require.NoError(t, s.Put(t.Context(), "a", []byte("one")))

	boom := errors.New("503 slow down")
	var met []string
	fb.Set(func(ctx context.Context, op faultbucket.Op, key string) error {
		met = append(met, op.String()+" "+key)
		return boom
	})
	err := s.Put(t.Context(), "b", []byte("two"))
	require.ErrorIs(t, err, boom)
	require.ErrorContains(t, err, "put jobs/j/b")
	require.NotErrorIs(t, err, fs.ErrExist)
	_, err = s.Get(t.Context(), "a")
	require.ErrorIs(t, err, boom)
	require.NotErrorIs(t, err, fs.ErrNotExist)
	require.Equal(t, []string{"write jobs/j/b", "read jobs/j/a"}, met)

	fb.Set(func(ctx context.Context, _ faultbucket.Op, _ string) error { return faultbucket.Hang(ctx) })
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	err = s.Put(ctx, "b", []byte("two"))
	require.ErrorIs(t, err, context.DeadlineExceeded)

	fb.Set(nil)
	require.NoError(t, s.Put(t.Context(), "b", []byte("two")))
	got, err := s.Get(t.Context(), "b")
	require.NoError(t, err)
	require.Equal(t, "two", string(got))
}
