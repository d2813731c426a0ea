package vfs

import (
	"errors"
	"io"
	"io/fs"
	"testing"

	"github.com/stretchr/testify/require"
)

func writeFile(t *testing.T, fsys FS, name, data string, sync bool) {
	t.Helper()
	f, err := fsys.Create(name)
	require.NoError(t, err)
	_, err = f.Write([]byte(data))
	require.NoError(t, err)
	if sync {
		require.NoError(t, f.Sync())
	}
	require.NoError(t, f.Close())
}

// contents returns the file's contents, or "<absent>".
func contents(t *testing.T, fsys FS, name string) string {
	t.Helper()
	b, err := fsys.ReadFile(name)
	if errors.Is(err, fs.ErrNotExist) {
		return "<absent>"
	}
	require.NoError(t, err)
	return string(b)
}

func TestMemFSCrashClone(t *testing.T) {
	for _, tc := range []struct {
		name  string
		do    func(t *testing.T, m *MemFS)
		check map[string]string // path -> contents after the crash
	}{
		{
			name:  "create and sync file, no dir sync: entry lost",
			do:    func(t *testing.T, m *MemFS) { writeFile(t, m, "/d/n", "x", true) },
			check: map[string]string{"/d/n": "<absent>"},
		},
		{
			name: "create, sync file, sync dir: durable",
			do: func(t *testing.T, m *MemFS) {
				writeFile(t, m, "/d/n", "x", true)
				require.NoError(t, m.SyncDir("/d"))
			},
			check: map[string]string{"/d/n": "x"},
		},
		{
			name: "dir sync without file sync: empty file",
			do: func(t *testing.T, m *MemFS) {
				writeFile(t, m, "/d/n", "x", false)
				require.NoError(t, m.SyncDir("/d"))
			},
			check: map[string]string{"/d/n": ""},
		},
		{
			name: "data written after the last sync is lost",
			do: func(t *testing.T, m *MemFS) {
				f, err := m.Create("/d/n")
				require.NoError(t, err)
				f.Write([]byte("ab"))
				require.NoError(t, f.Sync())
				f.Write([]byte("cd"))
				require.NoError(t, f.Close())
				require.NoError(t, m.SyncDir("/d"))
			},
			check: map[string]string{"/d/n": "ab"},
		},
		{
			name: "rename before dir sync: old name survives",
			do: func(t *testing.T, m *MemFS) {
				writeFile(t, m, "/d/tmp", "new", true)
				require.NoError(t, m.SyncDir("/d"))
				require.NoError(t, m.Rename("/d/tmp", "/d/a"))
			},
			check: map[string]string{"/d/a": "old", "/d/tmp": "new"},
		},
		{
			name: "rename over, then dir sync: new contents",
			do: func(t *testing.T, m *MemFS) {
				writeFile(t, m, "/d/tmp", "new", true)
				require.NoError(t, m.Rename("/d/tmp", "/d/a"))
				require.NoError(t, m.SyncDir("/d"))
			},
			check: map[string]string{"/d/a": "new", "/d/tmp": "<absent>"},
		},
		{
			name: "rename over without dir sync: old contents",
			do: func(t *testing.T, m *MemFS) {
				writeFile(t, m, "/d/tmp", "new", true)
				require.NoError(t, m.Rename("/d/tmp", "/d/a"))
			},
			check: map[string]string{"/d/a": "old", "/d/tmp": "<absent>"},
		},
		{
			name:  "remove without dir sync: file survives",
			do:    func(t *testing.T, m *MemFS) { require.NoError(t, m.Remove("/d/a")) },
			check: map[string]string{"/d/a": "old"},
		},
		{
			name: "remove and dir sync: gone",
			do: func(t *testing.T, m *MemFS) {
				require.NoError(t, m.Remove("/d/a"))
				require.NoError(t, m.SyncDir("/d"))
			},
			check: map[string]string{"/d/a": "<absent>"},
		},
		{
			name: "new directory without parent sync: lost",
			do: func(t *testing.T, m *MemFS) {
				require.NoError(t, m.MkdirAll("/d/e"))
				writeFile(t, m, "/d/e/a", "x", true)
				require.NoError(t, m.SyncDir("/d/e"))
			},
			check: map[string]string{"/d/e/a": "<absent>"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := NewMem()
			require.NoError(t, m.MkdirAll("/d"))
			require.NoError(t, m.SyncDir("/"))
			writeFile(t, m, "/d/a", "old", true)
			require.NoError(t, m.SyncDir("/d"))
			tc.do(t, m)
			c := m.CrashClone()
			for name, want := range tc.check {
				require.Equal(t, want, contents(t, c, name), name)
			}
			// The clone is itself a working MemFS with the same durability.
			writeFile(t, c, "/d/z", "z", true)
			require.Equal(t, "<absent>", contents(t, c.CrashClone(), "/d/z"))
		})
	}
}

func TestMemFSBasics(t *testing.T) {
	m := NewMem()
	require.NoError(t, m.MkdirAll("d"))
	writeFile(t, m, "d/b", "2", false)
	writeFile(t, m, "d/a", "1", false)
	_, err := m.Create("d/a")
	require.ErrorIs(t, err, fs.ErrExist)
	require.ErrorContains(t, err, "d/a")
	names, err := m.ReadDir("/d")
	require.NoError(t, err)
	require.Equal(t, []string{"a", "b"}, names)
	r, err := m.Open("/d/b")
	require.NoError(t, err)
	b, err := io.ReadAll(r)
	require.NoError(t, err)
	require.Equal(t, "2", string(b))
	require.NoError(t, r.Close())
	_, err = m.Open("/d/none")
	require.ErrorIs(t, err, fs.ErrNotExist)
	_, err = m.Create("/nodir/x")
	require.ErrorIs(t, err, fs.ErrNotExist)

	l, err := m.Lock("/d/LOCK")
	require.NoError(t, err)
	_, err = m.Lock("d/LOCK")
	require.ErrorIs(t, err, ErrLocked)
	require.NoError(t, l.Close())
	l, err = m.Lock("/d/LOCK")
	require.NoError(t, err)
	require.NoError(t, l.Close())

	f, err := m.Create("/d/c")
	require.NoError(t, err)
	require.NoError(t, f.Close())
	_, err = f.Write([]byte("x"))
	require.Error(t, err)
}
