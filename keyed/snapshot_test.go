package keyed

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kordproject/kord/checkpoint"
	"github.com/kordproject/kord/internal/layout"
	"github.com/kordproject/kord/internal/rig/uuids"
	"github.com/kordproject/kord/internal/statefile"
	"github.com/kordproject/kord/keyed/internal/keygroup"
	"github.com/kordproject/kord/serde"
	"github.com/kordproject/kord/vfs"
)

const testRun = "abc123"

// decodeFiles reads state files of operator op back into a model, checking
// every file's name and key groups on the way.
func decodeFiles(t testing.TB, op string, maxP int, files map[string][]byte) *model {
	t.Helper()
	md := newModel()
	for name, data := range files {
		n, ok := layout.ParseName(name)
		require.True(t, ok, name)
		o, st, ok := layout.SplitOperator(n.Operator)
		require.True(t, ok, name)
		if o != op {
			continue
		}
		kgs, groups, err := statefile.DecodeKeyGroups(name, data)
		require.NoError(t, err)
		require.NotEmpty(t, kgs, "no empty files")
		require.Equal(t, n.KeyGroup, kgs[0], "a file is named by its instance's first key group")
		var entries []statefile.Entry
		var entryKG []int
		for i, es := range groups {
			require.NotEmpty(t, es, "no empty key groups")
			entries = append(entries, es...)
			for range es {
				entryKG = append(entryKG, kgs[i])
			}
		}
		for j, e := range entries {
			k := string(e.Key)
			require.Equal(t, entryKG[j], keygroup.Of(e.Key, maxP), "key %s in file %s", k, name)
			switch st {
			case "count":
				v, err := serde.Int64().Decode(e.Value)
				require.NoError(t, err)
				md.v[k] = v
			case "events":
				l, err := decodeList(e.Value, serde.String())
				require.NoError(t, err)
				md.l[k] = l
			case "attrs":
				m, err := decodeMap(e.Value, serde.String(), serde.Int64())
				require.NoError(t, err)
				md.m[k] = m
			default:
				t.Fatalf("unexpected state %q in %s", st, name)
			}
		}
	}
	return md
}

func requireModel(t testing.TB, want, got *model) {
	t.Helper()
	require.Equal(t, want.v, got.v, "value state")
	require.Equal(t, want.l, got.l, "list state")
	require.Equal(t, want.m, got.m, "map state")
}

// TestSnapshotCopyOnWrite takes snapshots, keeps mutating every key while
// the snapshots are encoded on other goroutines (run it with -race), and
// checks each snapshot holds exactly the state at its barrier.
func TestSnapshotCopyOnWrite(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	keys := testKeys(2000)
	b := newTestBackend(t, "op", keygroup.Full(testMaxP))
	s := registerStateSet(t, b)
	md := newModel()
	for range 20_000 {
		step(r, b, s, md, keys[r.IntN(len(keys))])
	}
	type result struct {
		files map[string][]byte
		err   error
	}
	var wg sync.WaitGroup
	var snaps []*snapshot
	var want []*model
	results := make([]result, 3)
	for i := range results {
		snap := b.takeSnapshot()
		require.Equal(t, len(md.v)+len(md.l)+len(md.m), snap.Len())
		snaps = append(snaps, snap)
		want = append(want, md.clone())
		wg.Go(func() {
			files, err := snap.Encode(testRun, uint64(i+1), 4)
			results[i] = result{files, err}
		})
		// Keep processing while the encoders run: every kind of write on
		// every key, lists appended to and maps changed in place.
		for range 30_000 {
			step(r, b, s, md, keys[r.IntN(len(keys))])
		}
	}
	wg.Wait()
	for i, res := range results {
		require.NoError(t, res.err)
		requireModel(t, want[i], decodeFiles(t, "op", testMaxP, res.files))
		snaps[i].Release()
	}
	check(t, b, s, md, keys)

	// Released: writes go in place again, and the snapshot is unusable.
	_, err := snaps[0].Encode(testRun, 9, 1)
	require.ErrorIs(t, err, errReleased)
	snaps[0].Release() // idempotent
	require.Zero(t, b.pending.Load())
}

// TestCopyOnWriteGranularity checks, white box, that a snapshot copies a key
// group's table only on the first write to it, not on reads, and not at all
// once released.
func TestCopyOnWriteGranularity(t *testing.T) {
	b := newTestBackend(t, "op", keygroup.Full(testMaxP))
	v, err := Value(b, "v", serde.Int64())
	require.NoError(t, err)
	m, err := Map(b, "m", serde.String(), serde.Int64())
	require.NoError(t, err)
	k1 := "a"
	setKey(b, k1)
	v.Set(1)
	m.Put("x", 1)
	g := keygroup.Of([]byte(k1), testMaxP)
	t0, m0 := v.s.groups[g], m.s.groups[g]

	snap := b.takeSnapshot()
	v.Get()
	m.Get("x")
	require.Same(t, t0, v.s.groups[g], "reads do not copy")
	v.Set(2)
	t1 := v.s.groups[g]
	require.NotSame(t, t0, t1, "the first write copies")
	v.Set(3)
	require.Same(t, t1, v.s.groups[g], "later writes do not")
	n, _ := v.Get()
	require.Equal(t, int64(3), n)
	require.Same(t, m0, m.s.groups[g], "other states are copied on their own writes")
	m.Put("x", 2)
	require.NotSame(t, m0, m.s.groups[g])
	require.Equal(t, int64(1), m0.Vals[m0.Idx[k1]]["x"], "the snapshot's inner map is not written")

	files, err := snap.Encode(testRun, 1, 1)
	require.NoError(t, err)
	got := decodeFilesAny(t, files)
	require.Equal(t, []byte{0, 0, 0, 0, 0, 0, 0, 1}, got["op.v"][k1])
	snap.Release()

	// Every snapshot released: the table taken at the snapshot is written
	// in place.
	snap2 := b.takeSnapshot()
	snap2.Release()
	t2 := v.s.groups[g]
	v.Set(4)
	require.Same(t, t2, v.s.groups[g])
}

func decodeFilesAny(t testing.TB, files map[string][]byte) map[string]map[string][]byte {
	out := map[string]map[string][]byte{}
	for name, data := range files {
		n, _ := layout.ParseName(name)
		_, groups, err := statefile.DecodeKeyGroups(name, data)
		require.NoError(t, err)
		if out[n.Operator] == nil {
			out[n.Operator] = map[string][]byte{}
		}
		for _, es := range groups {
			for _, e := range es {
				out[n.Operator][string(e.Key)] = e.Value
			}
		}
	}
	return out
}

// checkpointOf snapshots and encodes every backend into one checkpoint of
// maxP key groups, through a checkpoint.Store on a vfs.MemFS, and reads it
// back as the engine would.
func checkpointOf(t testing.TB, id uint64, backends ...*Backend) (*checkpoint.Metadata, map[string][]byte) {
	t.Helper()
	store, err := checkpoint.OpenStore(vfs.NewMem(), "/ckpt")
	require.NoError(t, err)
	defer store.Close()
	all := map[string][]byte{}
	var refs []checkpoint.OperatorRef
	for _, b := range backends {
		snap := b.takeSnapshot()
		files, err := snap.Encode(testRun, id, 0)
		require.NoError(t, err)
		defer snap.Release() // the files' memory is the snapshot's until then
		for n, d := range files {
			_, dup := all[n]
			require.False(t, dup, "two instances wrote %s", n)
			all[n] = d
		}
		for _, ref := range snap.OperatorRefs() {
			if !slices.Contains(refs, ref) {
				refs = append(refs, ref)
			}
		}
	}
	m := &checkpoint.Metadata{Run: testRun, ID: id, Created: time.Now(), MaxParallelism: backends[0].MaxParallelism(), Operators: refs}
	require.NoError(t, checkpoint.WriteCheckpoint(t.Context(), store, m, all))
	m, files, err := checkpoint.ReadCheckpoint(t.Context(), store, testRun, id)
	require.NoError(t, err)
	return m, files
}

// instances makes p backends of operator op, each with the state set.
func instances(t testing.TB, op string, p int) ([]*Backend, []stateSet) {
	bs := make([]*Backend, p)
	ss := make([]stateSet, p)
	for i := range p {
		bs[i] = newTestBackend(t, op, keygroup.RangeFor(i, testMaxP, p))
		ss[i] = registerStateSet(t, bs[i])
	}
	return bs, ss
}

// owner returns the instance of p that owns key.
func owner(key string, p int) int {
	return keygroup.OperatorIndex(keygroup.Of([]byte(key), testMaxP), testMaxP, p)
}

// TestRescale snapshots 2 instances, restores into 3, processes more,
// snapshots those and restores into 1: every key's state is what a single
// model saw.
func TestRescale(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	keys := testKeys(3000)
	md := newModel()
	run := func(bs []*Backend, ss []stateSet, n int) {
		for range n {
			k := keys[r.IntN(len(keys))]
			i := owner(k, len(bs))
			step(r, bs[i], ss[i], md, k)
		}
	}
	restore := func(p int, m *checkpoint.Metadata, files map[string][]byte) ([]*Backend, []stateSet) {
		bs, ss := instances(t, "op", p)
		for _, b := range bs {
			require.NoError(t, b.restore(m, files))
		}
		for i, b := range bs {
			check(t, b, ss[i], md, keys)
		}
		return bs, ss
	}

	bs2, ss2 := instances(t, "op", 2)
	// Another operator's state in the same checkpoint is left alone.
	other := newTestBackend(t, "other", keygroup.Full(testMaxP))
	ov, err := Value(other, "count", serde.String())
	require.NoError(t, err)
	setKey(other, "x")
	ov.Set("not an int64")
	run(bs2, ss2, 30_000)
	m, files := checkpointOf(t, 1, append(bs2, other)...)

	bs3, ss3 := restore(3, m, files)
	run(bs3, ss3, 30_000)
	m, files = checkpointOf(t, 2, bs3...)

	bs1, ss1 := restore(1, m, files)
	requireModel(t, md, decodeFiles(t, "op", testMaxP, mustEncode(t, bs1[0])))
	_ = ss1
}

func mustEncode(t testing.TB, b *Backend) map[string][]byte {
	t.Helper()
	snap := b.takeSnapshot()
	defer snap.Release()
	files, err := snap.Encode(testRun, 7, 0)
	require.NoError(t, err)
	return files
}

// TestRestorePartitioned restores in the partitioned mode, where key groups
// are partitions and cannot be recomputed from keys.
func TestRestorePartitioned(t *testing.T) {
	const partitions = 6
	src := make([]*Backend, 2)
	vs := make([]*ValueState[int64], 2)
	for i := range src {
		var err error
		src[i], err = newBackend("count", partitions, keygroup.RangeFor(i, partitions, 2))
		require.NoError(t, err)
		vs[i], err = Value(src[i], "n", serde.Int64())
		require.NoError(t, err)
	}
	want := map[int]map[string]int64{}
	for p := range partitions {
		want[p] = map[string]int64{}
		i := keygroup.OperatorIndex(p, partitions, 2)
		for k := range 10 {
			key := fmt.Sprintf("p%d-k%d", p, k)
			src[i].setCurrentKey([]byte(key), keygroup.OfPartition(int32(p)))
			vs[i].Set(int64(p*100 + k))
			want[p][key] = int64(p*100 + k)
		}
	}
	m, files := checkpointOf(t, 1, src...)
	dst, err := newBackend("count", partitions, keygroup.Full(partitions))
	require.NoError(t, err)
	v, err := Value(dst, "n", serde.Int64())
	require.NoError(t, err)
	require.NoError(t, dst.restore(m, files))
	for p, kv := range want {
		for key, n := range kv {
			dst.setCurrentKey([]byte(key), p)
			got, ok := v.Get()
			require.True(t, ok)
			require.Equal(t, n, got)
		}
	}
	// With the keyBy key-group function the same files are refused: their
	// keys are not in the key groups the hash gives.
	hashed, err := newBackend("count", partitions, keygroup.Full(partitions), keyGroupFunc(func(k []byte) int { return keygroup.Of(k, partitions) }))
	require.NoError(t, err)
	_, err = Value(hashed, "n", serde.Int64())
	require.NoError(t, err)
	var ce *checkpoint.CorruptError
	require.ErrorAs(t, hashed.restore(m, files), &ce)
	require.Contains(t, ce.Reason, "belongs to key group")
}

func TestRestoreRefusals(t *testing.T) {
	src := newTestBackend(t, "op", keygroup.Full(testMaxP))
	s := registerStateSet(t, src)
	setKey(src, "k")
	s.v.Set(1)
	s.l.Add("a")
	s.m.Put("x", 1)
	m, files := checkpointOf(t, 1, src)

	fresh := func(reg func(b *Backend)) *Backend {
		b := newTestBackend(t, "op", keygroup.Full(testMaxP))
		reg(b)
		return b
	}
	var me *MismatchError

	// Another fingerprint.
	b := fresh(func(b *Backend) {
		_, err := Value(b, "count", serde.JSON[int64]())
		require.NoError(t, err)
	})
	err := b.restore(m, files)
	require.ErrorAs(t, err, &me)
	require.Equal(t, MismatchError{Operator: "op", State: "count", Field: "fingerprint", Want: "json:int64", Found: "int64-be"}, *me)
	require.EqualError(t, err, `keyed: operator "op" state "count": the checkpoint's fingerprint is "int64-be", this code's is "json:int64"`)

	// Another kind.
	b = fresh(func(b *Backend) {
		_, err := List(b, "count", serde.Int64())
		require.NoError(t, err)
	})
	require.ErrorAs(t, b.restore(m, files), &me)
	require.Equal(t, "type", me.Field)
	require.Equal(t, "keyed.list", me.Want)
	require.Equal(t, "keyed.value", me.Found)

	// A state in the checkpoint that the code does not register.
	b = fresh(func(b *Backend) {
		_, err := Value(b, "count", serde.Int64())
		require.NoError(t, err)
	})
	err = b.restore(m, files)
	require.ErrorAs(t, err, &me)
	require.Equal(t, "state", me.Field)
	require.ErrorContains(t, err, "not registered")

	// A state file with no record in the metadata.
	b = fresh(func(b *Backend) { registerStateSet(t, b) })
	noRefs := *m
	noRefs.Operators = nil
	require.ErrorAs(t, b.restore(&noRefs, files), &me)
	require.Equal(t, "record", me.Field)

	// Another max parallelism.
	b, err = newBackend("op", 64, keygroup.Full(64))
	require.NoError(t, err)
	registerStateSet(t, b)
	require.ErrorContains(t, b.restore(m, files), "max parallelism 128, this backend 64")

	// A new state (registered, not in the checkpoint) starts empty.
	b = fresh(func(b *Backend) { registerStateSet(t, b) })
	nv, err := Value(b, "added", serde.Int64())
	require.NoError(t, err)
	require.NoError(t, b.restore(m, files))
	setKey(b, "k")
	_, ok := nv.Get()
	require.False(t, ok)
	require.ErrorContains(t, b.restore(m, files), "twice")
	_, err = Value(b, "late", serde.Int64())
	require.ErrorContains(t, err, "after Restore")

	// Restore into a backend that has state.
	b = fresh(func(b *Backend) {
		ss := registerStateSet(t, b)
		setKey(b, "z")
		ss.v.Set(1)
	})
	require.ErrorContains(t, b.restore(m, files), "has state")
}

// TestRestoreCorruptFiles checks that a state file that does not decode,
// holds a key of another key group than its index says, a duplicate key, an
// undecodable value or a key group that another file holds too is a
// *checkpoint.CorruptError naming the file, and that the backend is left
// empty.
func TestRestoreCorruptFiles(t *testing.T) {
	// Two keys in adjacent key groups.
	var k1, k2 string
	for i := 0; k2 == ""; i++ {
		k := fmt.Sprintf("key-%d", i)
		switch {
		case k1 == "":
			if keygroup.Of([]byte(k), testMaxP) < 63 { // one varint byte for it and the next
				k1 = k
			}
		case keygroup.Of([]byte(k), testMaxP) == keygroup.Of([]byte(k1), testMaxP)+1:
			k2 = k
		}
	}
	kg1 := keygroup.Of([]byte(k1), testMaxP)
	other := (kg1 + 1) % testMaxP
	v8 := make([]byte, 8)
	good := encodeEntries(t, kg1, statefile.Entry{Key: []byte(k1), Value: v8})
	name := layout.StateFileName(testRun, 1, "op.count", 0)
	otherName := layout.StateFileName(testRun, 1, "op.count", 1)
	for _, c := range []struct {
		what   string
		file   string
		data   []byte
		reason string
	}{
		{"garbage", name, []byte("not avro"), "not an Avro object container file"},
		{"truncated", name, good[:len(good)-3], "state file at byte"},
		{"other key group", name, encodeEntries(t, kg1, statefile.Entry{Key: []byte(k1), Value: v8}, statefile.Entry{Key: []byte(k2), Value: v8}), "belongs to key group"},
		{"duplicate key", name, encodeEntries(t, kg1, statefile.Entry{Key: []byte(k1), Value: v8}, statefile.Entry{Key: []byte(k1), Value: v8}), "appears twice"},
		{"bad value", name, encodeEntries(t, kg1, statefile.Entry{Key: []byte(k1), Value: []byte{1, 2, 3}}), "int64: 3 bytes, want 8"},
		{"key group in two files", layout.StateFileName(testRun, 1, "op.count", 2), encodeEntries(t, other, statefile.Entry{Key: []byte(k2), Value: v8}), "is also in " + otherName},
	} {
		t.Run(c.what, func(t *testing.T) {
			b := newTestBackend(t, "op", keygroup.Full(testMaxP))
			v, err := Value(b, "count", serde.Int64())
			require.NoError(t, err)
			m := &checkpoint.Metadata{Run: testRun, ID: 1, MaxParallelism: testMaxP, Operators: b.operatorRefs()}
			// A good file next to the bad one: the backend must not keep it.
			files := map[string][]byte{c.file: c.data, otherName: encodeEntries(t, other, statefile.Entry{Key: []byte(k2), Value: v8})}
			err = b.restore(m, files)
			var ce *checkpoint.CorruptError
			require.ErrorAs(t, err, &ce)
			require.Equal(t, c.file, ce.Path)
			require.Contains(t, ce.Reason, c.reason)
			require.True(t, b.states[0].empty(), "left empty")
			setKey(b, k1)
			_, ok := v.Get()
			require.False(t, ok)
		})
	}
	// The key groups of a file outside the range are not decoded, however
	// bad: kg1's records claim another key group.
	b := newTestBackend(t, "op", keygroup.Range{Start: other, End: other})
	_, err := Value(b, "count", serde.Int64())
	require.NoError(t, err)
	m := &checkpoint.Metadata{Run: testRun, ID: 1, MaxParallelism: testMaxP, Operators: b.operatorRefs()}
	bad := bytes.Clone(good)
	i := bytes.LastIndex(bad, []byte(k1)) - 2 // the record: key group, key length, key
	require.Equal(t, byte(2*kg1), bad[i])
	bad[i] += 2
	_, _, err = statefile.DecodeKeyGroups(name, bad)
	require.ErrorContains(t, err, "record of key group")
	require.NoError(t, b.restore(m, map[string][]byte{name: bad}))
	// A name that is not a state file of this checkpoint is an error.
	b = newTestBackend(t, "op", keygroup.Full(testMaxP))
	require.Error(t, b.restore(m, map[string][]byte{"ckpt-abc123-00000000000000000001.meta": nil}))
	b = newTestBackend(t, "op", keygroup.Full(testMaxP))
	require.Error(t, b.restore(m, map[string][]byte{layout.StateFileName(testRun, 2, "op.count", 0): good}))
}

// encodeEntries makes a key-group range file holding entries in key group
// kg.
func encodeEntries(t testing.TB, kg int, entries ...statefile.Entry) []byte {
	t.Helper()
	b, err := statefile.EncodeKeyGroups([]int{kg}, 1, func(int, int) ([]statefile.Entry, error) { return entries, nil })
	require.NoError(t, err)
	return b
}

func TestEncodeErrors(t *testing.T) {
	b := newTestBackend(t, "op", keygroup.Full(testMaxP))
	v, err := Value(b, "v", failingCodec{})
	require.NoError(t, err)
	setKey(b, "k")
	v.Set(1)
	snap := b.takeSnapshot()
	defer snap.Release()
	_, err = snap.Encode(testRun, 1, 1)
	require.ErrorContains(t, err, `operator "op" state "v"`)
	require.ErrorIs(t, err, errFailing)
	_, err = snap.Encode("NOT-HEX", 1, 1)
	require.Error(t, err)
}

var errFailing = errors.New("failing codec")

type failingCodec struct{}

func (failingCodec) Encode(dst []byte, v int) ([]byte, error) { return dst, errFailing }
func (failingCodec) Decode(b []byte) (int, error)             { return 0, errFailing }
func (failingCodec) Fingerprint() string                      { return "failing" }

// fillCounters makes a backend with a ValueState[int64] of n uuid keys.
func fillCounters(tb testing.TB, n int) (*Backend, [][]byte, []int) {
	r := rand.New(rand.NewPCG(11, 12))
	b := newTestBackend(tb, "op", keygroup.Full(testMaxP))
	v, err := Value(b, "count", serde.Int64())
	require.NoError(tb, err)
	keys := make([][]byte, n)
	kgs := make([]int, n)
	for i := range keys {
		keys[i] = []byte(uuids.V4(r))
		kgs[i] = keygroup.Of(keys[i], testMaxP)
		b.setCurrentKey(keys[i], kgs[i])
		v.Set(int64(i))
	}
	return b, keys, kgs
}

// BenchmarkValueStateGetSet is the per-event cost of a counter: set the
// current key, read, write, cycling over 100,000 keys (and 1,000, which
// stay in cache).
func BenchmarkValueStateGetSet(b *testing.B) {
	for _, n := range []int{100_000, 1_000} {
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			be, keys, kgs := fillCounters(b, n)
			v := &ValueState[int64]{s: be.states[0].(*store[int64])}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				be.setCurrentKey(keys[i], kgs[i])
				n, _ := v.Get()
				v.Set(n + 1)
				if i++; i == len(keys) {
					i = 0
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
		})
	}
}

// BenchmarkSnapshot is the stall at the barrier: Snapshot of 1,000,000
// keys in 128 key groups.
func BenchmarkSnapshot(b *testing.B) {
	be, _, _ := fillCounters(b, 1_000_000)
	b.ReportAllocs()
	for b.Loop() {
		be.takeSnapshot().Release()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1e3, "stall-µs")
}

// BenchmarkCopyOnWrite is the deferred cost of a snapshot: after it, one
// write to each of the 128 key groups copies every table (1,000,000 keys).
func BenchmarkCopyOnWrite(b *testing.B) {
	be, keys, kgs := fillCounters(b, 1_000_000)
	v := be.states[0].(*store[int64])
	first := map[int]int{}
	for i, kg := range kgs {
		if _, ok := first[kg]; !ok {
			first[kg] = i
		}
	}
	vs := &ValueState[int64]{s: v}
	for b.Loop() {
		snap := be.takeSnapshot()
		for _, i := range first {
			be.setCurrentKey(keys[i], kgs[i])
			vs.Set(1)
		}
		snap.Release()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1e6, "cow-ms")
}

// BenchmarkEncode encodes a snapshot of 1,000,000 8-byte counters (36-byte
// uuid keys) on GOMAXPROCS goroutines.
func BenchmarkEncode(b *testing.B) {
	be, _, _ := fillCounters(b, 1_000_000)
	snap := be.takeSnapshot()
	defer snap.Release()
	var size int
	b.ReportAllocs()
	for b.Loop() {
		files, err := snap.Encode(testRun, 1, 0)
		require.NoError(b, err)
		size = 0
		for _, f := range files {
			size += len(f)
		}
	}
	sec := b.Elapsed().Seconds() / float64(b.N)
	b.ReportMetric(sec*1e3, "ms/encode")
	b.ReportMetric(float64(size)/1e6/sec, "MB/s")
	b.ReportMetric(float64(size), "file-bytes")
}

// BenchmarkRestore restores the files BenchmarkEncode makes into a fresh
// backend.
func BenchmarkRestore(b *testing.B) {
	be, _, _ := fillCounters(b, 1_000_000)
	snap := be.takeSnapshot()
	files, err := snap.Encode(testRun, 1, 0)
	require.NoError(b, err)
	snap.Release()
	m := &checkpoint.Metadata{Run: testRun, ID: 1, MaxParallelism: testMaxP, Operators: be.operatorRefs()}
	size := 0
	for _, f := range files {
		size += len(f)
	}
	b.ReportAllocs()
	for b.Loop() {
		nb := newTestBackend(b, "op", keygroup.Full(testMaxP))
		_, err := Value(nb, "count", serde.Int64())
		require.NoError(b, err)
		require.NoError(b, nb.restore(m, files))
	}
	sec := b.Elapsed().Seconds() / float64(b.N)
	b.ReportMetric(sec*1e3, "ms/restore")
	b.ReportMetric(float64(size)/1e6/sec, "MB/s")
}

// TestEncodeReusesMemory checks, white box, that a snapshot's files are
// encoded into the memory of the last released snapshot's, and never into
// the memory of a snapshot not yet released.
func TestEncodeReusesMemory(t *testing.T) {
	b, _, _ := fillCounters(t, 5000)
	only := func(files map[string][]byte) []byte {
		require.Len(t, files, 1)
		for _, d := range files {
			return d
		}
		return nil
	}
	s1 := b.takeSnapshot()
	f1 := only(mustEncodeSnap(t, s1))
	want := bytes.Clone(f1)
	s2 := b.takeSnapshot()
	f2 := only(mustEncodeSnap(t, s2))
	require.NotSame(t, &f1[0], &f2[0], "s1 is not released: its memory is its own")
	require.Equal(t, want[len(want)-100:], f1[len(f1)-100:], "s1's file unchanged by s2's encoding")
	s1.Release()
	s3 := b.takeSnapshot()
	f3 := only(mustEncodeSnap(t, s3))
	require.Same(t, &f1[0], &f3[0], "s3 reuses released s1's memory")
	_, _, err := statefile.DecodeKeyGroups("f3", f3)
	require.NoError(t, err)
	s2.Release()
	s3.Release()
}

func mustEncodeSnap(t testing.TB, s *snapshot) map[string][]byte {
	t.Helper()
	files, err := s.Encode(testRun, 1, 1)
	require.NoError(t, err)
	return files
}
