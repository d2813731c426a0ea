// Package objectstest is the conformance suite every checkpoint.Objects
// passes: the checkpoint package's Store (a directory) and blobstore's
// (object storage) run the same tests.
package objectstest

import (
	"errors"
	"io/fs"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kordproject/kord/checkpoint"
	"github.com/kordproject/kord/internal/layout"
)

// Options describe what the Objects under test promise.
type Options struct {
	// SingleWriter: conditional puts are not atomic between concurrent
	// writers (gocloud's fileblob checks for the key when the write
	// closes), so "one put wins" is not part of its promise.
	SingleWriter bool
}

// Run runs the suite on fresh, empty Objects made by open.
func Run(t *testing.T, open func(t *testing.T) checkpoint.Objects, opts ...Options) {
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	t.Run("put get", func(t *testing.T) {
		o := open(t)
		require.NoError(t, o.Put(t.Context(), "a", []byte("one")))
		require.NoError(t, o.Put(t.Context(), "empty", nil))
		b, err := o.Get(t.Context(), "a")
		require.NoError(t, err)
		require.Equal(t, "one", string(b))
		b, err = o.Get(t.Context(), "empty")
		require.NoError(t, err)
		require.Empty(t, b)
	})
	t.Run("immutable", func(t *testing.T) {
		o := open(t)
		require.NoError(t, o.Put(t.Context(), "a", []byte("one")))
		err := o.Put(t.Context(), "a", []byte("two"))
		require.ErrorIs(t, err, fs.ErrExist)
		require.ErrorContains(t, err, "a")
		b, err := o.Get(t.Context(), "a")
		require.NoError(t, err)
		require.Equal(t, "one", string(b), "a refused put left the object as it was")
	})
	t.Run("pointer", func(t *testing.T) {
		st, ok := open(t).(checkpoint.Storage)
		if !ok {
			t.Skip("not a checkpoint.Storage")
		}
		_, found, err := st.Pointer(t.Context(), "COMMITTED")
		require.NoError(t, err)
		require.False(t, found)
		require.NoError(t, st.SetPointer(t.Context(), "COMMITTED", []byte("one")))
		require.NoError(t, st.SetPointer(t.Context(), "COMMITTED", []byte("two")), "a pointer is replaced, not refused")
		b, found, err := st.Pointer(t.Context(), "COMMITTED")
		require.NoError(t, err)
		require.True(t, found)
		require.Equal(t, "two", string(b))
		require.Contains(t, st.Where("COMMITTED"), "COMMITTED")
		// A whole checkpoint through the Storage, read back verified.
		m := &checkpoint.Metadata{Run: "0123456789abcdef", ID: 3, MaxParallelism: 4}
		files := map[string][]byte{layout.StateFileName("0123456789abcdef", 3, "op", 1): []byte("state")}
		require.NoError(t, checkpoint.WriteCheckpoint(t.Context(), st, m, files))
		got, gotFiles, err := checkpoint.ReadCheckpoint(t.Context(), st, m.Run, m.ID)
		require.NoError(t, err)
		require.Equal(t, m.Files, got.Files)
		require.Equal(t, files, gotFiles)
		refs, err := checkpoint.ListCheckpoints(t.Context(), st)
		require.NoError(t, err)
		require.Equal(t, []checkpoint.Ref{{Run: m.Run, ID: 3}}, refs)
	})
	t.Run("missing", func(t *testing.T) {
		o := open(t)
		_, err := o.Get(t.Context(), "nope")
		require.ErrorIs(t, err, fs.ErrNotExist)
		require.ErrorContains(t, err, "nope")
		require.NoError(t, o.Delete(t.Context(), "nope"), "deleting a missing object is not an error")
	})
	t.Run("list delete", func(t *testing.T) {
		o := open(t)
		for _, n := range []string{"ckpt-2", "ckpt-10", "ckpt-1", "meta-1", "c"} {
			require.NoError(t, o.Put(t.Context(), n, []byte(n)))
		}
		names, err := o.List(t.Context(), "ckpt-")
		require.NoError(t, err)
		require.Equal(t, []string{"ckpt-1", "ckpt-10", "ckpt-2"}, names)
		all, err := o.List(t.Context(), "")
		require.NoError(t, err)
		require.Equal(t, []string{"c", "ckpt-1", "ckpt-10", "ckpt-2", "meta-1"}, all)
		require.NoError(t, o.Delete(t.Context(), "ckpt-10"))
		names, err = o.List(t.Context(), "ckpt-")
		require.NoError(t, err)
		require.Equal(t, []string{"ckpt-1", "ckpt-2"}, names)
		_, err = o.Get(t.Context(), "ckpt-10")
		require.ErrorIs(t, err, fs.ErrNotExist)
		require.NoError(t, o.Put(t.Context(), "ckpt-10", []byte("again")), "a deleted name can be put again")
	})
	t.Run("invalid names", func(t *testing.T) {
		o := open(t)
		for _, n := range []string{"", ".", "..", "a/b", `a\b`, layout.LockName} {
			require.Error(t, o.Put(t.Context(), n, []byte("x")), "%q", n)
			_, err := o.Get(t.Context(), n)
			require.Error(t, err, "%q", n)
			require.Error(t, o.Delete(t.Context(), n), "%q", n)
		}
	})
	if o.SingleWriter {
		return
	}
	t.Run("one put wins", func(t *testing.T) {
		// Two processes putting one name: exactly one succeeds, the other
		// is told the object exists, and the object is the winner's.
		o := open(t)
		const n = 8
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = o.Put(t.Context(), "race", []byte{byte('0' + i)})
			}()
		}
		wg.Wait()
		won := -1
		for i, err := range errs {
			switch {
			case err == nil:
				require.Equal(t, -1, won, "two puts of one name succeeded")
				won = i
			case !errors.Is(err, fs.ErrExist):
				// A directory Store refuses a concurrent put of the same
				// name in one process outright; that also leaves one winner.
				require.ErrorContains(t, err, "race")
			}
		}
		require.NotEqual(t, -1, won, "no put succeeded")
		b, err := o.Get(t.Context(), "race")
		require.NoError(t, err)
		require.Equal(t, []byte{byte('0' + won)}, b)
	})
}
