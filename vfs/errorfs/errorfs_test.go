package errorfs

import (
	"errors"
	"io/fs"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kordproject/kord/vfs"
)

// contents returns the file's contents, or "<absent>".
func contents(t *testing.T, fsys vfs.FS, name string) string {
	t.Helper()
	b, err := fsys.ReadFile(name)
	if errors.Is(err, fs.ErrNotExist) {
		return "<absent>"
	}
	require.NoError(t, err)
	return string(b)
}

func TestPartialWrite(t *testing.T) {
	m := vfs.NewMem()
	var fail Op = -1
	e := New(m, func(op Op, name string) error {
		if op == fail {
			return ErrInjected
		}
		return nil
	})
	f, err := e.Create("/a")
	require.NoError(t, err)
	fail = OpWrite
	n, err := f.Write([]byte("abcdef"))
	require.ErrorIs(t, err, ErrInjected)
	require.ErrorContains(t, err, "write /a")
	require.Equal(t, 3, n)
	require.Equal(t, "abc", contents(t, m, "/a"))

	for op := OpCreate; op < numOps; op++ {
		require.NotEqual(t, "op?", op.String())
	}
	fail = OpRename
	err = e.Rename("/a", "/b")
	var pe *fs.PathError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, "/a", pe.Path)
	require.Equal(t, "rename", pe.Op)
}
