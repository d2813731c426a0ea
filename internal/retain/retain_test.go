package retain

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kordproject/kord/checkpoint"
	"github.com/kordproject/kord/internal/layout"
	"github.com/kordproject/kord/internal/rig/crashfs"
	"github.com/kordproject/kord/vfs"
)

const testDir = "/ckpt"

func openMem(t testing.TB, fsys vfs.FS) *checkpoint.Store {
	t.Helper()
	s, err := checkpoint.OpenStore(fsys, testDir)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s
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

func testMeta(run string, id uint64) *checkpoint.Metadata {
	return &checkpoint.Metadata{Run: run, ID: id, MaxParallelism: 4,
		Offsets: []checkpoint.PartitionOffset{{Topic: "t", Partition: 0, Offset: int64(id) * 10}}}
}

// checkStoreInvariants checks what must hold after any crash or failure:
// every listed checkpoint reads back intact, no temp file is visible after
// reopening, and the committed marker decodes.
func checkStoreInvariants(t *testing.T, s *checkpoint.Store) []checkpoint.Ref {
	t.Helper()
	refs, err := checkpoint.ListCheckpoints(t.Context(), s)
	require.NoError(t, err)
	for _, r := range refs {
		_, _, err := checkpoint.ReadCheckpoint(t.Context(), s, r.Run, r.ID)
		require.NoError(t, err, "listed checkpoint %s", r)
	}
	_, _, err = checkpoint.ReadCommitted(t.Context(), s)
	require.NoError(t, err)
	return refs
}

// TestRetainAfterWriteCrash: after a crash anywhere in
// checkpoint.WriteCheckpoint, the next run's retention removes what the
// crash left of the checkpoint.
func TestRetainAfterWriteCrash(t *testing.T) {
	for at := 1; ; at++ {
		mem := vfs.NewMem()
		s0 := openMem(t, mem)
		require.NoError(t, checkpoint.WriteCheckpoint(t.Context(), s0, testMeta("a", 1), testFiles("a", 1, 2)))
		require.NoError(t, checkpoint.SetCommitted(t.Context(), s0, checkpoint.Ref{Run: "a", ID: 1}))
		require.NoError(t, s0.Close())

		c, fsys := crashfs.New(mem)
		s, err := checkpoint.OpenStore(fsys, testDir)
		require.NoError(t, err)
		c.CrashIn(at)
		err = checkpoint.WriteCheckpoint(t.Context(), s, testMeta("a", 2), testFiles("a", 2, 3))
		done := !c.Crashed()
		s.Close()

		after := openMem(t, c.After())
		refs := checkStoreInvariants(t, after)
		if done {
			require.NoError(t, err)
			require.Equal(t, []checkpoint.Ref{{Run: "a", ID: 1}, {Run: "a", ID: 2}}, refs)
			break
		}
		require.Error(t, err)
		require.Contains(t, refs, checkpoint.Ref{Run: "a", ID: 1})
		if !slices.Contains(refs, checkpoint.Ref{Run: "a", ID: 2}) {
			_, _, err := checkpoint.ReadCheckpoint(t.Context(), after, "a", 2)
			require.ErrorIs(t, err, checkpoint.ErrMissing)
		}
		// Restart as run b: restore a/1, checkpoint b/2 commits; Committed
		// removes a/2's leftovers (complete or not) and keeps b/2 and a/1.
		require.NoError(t, checkpoint.WriteCheckpoint(t.Context(), after, testMeta("b", 2), testFiles("b", 2, 1)))
		require.NoError(t, checkpoint.SetCommitted(t.Context(), after, checkpoint.Ref{Run: "b", ID: 2}))
		require.NoError(t, Committed(t.Context(), after, checkpoint.Ref{Run: "b", ID: 2}, 2))
		names, err := after.List(t.Context(), "")
		require.NoError(t, err)
		for _, n := range names {
			require.False(t, strings.HasPrefix(n, layout.CheckpointPrefix("a", 2)) && !slices.Contains(refs, checkpoint.Ref{Run: "a", ID: 2}),
				"crash at op %d: leftover %s", at, n)
		}
		refs = checkStoreInvariants(t, after)
		require.Contains(t, refs, checkpoint.Ref{Run: "b", ID: 2})
		after.Close()
	}
}

func TestCommitted(t *testing.T) {
	s := openMem(t, vfs.NewMem())
	for _, r := range []checkpoint.Ref{{Run: "a", ID: 1}, {Run: "a", ID: 2}, {Run: "b", ID: 3}, {Run: "c", ID: 3}, {Run: "c", ID: 4}, {Run: "c", ID: 5}, {Run: "c", ID: 6}} {
		require.NoError(t, checkpoint.WriteCheckpoint(t.Context(), s, testMeta(r.Run, r.ID), testFiles(r.Run, r.ID, 2)))
	}
	// Leftovers of half-written checkpoints: older than committed, and in flight.
	for _, name := range []string{layout.StateFileName("a", 3, "count", 0), layout.StateFileName("c", 7, "count", 0)} {
		require.NoError(t, s.Put(t.Context(), name, []byte("x")))
	}
	committed := checkpoint.Ref{Run: "c", ID: 5}

	require.ErrorContains(t, Committed(t.Context(), s, committed, 0), "keep")
	require.ErrorContains(t, Committed(t.Context(), s, checkpoint.Ref{Run: "c", ID: 99}, 1), "no metadata")

	require.NoError(t, Committed(t.Context(), s, committed, 3))
	refs, err := checkpoint.ListCheckpoints(t.Context(), s)
	require.NoError(t, err)
	require.Equal(t, []checkpoint.Ref{{Run: "c", ID: 3}, {Run: "c", ID: 4}, {Run: "c", ID: 5}, {Run: "c", ID: 6}}, refs)
	names, err := s.List(t.Context(), "")
	require.NoError(t, err)
	require.Contains(t, names, layout.StateFileName("c", 7, "count", 0), "in flight: kept")
	require.NotContains(t, names, layout.StateFileName("a", 3, "count", 0), "leftover: removed")
	for _, n := range names {
		p, ok := layout.ParseName(n)
		require.True(t, ok)
		require.True(t, p.ID >= 3)
	}

	require.NoError(t, Committed(t.Context(), s, committed, 1))
	refs, err = checkpoint.ListCheckpoints(t.Context(), s)
	require.NoError(t, err)
	require.Equal(t, []checkpoint.Ref{{Run: "c", ID: 5}, {Run: "c", ID: 6}}, refs)
	names, err = s.List(t.Context(), "")
	require.NoError(t, err)
	got := map[checkpoint.Ref]int{}
	for _, n := range names {
		p, _ := layout.ParseName(n)
		got[checkpoint.Ref{Run: p.Run, ID: p.ID}]++
	}
	require.Equal(t, map[checkpoint.Ref]int{{Run: "c", ID: 5}: 3, {Run: "c", ID: 6}: 3, {Run: "c", ID: 7}: 1}, got)
	_, _, err = checkpoint.ReadCheckpoint(t.Context(), s, "c", 5)
	require.NoError(t, err)
}

// TestCommittedCrash: a crash in the middle of Committed leaves every remaining
// listed checkpoint intact and the committed one in place.
func TestCommittedCrash(t *testing.T) {
	for at := 1; ; at++ {
		mem := vfs.NewMem()
		s0 := openMem(t, mem)
		for id := range uint64(4) {
			require.NoError(t, checkpoint.WriteCheckpoint(t.Context(), s0, testMeta("a", id), testFiles("a", id, 2)))
		}
		require.NoError(t, s0.Close())
		c, fsys := crashfs.New(mem)
		s, err := checkpoint.OpenStore(fsys, testDir)
		require.NoError(t, err)
		c.CrashIn(at)
		err = Committed(t.Context(), s, checkpoint.Ref{Run: "a", ID: 3}, 1)
		done := !c.Crashed()
		s.Close()
		after := openMem(t, c.After())
		refs := checkStoreInvariants(t, after)
		require.Contains(t, refs, checkpoint.Ref{Run: "a", ID: 3})
		if done {
			require.NoError(t, err)
			require.Equal(t, []checkpoint.Ref{{Run: "a", ID: 3}}, refs)
			break
		}
		require.NoError(t, Committed(t.Context(), after, checkpoint.Ref{Run: "a", ID: 3}, 1))
		names, err := after.List(t.Context(), "")
		require.NoError(t, err)
		require.Len(t, names, 3, "crash at op %d", at)
		after.Close()
	}
}

// TestNamed: in shared storage, no checkpoint that some partition's
// committed record names is deleted, however old; the newest named one
// plays committed's part (newer ones may be in flight), and keep counts
// the complete checkpoints older than it.
func TestNamed(t *testing.T) {
	s, err := checkpoint.OpenSharedStore(vfs.NewMem(), testDir)
	require.NoError(t, err)
	for _, r := range []checkpoint.Ref{{Run: "ab", ID: 1}, {Run: "ab", ID: 2}, {Run: "cd", ID: 3}, {Run: "ab", ID: 4}, {Run: "ab", ID: 5}, {Run: "ab", ID: 6}, {Run: "ab", ID: 7}} {
		require.NoError(t, checkpoint.WriteCheckpoint(t.Context(), s, testMeta(r.Run, r.ID), testFiles(r.Run, r.ID, 2)))
	}
	require.NoError(t, s.Put(t.Context(), layout.StateFileName("ab", 3, "count", 0), []byte("x"))) // a half-written leftover
	// Partition 0's record still names checkpoint ab/1 (its process has not
	// committed since), partition 1's names cd/3, partition 2's ab/6.
	named := []checkpoint.Ref{{Run: "ab", ID: 1}, {Run: "cd", ID: 3}, {Run: "ab", ID: 6}}

	require.ErrorContains(t, Named(t.Context(), s, nil, 1), "no committed record")
	err = Named(t.Context(), s, append(named, checkpoint.Ref{Run: "ab", ID: 99}), 1)
	require.ErrorContains(t, err, "committed checkpoint ab/99 has no metadata "+s.Path(layout.MetaName("ab", 99)))
	refs, err := checkpoint.ListCheckpoints(t.Context(), s)
	require.NoError(t, err)
	require.Len(t, refs, 7, "a record naming a missing checkpoint deletes nothing")

	require.NoError(t, Named(t.Context(), s, named, 2))
	refs, err = checkpoint.ListCheckpoints(t.Context(), s)
	require.NoError(t, err)
	require.Equal(t, []checkpoint.Ref{{Run: "ab", ID: 1}, {Run: "cd", ID: 3}, {Run: "ab", ID: 5}, {Run: "ab", ID: 6}, {Run: "ab", ID: 7}}, refs,
		"named ones kept, ab/5 kept as the one older checkpoint keep=2 allows, ab/7 in flight, ab/2 and ab/4 gone")
	names, err := s.List(t.Context(), "")
	require.NoError(t, err)
	require.NotContains(t, names, layout.StateFileName("ab", 3, "count", 0), "leftover: removed")
	for _, r := range named {
		_, _, err := checkpoint.ReadCheckpoint(t.Context(), s, r.Run, r.ID)
		require.NoError(t, err, "%s readable", r)
	}
}

// TestOthers: on shared storage, other runs' checkpoints go once no
// record names them and they are older than the cutoff; named ones, young
// ones, the current run's, undatable ones and leftovers with no later
// dated checkpoint stay.
func TestOthers(t *testing.T) {
	s := openMem(t, vfs.NewMem())
	now := time.Now()
	old, young := now.Add(-time.Hour), now
	write := func(run string, id uint64, created time.Time) {
		m := testMeta(run, id)
		m.Created = created
		require.NoError(t, checkpoint.WriteCheckpoint(t.Context(), s, m, testFiles(run, id, 2)))
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
	named := []checkpoint.Ref{{Run: "dead", ID: 3}, {Run: "beef", ID: 7}}

	deleted, err := Others(t.Context(), s, named, "5e1f", now.Add(-time.Minute))
	require.NoError(t, err)
	require.Equal(t, []checkpoint.Ref{{Run: "dead", ID: 1}, {Run: "dead", ID: 2}, {Run: "dead", ID: 4}, {Run: "beef", ID: 5}, {Run: "beef", ID: 6}}, deleted)
	refs, err := checkpoint.ListCheckpoints(t.Context(), s)
	require.NoError(t, err)
	require.ElementsMatch(t, []checkpoint.Ref{{Run: "bad", ID: 1}, {Run: "5e1f", ID: 2}, {Run: "dead", ID: 3}, {Run: "beef", ID: 7}}, refs)
	names, err := s.List(t.Context(), "")
	require.NoError(t, err)
	for _, n := range names {
		p, _ := layout.ParseName(n)
		ref := checkpoint.Ref{Run: p.Run, ID: p.ID}
		require.NotContains(t, deleted, ref, "%s was left behind", n)
	}
	require.Contains(t, names, layout.StateFileName("dead", 9, "count", 0), "a leftover newer than every dated checkpoint of its run stays")
	_, _, err = checkpoint.ReadCheckpoint(t.Context(), s, "dead", 3)
	require.NoError(t, err, "the named checkpoint is whole")

	// Nothing is old enough: nothing goes.
	deleted, err = Others(t.Context(), s, nil, "5e1f", old.Add(-time.Minute))
	require.NoError(t, err)
	require.Empty(t, deleted)
}

// TestClaim: the first job's claim holds; the same job claims again;
// another job is refused with both names.
func TestClaim(t *testing.T) {
	s, err := checkpoint.OpenSharedStore(vfs.NewMem(), "/shared")
	require.NoError(t, err)
	require.NoError(t, Claim(t.Context(), s, "counts"))
	require.NoError(t, Claim(t.Context(), s, "counts"))
	err = Claim(t.Context(), s, "other")
	require.ErrorIs(t, err, ErrOtherJob)
	require.ErrorContains(t, err, `job "counts"`)
	require.ErrorContains(t, err, `not of job "other"`)
	require.ErrorContains(t, err, "/shared/JOB")
}
