package checkpoint_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kordproject/kord/checkpoint"
	"github.com/kordproject/kord/internal/objectstest"
)

// The directory Store passes the Objects suite, on the OS and in memory.
func TestStoreObjects(t *testing.T) {
	t.Run("os", func(t *testing.T) {
		objectstest.Run(t, func(t *testing.T) checkpoint.Objects {
			s, err := checkpoint.OpenStore(checkpoint.OSFS(), t.TempDir())
			require.NoError(t, err)
			t.Cleanup(func() { s.Close() })
			return s
		})
	})
	t.Run("mem", func(t *testing.T) {
		objectstest.Run(t, func(t *testing.T) checkpoint.Objects {
			s, err := checkpoint.OpenStore(checkpoint.NewMemFS(), "/ckpt")
			require.NoError(t, err)
			t.Cleanup(func() { s.Close() })
			return s
		})
	})
}
