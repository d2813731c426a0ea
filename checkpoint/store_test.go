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

	"github.com/stretchr/testify/require"

	"github.com/kordproject/kord/internal/layout"
	"github.com/kordproject/kord/internal/rig/crashfs"
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

// TestStoreDeleteAll: DeleteAll removes every name given, a missing one
// included, with one directory fsync, and checks each name first.
func TestStoreDeleteAll(t *testing.T) {
	mem := vfs.NewMem()
	var syncs int
	counting := errorfs.New(mem, func(op errorfs.Op, _ string) error {
		if op == errorfs.OpSyncDir {
			syncs++
		}
		return nil
	})
	s, err := OpenStore(counting, testDir)
	require.NoError(t, err)
	defer s.Close()
	for _, name := range []string{"a", "b", "c"} {
		require.NoError(t, s.Put(t.Context(), name, []byte(name)))
	}
	syncs = 0
	require.NoError(t, s.DeleteAll(t.Context(), []string{"a", "b", "missing"}))
	require.Equal(t, 1, syncs, "one directory fsync for the batch")
	names, err := s.List(t.Context(), "")
	require.NoError(t, err)
	require.Equal(t, []string{"c"}, names)
	require.NoError(t, s.DeleteAll(t.Context(), nil))
	require.Equal(t, 1, syncs, "nothing to delete: no fsync")
	require.ErrorContains(t, s.DeleteAll(t.Context(), []string{"c", "../x"}), "not a valid object name")
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

func TestPutCrash(t *testing.T) {
	// Put's operations: open (exists check), create, write, sync, close,
	// rename, syncdir.
	for at := 1; ; at++ {
		mem := vfs.NewMem()
		s0 := openMem(t, mem)
		require.NoError(t, s0.Close())
		c, fsys := crashfs.New(mem)
		s, err := OpenStore(fsys, testDir)
		require.NoError(t, err)
		c.CrashIn(at) // count from after OpenStore
		err = s.Put(t.Context(), "obj", []byte("data"))
		done := !c.Crashed()
		s.Close()

		after := openMem(t, c.After())
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

		c, fsys := crashfs.New(mem)
		s, err := OpenStore(fsys, testDir)
		require.NoError(t, err)
		c.CrashIn(at)
		err = SetCommitted(t.Context(), s, Ref{Run: "a", ID: 2})
		done := !c.Crashed()
		s.Close()

		after := openMem(t, c.After())
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

		c, fsys := crashfs.New(mem)
		s, err := OpenStore(fsys, testDir)
		require.NoError(t, err)
		c.CrashIn(at)
		err = WriteCheckpoint(t.Context(), s, testMeta("a", 2), testFiles("a", 2, 3))
		done := !c.Crashed()
		s.Close()

		after := openMem(t, c.After())
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
