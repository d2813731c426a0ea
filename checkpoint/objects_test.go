package checkpoint_test

import (
	"fmt"
	"io/fs"
	"os"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kordproject/kord/checkpoint"
	"github.com/kordproject/kord/internal/rig/objectstest"
	"github.com/kordproject/kord/vfs"
)

// The directory Store passes the Objects suite, on the OS and in memory.
func TestStoreConformance(t *testing.T) {
	t.Run("os", func(t *testing.T) {
		objectstest.Run(t, func(t *testing.T) checkpoint.Objects {
			s, err := checkpoint.OpenStore(vfs.Default(), t.TempDir())
			require.NoError(t, err)
			t.Cleanup(func() { s.Close() })
			return s
		})
	})
	t.Run("mem", func(t *testing.T) {
		objectstest.Run(t, func(t *testing.T) checkpoint.Objects {
			s, err := checkpoint.OpenStore(vfs.NewMem(), "/ckpt")
			require.NoError(t, err)
			t.Cleanup(func() { s.Close() })
			return s
		})
	})
}

// A shared directory Store passes the suite too, and between two Stores on
// one directory (two processes) a put is still once only.
func TestSharedStoreConformance(t *testing.T) {
	t.Run("os", func(t *testing.T) {
		objectstest.Run(t, func(t *testing.T) checkpoint.Objects {
			s, err := checkpoint.OpenSharedStore(vfs.Default(), t.TempDir())
			require.NoError(t, err)
			return s
		})
	})
	t.Run("mem", func(t *testing.T) {
		objectstest.Run(t, func(t *testing.T) checkpoint.Objects {
			s, err := checkpoint.OpenSharedStore(vfs.NewMem(), "/ckpt")
			require.NoError(t, err)
			return s
		})
	})
	t.Run("two processes", func(t *testing.T) {
		dir := t.TempDir()
		a, err := checkpoint.OpenSharedStore(vfs.Default(), dir)
		require.NoError(t, err)
		b, err := checkpoint.OpenSharedStore(vfs.Default(), dir)
		require.NoError(t, err, "a shared directory takes no lock")
		for i := 0; i < 50; i++ {
			name := fmt.Sprintf("obj-%d", i)
			var wg sync.WaitGroup
			errs := make([]error, 2)
			for j, s := range []*checkpoint.Store{a, b} {
				wg.Add(1)
				go func() { defer wg.Done(); errs[j] = s.Put(t.Context(), name, []byte{byte('a' + j)}) }()
			}
			wg.Wait()
			won := 0
			for _, err := range errs {
				if err == nil {
					won++
				} else {
					require.ErrorIs(t, err, fs.ErrExist)
				}
			}
			require.Equal(t, 1, won, "%s: exactly one put succeeds", name)
		}
		left, err := os.ReadDir(dir)
		require.NoError(t, err)
		require.Len(t, left, 50, "no temp file is left behind")
		// A directory Store (one process) refuses a directory in shared use
		// only by its lock; the shared ones hold none.
		_, err = checkpoint.OpenStore(vfs.Default(), dir)
		require.NoError(t, err)
	})
	t.Run("durable after a crash", func(t *testing.T) {
		mem := vfs.NewMem()
		s, err := checkpoint.OpenSharedStore(mem, "/ckpt")
		require.NoError(t, err)
		require.NoError(t, s.Put(t.Context(), "a", []byte("one")))
		after, err := checkpoint.OpenSharedStore(mem.CrashClone(), "/ckpt")
		require.NoError(t, err)
		b, err := after.Get(t.Context(), "a")
		require.NoError(t, err)
		require.Equal(t, "one", string(b))
		names, err := after.List(t.Context(), "")
		require.NoError(t, err)
		require.Equal(t, []string{"a"}, names, "no temp name survives")
	})
}
