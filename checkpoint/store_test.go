package checkpoint

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kordproject/kord/internal/layout"
	"github.com/kordproject/kord/vfs"
	"github.com/kordproject/kord/vfs/errorfs"
)

const testDir = "/ckpt"

func writeFile(t *testing.T, fsys vfs.FS, name, data string, sync bool) {
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

func openMem(t testing.TB, fsys vfs.FS) *Store {
	t.Helper()
	s, err := OpenStore(fsys, testDir)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

func TestStoreObjects(t *testing.T) {
	for name, newFS := range map[string]func(t *testing.T) (vfs.FS, string){
		"mem": func(t *testing.T) (vfs.FS, string) { return vfs.NewMem(), testDir },
		"os":  func(t *testing.T) (vfs.FS, string) { return vfs.Default(), filepath.Join(t.TempDir(), "ckpt") },
	} {
		t.Run(name, func(t *testing.T) {
			fsys, dir := newFS(t)
			s, err := OpenStore(fsys, dir)
			require.NoError(t, err)
			defer s.Close()
			require.Equal(t, filepath.Join(dir, "a"), s.Path("a"))

			require.NoError(t, s.Put(t.Context(), "b", []byte("2")))
			require.NoError(t, s.Put(t.Context(), "a", []byte("1")))
			require.NoError(t, s.Put(t.Context(), "empty", nil))
			got, err := s.Get(t.Context(), "a")
			require.NoError(t, err)
			require.Equal(t, "1", string(got))
			got, err = s.Get(t.Context(), "empty")
			require.NoError(t, err)
			require.Empty(t, got)

			err = s.Put(t.Context(), "a", []byte("other"))
			require.ErrorIs(t, err, fs.ErrExist)
			require.ErrorContains(t, err, s.Path("a"))

			names, err := s.List(t.Context(), "")
			require.NoError(t, err)
			require.Equal(t, []string{"a", "b", "empty"}, names) // no LOCK, no temp files
			names, err = s.List(t.Context(), "b")
			require.NoError(t, err)
			require.Equal(t, []string{"b"}, names)

			require.NoError(t, s.Delete(t.Context(), "a"))
			require.NoError(t, s.Delete(t.Context(), "a")) // idempotent
			_, err = s.Get(t.Context(), "a")
			require.ErrorIs(t, err, fs.ErrNotExist)
			require.ErrorContains(t, err, s.Path("a"))

			_, ok, err := s.Pointer(t.Context(), "P")
			require.NoError(t, err)
			require.False(t, ok)
			require.NoError(t, s.SetPointer(t.Context(), "P", []byte("v1")))
			require.NoError(t, s.SetPointer(t.Context(), "P", []byte("v2")))
			p, ok, err := s.Pointer(t.Context(), "P")
			require.NoError(t, err)
			require.True(t, ok)
			require.Equal(t, "v2", string(p))

			for _, bad := range []string{"", "x/y", layout.LockName, ".tmp.x", ".."} {
				require.Error(t, s.Put(t.Context(), bad, nil), bad)
			}
			require.NoError(t, s.Close())
			require.NoError(t, s.Close())
			require.Error(t, s.Put(t.Context(), "c", nil))

			// Reopen: objects persist.
			s2, err := OpenStore(fsys, dir)
			require.NoError(t, err)
			defer s2.Close()
			names, err = s2.List(t.Context(), "")
			require.NoError(t, err)
			require.Equal(t, []string{"P", "b", "empty"}, names)
		})
	}
}

func TestOpenStoreLock(t *testing.T) {
	for name, fsys := range map[string]vfs.FS{"os": vfs.Default(), "mem": vfs.NewMem()} {
		t.Run(name, func(t *testing.T) {
			dir := testDir
			if name == "os" {
				dir = t.TempDir()
			}
			s, err := OpenStore(fsys, dir)
			require.NoError(t, err)
			_, err = OpenStore(fsys, dir)
			require.ErrorIs(t, err, vfs.ErrLocked)
			require.ErrorContains(t, err, filepath.Join(dir, layout.LockName))
			require.ErrorContains(t, err, "another process")
			require.NoError(t, s.Close())
			s, err = OpenStore(fsys, dir)
			require.NoError(t, err)
			require.NoError(t, s.Close())
		})
	}
}

func TestOpenStoreRemovesTempFiles(t *testing.T) {
	m := vfs.NewMem()
	s := openMem(t, m)
	require.NoError(t, s.Put(t.Context(), "a", []byte("1")))
	writeFile(t, m, s.Path(layout.TempPrefix+"a.7"), "partial", false)
	require.NoError(t, s.Close())
	s = openMem(t, m)
	names, err := m.ReadDir(testDir)
	require.NoError(t, err)
	require.Equal(t, []string{layout.LockName, "a"}, names)
	// The removal is durable.
	names, err = m.CrashClone().ReadDir(testDir)
	require.NoError(t, err)
	require.NotContains(t, names, layout.TempPrefix+"a.7")
}

// crashFS runs operations on a MemFS and, at the n-th operation (counting
// from 1), takes a CrashClone before the operation runs and fails it and
// every later one: the process died there.
type crashFS struct {
	mu    sync.Mutex // WriteCheckpoint writes files in parallel
	mem   *vfs.MemFS
	n, at int
	clone *vfs.MemFS
}

func newCrashFS(mem *vfs.MemFS, at int) (*crashFS, vfs.FS) {
	c := &crashFS{mem: mem, at: at}
	return c, errorfs.New(mem, func(op errorfs.Op, name string) error {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.n++
		if c.n == c.at {
			c.clone = c.mem.CrashClone()
		}
		if c.clone != nil {
			return errorfs.ErrInjected
		}
		return nil
	})
}

// crashed returns the filesystem after the crash, or after the run if it
// ended first.
func (c *crashFS) crashed() *vfs.MemFS {
	if c.clone != nil {
		return c.clone
	}
	return c.mem.CrashClone()
}

func TestPutCrash(t *testing.T) {
	// Put's operations: open (exists check), create, write, sync, close,
	// rename, syncdir.
	for at := 1; ; at++ {
		mem := vfs.NewMem()
		s0 := openMem(t, mem)
		require.NoError(t, s0.Close())
		c, fsys := newCrashFS(mem, 0)
		s, err := OpenStore(fsys, testDir)
		require.NoError(t, err)
		c.at = c.n + at // count from after OpenStore
		err = s.Put(t.Context(), "obj", []byte("data"))
		done := c.clone == nil
		s.Close()

		after := openMem(t, c.crashed())
		got, err2 := after.Get(t.Context(), "obj")
		if done {
			require.NoError(t, err)
			require.NoError(t, err2, "Put returned nil: the object must be durable")
		}
		if err2 == nil {
			require.Equal(t, "data", string(got), "crash at op %d", at)
		} else {
			require.ErrorIs(t, err2, fs.ErrNotExist)
		}
		names, _ := after.List(t.Context(), "")
		require.Subset(t, []string{"obj"}, names)
		after.Close()
		if done {
			require.Greater(t, at, 5)
			break
		}
	}
}

// TestPutCrashBeforeDirSync is the named case: the rename happened, the
// directory was not synced, the machine lost power: the object is gone.
func TestPutCrashBeforeDirSync(t *testing.T) {
	mem := vfs.NewMem()
	var synced bool
	fsys := errorfs.New(mem, func(op errorfs.Op, name string) error {
		if op == errorfs.OpSyncDir && name == testDir && synced {
			return errorfs.ErrInjected
		}
		return nil
	})
	s := openMem(t, fsys)
	synced = true
	err := s.Put(t.Context(), "obj", []byte("data"))
	require.ErrorIs(t, err, errorfs.ErrInjected)
	require.ErrorContains(t, err, "fsync directory "+testDir)
	got, err := s.Get(t.Context(), "obj") // visible now...
	require.NoError(t, err)
	require.Equal(t, "data", string(got))
	_, err = openMem(t, mem.CrashClone()).Get(t.Context(), "obj") // ...but not durable
	require.ErrorIs(t, err, fs.ErrNotExist)
}

func TestSetPointerCrash(t *testing.T) {
	for at := 1; ; at++ {
		mem := vfs.NewMem()
		s0 := openMem(t, mem)
		require.NoError(t, SetCommitted(t.Context(), s0, Ref{Run: "a", ID: 1}))
		require.NoError(t, s0.Close())

		c, fsys := newCrashFS(mem, 0)
		s, err := OpenStore(fsys, testDir)
		require.NoError(t, err)
		c.at = c.n + at
		err = SetCommitted(t.Context(), s, Ref{Run: "a", ID: 2})
		done := c.clone == nil
		s.Close()

		after := openMem(t, c.crashed())
		ref, ok, err2 := ReadCommitted(t.Context(), after)
		require.NoError(t, err2, "crash at op %d: never a torn pointer", at)
		require.True(t, ok)
		if done {
			require.NoError(t, err)
			require.Equal(t, uint64(2), ref.ID)
			break
		}
		require.Contains(t, []uint64{1, 2}, ref.ID)
		after.Close()
	}
}

// writeTestCheckpoint writes checkpoint (run, id) with n key groups.
func testFiles(run string, id uint64, n int) map[string][]byte {
	files := map[string][]byte{}
	for kg := range n {
		files[layout.StateFileName(run, id, "count", kg)] = testState(kg)
	}
	return files
}

// testState is a state file's contents: the store reads none of it.
func testState(kg int) []byte {
	return bytes.Repeat(fmt.Appendf(nil, "key group %d;", kg), 10+kg)
}

func testMeta(run string, id uint64) *Metadata {
	return &Metadata{Run: run, ID: id, MaxParallelism: 4,
		Offsets: []PartitionOffset{{Topic: "t", Partition: 0, Offset: int64(id) * 10}}}
}

func TestWriteReadCheckpoint(t *testing.T) {
	s := openMem(t, vfs.NewMem())
	files := testFiles("a", 1, 4)
	m := testMeta("a", 1)
	require.NoError(t, WriteCheckpoint(t.Context(), s, m, files))
	require.Len(t, m.Files, 4)
	gm, gfiles, err := ReadCheckpoint(t.Context(), s, "a", 1)
	require.NoError(t, err)
	require.Equal(t, m.Files, gm.Files)
	require.Equal(t, files, gfiles)
	for _, f := range gm.Files {
		require.Equal(t, testState(f.KeyGroup), gfiles[f.Name])
	}
	// Objects are immutable: the same checkpoint cannot be written twice.
	require.Error(t, WriteCheckpoint(t.Context(), s, testMeta("a", 1), testFiles("a", 1, 1)))
	// A file of another checkpoint is refused before anything is written.
	require.ErrorContains(t, WriteCheckpoint(t.Context(), s, testMeta("a", 2), testFiles("a", 3, 1)), "not a state file name of this checkpoint")

	_, _, err = ReadCheckpoint(t.Context(), s, "a", 9)
	require.ErrorIs(t, err, ErrMissing)
	require.ErrorContains(t, err, s.Path(layout.MetaName("a", 9)))

	refs, err := ListCheckpoints(t.Context(), s)
	require.NoError(t, err)
	require.Equal(t, []Ref{{"a", 1}}, refs)

	// Checkpoint 0 of a fresh job: offsets only.
	require.NoError(t, WriteCheckpoint(t.Context(), s, testMeta("b", 0), nil))
	refs, err = ListCheckpoints(t.Context(), s)
	require.NoError(t, err)
	require.Equal(t, []Ref{{"b", 0}, {"a", 1}}, refs)

	// The split path the engine uses: tasks Put their files, then the
	// coordinator writes the metadata.
	f := testFiles("b", 2, 1)
	var refs2 []FileRef
	for name, data := range f {
		require.NoError(t, s.Put(t.Context(), name, data))
		refs2 = append(refs2, FileRef{Name: name, Size: int64(len(data)), CRC32C: checksum(data), Operator: "count", KeyGroup: 0})
	}
	m2 := testMeta("b", 2)
	m2.Files = refs2
	require.NoError(t, PutMetadata(t.Context(), s, m2))
	_, got, err := ReadCheckpoint(t.Context(), s, "b", 2)
	require.NoError(t, err)
	require.Equal(t, f, got)
}

func TestReadCheckpointCorruption(t *testing.T) {
	mem := vfs.NewMem()
	s := openMem(t, mem)
	require.NoError(t, WriteCheckpoint(t.Context(), s, testMeta("a", 1), testFiles("a", 1, 3)))
	names, err := s.List(t.Context(), "")
	require.NoError(t, err)
	require.Len(t, names, 4)

	replace := func(name string, b []byte) {
		mem.Remove(s.Path(name))
		writeFile(t, mem, s.Path(name), string(b), true)
	}
	for _, name := range names {
		orig, err := s.Get(t.Context(), name)
		require.NoError(t, err)
		for _, tc := range []struct {
			how  string
			edit func([]byte) []byte
			want []string
		}{
			{"flip", func(b []byte) []byte { b = bytes.Clone(b); b[len(b)/2] ^= 0x40; return b }, []string{"checksum mismatch"}},
			{"truncate", func(b []byte) []byte { return b[:len(b)-1] }, []string{"size mismatch", "truncated"}},
			{"empty", func(b []byte) []byte { return nil }, []string{"size mismatch", "truncated"}},
		} {
			t.Run(name+"/"+tc.how, func(t *testing.T) {
				replace(name, tc.edit(orig))
				defer replace(name, orig)
				_, _, err := ReadCheckpoint(t.Context(), s, "a", 1)
				var ce *CorruptError
				require.ErrorAs(t, err, &ce)
				require.Equal(t, s.Path(name), ce.Path)
				require.ErrorContains(t, err, s.Path(name))
				matched := false
				for _, w := range tc.want {
					matched = matched || strings.Contains(ce.Reason, w)
				}
				require.True(t, matched, "reason %q", ce.Reason)
				if !strings.HasSuffix(name, ".meta") {
					// State files: expected and actual checksums are named.
					require.Contains(t, ce.Reason, "expected")
					require.Contains(t, ce.Reason, "actual")
					require.Contains(t, ce.Reason, "crc32c")
				}
			})
		}
		if !strings.HasSuffix(name, ".meta") {
			t.Run(name+"/missing", func(t *testing.T) {
				require.NoError(t, mem.Remove(s.Path(name)))
				defer replace(name, orig)
				_, _, err := ReadCheckpoint(t.Context(), s, "a", 1)
				var ce *CorruptError
				require.ErrorAs(t, err, &ce)
				require.Equal(t, s.Path(name), ce.Path)
				require.ErrorIs(t, err, fs.ErrNotExist)
				require.Contains(t, ce.Reason, "missing")
			})
		}
	}
	_, _, err = ReadCheckpoint(t.Context(), s, "a", 1)
	require.NoError(t, err)

	// A metadata object under the wrong name.
	b, err := s.Get(t.Context(), layout.MetaName("a", 1))
	require.NoError(t, err)
	require.NoError(t, s.Put(t.Context(), layout.MetaName("a", 5), b))
	_, _, err = ReadCheckpoint(t.Context(), s, "a", 5)
	var ce *CorruptError
	require.ErrorAs(t, err, &ce)

	// Corrupt committed marker.
	require.NoError(t, s.SetPointer(t.Context(), layout.CommittedName, []byte("KORDCMTD garbage")))
	_, _, err = ReadCommitted(t.Context(), s)
	require.ErrorAs(t, err, &ce)
	require.Equal(t, s.Path(layout.CommittedName), ce.Path)
}

// checkStoreInvariants checks what must hold after any crash or failure:
// every listed checkpoint reads back intact, no temp file is visible after
// reopening, and the committed marker decodes.
func checkStoreInvariants(t *testing.T, s *Store) []Ref {
	t.Helper()
	refs, err := ListCheckpoints(t.Context(), s)
	require.NoError(t, err)
	for _, r := range refs {
		_, _, err := ReadCheckpoint(t.Context(), s, r.Run, r.ID)
		require.NoError(t, err, "listed checkpoint %s", r)
	}
	_, _, err = ReadCommitted(t.Context(), s)
	require.NoError(t, err)
	return refs
}

func TestWriteCheckpointCrash(t *testing.T) {
	for at := 1; ; at++ {
		mem := vfs.NewMem()
		s0 := openMem(t, mem)
		require.NoError(t, WriteCheckpoint(t.Context(), s0, testMeta("a", 1), testFiles("a", 1, 2)))
		require.NoError(t, SetCommitted(t.Context(), s0, Ref{"a", 1}))
		require.NoError(t, s0.Close())

		c, fsys := newCrashFS(mem, 0)
		s, err := OpenStore(fsys, testDir)
		require.NoError(t, err)
		c.at = c.n + at
		err = WriteCheckpoint(t.Context(), s, testMeta("a", 2), testFiles("a", 2, 3))
		done := c.clone == nil
		s.Close()

		after := openMem(t, c.crashed())
		refs := checkStoreInvariants(t, after)
		if done {
			require.NoError(t, err)
			require.Equal(t, []Ref{{"a", 1}, {"a", 2}}, refs)
			break
		}
		require.Error(t, err)
		require.Contains(t, refs, Ref{"a", 1})
		if !slices.Contains(refs, Ref{"a", 2}) {
			_, _, err := ReadCheckpoint(t.Context(), after, "a", 2)
			require.ErrorIs(t, err, ErrMissing)
		}
		// Restart as run b: restore a/1, checkpoint b/2 commits; Retain
		// removes a/2's leftovers (complete or not) and keeps b/2 and a/1.
		require.NoError(t, WriteCheckpoint(t.Context(), after, testMeta("b", 2), testFiles("b", 2, 1)))
		require.NoError(t, SetCommitted(t.Context(), after, Ref{"b", 2}))
		require.NoError(t, Retain(t.Context(), after, Ref{"b", 2}, 2))
		names, err := after.List(t.Context(), "")
		require.NoError(t, err)
		for _, n := range names {
			require.False(t, strings.HasPrefix(n, layout.CheckpointPrefix("a", 2)) && !slices.Contains(refs, Ref{"a", 2}),
				"crash at op %d: leftover %s", at, n)
		}
		refs = checkStoreInvariants(t, after)
		require.Contains(t, refs, Ref{"b", 2})
		after.Close()
	}
}

// TestInjectedFailures fails each operation of WriteCheckpoint and of
// SetCommitted once, on a live filesystem (no crash): the call returns an
// error naming a path, and what is visible afterwards is the old state or the
// complete new one.
func TestInjectedFailures(t *testing.T) {
	for at := 1; ; at++ {
		mem := vfs.NewMem()
		s0 := openMem(t, mem)
		require.NoError(t, WriteCheckpoint(t.Context(), s0, testMeta("a", 1), testFiles("a", 1, 1)))
		require.NoError(t, SetCommitted(t.Context(), s0, Ref{"a", 1}))
		require.NoError(t, s0.Close())

		var mu sync.Mutex // WriteCheckpoint writes files in parallel
		n, failAt := 0, 0
		var failed errorfs.Op = -1
		fsys := errorfs.New(mem, func(op errorfs.Op, name string) error {
			mu.Lock()
			defer mu.Unlock()
			n++
			if n == failAt {
				failed = op
				return errorfs.ErrInjected
			}
			return nil
		})
		s, err := OpenStore(fsys, testDir)
		require.NoError(t, err)
		failAt = n + at
		err = WriteCheckpoint(t.Context(), s, testMeta("a", 2), testFiles("a", 2, 3))
		if err == nil {
			err = SetCommitted(t.Context(), s, Ref{"a", 2})
		}
		failAt = 0
		if failed < 0 {
			require.NoError(t, err)
			refs := checkStoreInvariants(t, s)
			require.Equal(t, []Ref{{"a", 1}, {"a", 2}}, refs)
			s.Close()
			break
		}
		require.ErrorIs(t, err, errorfs.ErrInjected, "failed %v at op %d", failed, at)
		require.ErrorContains(t, err, testDir, "failed %v at op %d", failed, at)
		refs := checkStoreInvariants(t, s)
		require.Contains(t, refs, Ref{"a", 1})
		ref, _, err := ReadCommitted(t.Context(), s)
		require.NoError(t, err)
		require.Contains(t, []uint64{1, 2}, ref.ID)
		if ref.ID == 2 {
			require.Contains(t, refs, Ref{"a", 2})
		}
		names, _ := mem.ReadDir(testDir)
		for _, name := range names {
			require.False(t, layout.IsTemp(name), "failed %v at op %d: temp file %s left visible", failed, at, name)
		}
		s.Close()
	}
}

func TestOpenStoreFailures(t *testing.T) {
	for op := errorfs.OpCreate; op <= errorfs.OpLink; op++ {
		t.Run(op.String(), func(t *testing.T) {
			mem := vfs.NewMem()
			writeFile(t, mem, "/x", "", true) // so MkdirAll has work, not
			require.NoError(t, mem.MkdirAll(testDir))
			writeFile(t, mem, filepath.Join(testDir, layout.TempPrefix+"a.1"), "", true)
			_, err := OpenStore(errorfs.New(mem, func(o errorfs.Op, name string) error {
				if o == op {
					return errorfs.ErrInjected
				}
				return nil
			}), testDir)
			switch op {
			case errorfs.OpMkdirAll, errorfs.OpSyncDir, errorfs.OpLock, errorfs.OpReadDir, errorfs.OpRemove:
				require.ErrorIs(t, err, errorfs.ErrInjected)
				require.ErrorContains(t, err, testDir)
			default:
				require.NoError(t, err)
			}
		})
	}
}

func TestRetain(t *testing.T) {
	s := openMem(t, vfs.NewMem())
	for _, r := range []Ref{{"a", 1}, {"a", 2}, {"b", 3}, {"c", 3}, {"c", 4}, {"c", 5}, {"c", 6}} {
		require.NoError(t, WriteCheckpoint(t.Context(), s, testMeta(r.Run, r.ID), testFiles(r.Run, r.ID, 2)))
	}
	// Leftovers of half-written checkpoints: older than committed, and in flight.
	for _, name := range []string{layout.StateFileName("a", 3, "count", 0), layout.StateFileName("c", 7, "count", 0)} {
		require.NoError(t, s.Put(t.Context(), name, []byte("x")))
	}
	committed := Ref{"c", 5}

	require.ErrorContains(t, Retain(t.Context(), s, committed, 0), "keep")
	require.ErrorContains(t, Retain(t.Context(), s, Ref{"c", 99}, 1), "no metadata")

	require.NoError(t, Retain(t.Context(), s, committed, 3))
	refs, err := ListCheckpoints(t.Context(), s)
	require.NoError(t, err)
	require.Equal(t, []Ref{{"c", 3}, {"c", 4}, {"c", 5}, {"c", 6}}, refs)
	names, err := s.List(t.Context(), "")
	require.NoError(t, err)
	require.Contains(t, names, layout.StateFileName("c", 7, "count", 0), "in flight: kept")
	require.NotContains(t, names, layout.StateFileName("a", 3, "count", 0), "leftover: removed")
	for _, n := range names {
		p, ok := layout.ParseName(n)
		require.True(t, ok)
		require.True(t, p.ID >= 3)
	}

	require.NoError(t, Retain(t.Context(), s, committed, 1))
	refs, err = ListCheckpoints(t.Context(), s)
	require.NoError(t, err)
	require.Equal(t, []Ref{{"c", 5}, {"c", 6}}, refs)
	names, err = s.List(t.Context(), "")
	require.NoError(t, err)
	got := map[Ref]int{}
	for _, n := range names {
		p, _ := layout.ParseName(n)
		got[Ref{p.Run, p.ID}]++
	}
	require.Equal(t, map[Ref]int{{"c", 5}: 3, {"c", 6}: 3, {"c", 7}: 1}, got)
	_, _, err = ReadCheckpoint(t.Context(), s, "c", 5)
	require.NoError(t, err)
}

// TestRetainCrash: a crash in the middle of Retain leaves every remaining
// listed checkpoint intact and the committed one in place.
func TestRetainCrash(t *testing.T) {
	for at := 1; ; at++ {
		mem := vfs.NewMem()
		s0 := openMem(t, mem)
		for id := range uint64(4) {
			require.NoError(t, WriteCheckpoint(t.Context(), s0, testMeta("a", id), testFiles("a", id, 2)))
		}
		require.NoError(t, s0.Close())
		c, fsys := newCrashFS(mem, 0)
		s, err := OpenStore(fsys, testDir)
		require.NoError(t, err)
		c.at = c.n + at
		err = Retain(t.Context(), s, Ref{"a", 3}, 1)
		done := c.clone == nil
		s.Close()
		after := openMem(t, c.crashed())
		refs := checkStoreInvariants(t, after)
		require.Contains(t, refs, Ref{"a", 3})
		if done {
			require.NoError(t, err)
			require.Equal(t, []Ref{{"a", 3}}, refs)
			break
		}
		require.NoError(t, Retain(t.Context(), after, Ref{"a", 3}, 1))
		names, err := after.List(t.Context(), "")
		require.NoError(t, err)
		require.Len(t, names, 3, "crash at op %d", at)
		after.Close()
	}
}

func TestDefaultFSCheckpointRoundTrip(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "ckpt")
	s, err := OpenStore(vfs.Default(), dir)
	require.NoError(t, err)
	files := testFiles("ab", 1, 3)
	require.NoError(t, WriteCheckpoint(t.Context(), s, testMeta("ab", 1), files))
	require.NoError(t, SetCommitted(t.Context(), s, Ref{"ab", 1}))
	require.NoError(t, s.Close())

	s, err = OpenStore(vfs.Default(), dir)
	require.NoError(t, err)
	defer s.Close()
	ref, ok, err := ReadCommitted(t.Context(), s)
	require.NoError(t, err)
	require.True(t, ok)
	_, got, err := ReadCheckpoint(t.Context(), s, ref.Run, ref.ID)
	require.NoError(t, err)
	require.Equal(t, files, got)
	require.Equal(t, slices.Sorted(maps.Keys(files)), slices.Sorted(maps.Keys(got)))
}

var _ = errors.Is

// TestRetainNamed: in shared storage, no checkpoint that some partition's
// committed record names is deleted, however old; the newest named one
// plays committed's part (newer ones may be in flight), and keep counts
// the complete checkpoints older than it.
func TestRetainNamed(t *testing.T) {
	s, err := OpenSharedStore(vfs.NewMem(), testDir)
	require.NoError(t, err)
	for _, r := range []Ref{{"ab", 1}, {"ab", 2}, {"cd", 3}, {"ab", 4}, {"ab", 5}, {"ab", 6}, {"ab", 7}} {
		require.NoError(t, WriteCheckpoint(t.Context(), s, testMeta(r.Run, r.ID), testFiles(r.Run, r.ID, 2)))
	}
	require.NoError(t, s.Put(t.Context(), layout.StateFileName("ab", 3, "count", 0), []byte("x"))) // a half-written leftover
	// Partition 0's record still names checkpoint ab/1 (its process has not
	// committed since), partition 1's names cd/3, partition 2's ab/6.
	named := []Ref{{"ab", 1}, {"cd", 3}, {"ab", 6}}

	require.ErrorContains(t, RetainNamed(t.Context(), s, nil, 1), "no committed record")
	err = RetainNamed(t.Context(), s, append(named, Ref{"ab", 99}), 1)
	require.ErrorContains(t, err, "committed checkpoint ab/99 has no metadata "+s.Path(layout.MetaName("ab", 99)))
	refs, err := ListCheckpoints(t.Context(), s)
	require.NoError(t, err)
	require.Len(t, refs, 7, "a record naming a missing checkpoint deletes nothing")

	require.NoError(t, RetainNamed(t.Context(), s, named, 2))
	refs, err = ListCheckpoints(t.Context(), s)
	require.NoError(t, err)
	require.Equal(t, []Ref{{"ab", 1}, {"cd", 3}, {"ab", 5}, {"ab", 6}, {"ab", 7}}, refs,
		"named ones kept, ab/5 kept as the one older checkpoint keep=2 allows, ab/7 in flight, ab/2 and ab/4 gone")
	names, err := s.List(t.Context(), "")
	require.NoError(t, err)
	require.NotContains(t, names, layout.StateFileName("ab", 3, "count", 0), "leftover: removed")
	for _, r := range named {
		_, _, err := ReadCheckpoint(t.Context(), s, r.Run, r.ID)
		require.NoError(t, err, "%s readable", r)
	}
}

// TestRetainOthers: on shared storage, other runs' checkpoints go once no
// record names them and they are older than the cutoff; named ones, young
// ones, the current run's, undatable ones and leftovers with no later
// dated checkpoint stay.
func TestRetainOthers(t *testing.T) {
	s := openMem(t, vfs.NewMem())
	now := time.Now()
	old, young := now.Add(-time.Hour), now
	write := func(run string, id uint64, created time.Time) {
		m := testMeta(run, id)
		m.Created = created
		require.NoError(t, WriteCheckpoint(t.Context(), s, m, testFiles(run, id, 2)))
	}
	write("dead", 1, old)
	write("dead", 3, old) // named
	write("dead", 4, old)
	write("beef", 7, young)
	write("beef", 6, old)
	write("5e1f", 2, old)
	for _, name := range []string{layout.StateFileName("dead", 2, "count", 0), layout.StateFileName("dead", 9, "count", 0), layout.StateFileName("beef", 5, "count", 0)} {
		require.NoError(t, s.Put(t.Context(), name, []byte("leftover")))
	}
	require.NoError(t, s.Put(t.Context(), layout.MetaName("bad", 1), []byte("not metadata")))
	named := []Ref{{"dead", 3}, {"beef", 7}}

	deleted, err := RetainOthers(t.Context(), s, named, "5e1f", now.Add(-time.Minute))
	require.NoError(t, err)
	require.Equal(t, []Ref{{"dead", 1}, {"dead", 2}, {"dead", 4}, {"beef", 5}, {"beef", 6}}, deleted)
	refs, err := ListCheckpoints(t.Context(), s)
	require.NoError(t, err)
	require.ElementsMatch(t, []Ref{{"bad", 1}, {"5e1f", 2}, {"dead", 3}, {"beef", 7}}, refs)
	names, err := s.List(t.Context(), "")
	require.NoError(t, err)
	for _, n := range names {
		p, _ := layout.ParseName(n)
		ref := Ref{Run: p.Run, ID: p.ID}
		require.NotContains(t, deleted, ref, "%s was left behind", n)
	}
	require.Contains(t, names, layout.StateFileName("dead", 9, "count", 0), "a leftover newer than every dated checkpoint of its run stays")
	_, _, err = ReadCheckpoint(t.Context(), s, "dead", 3)
	require.NoError(t, err, "the named checkpoint is whole")

	// Nothing is old enough: nothing goes.
	deleted, err = RetainOthers(t.Context(), s, nil, "5e1f", old.Add(-time.Minute))
	require.NoError(t, err)
	require.Empty(t, deleted)
}
