package keyed

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kordproject/kord/internal/rig/uuids"
	"github.com/kordproject/kord/keyed/internal/keygroup"
	"github.com/kordproject/kord/serde"
)

const testMaxP = 128

func newTestBackend(t testing.TB, op string, r keygroup.Range) *Backend {
	t.Helper()
	b, err := newBackend(op, testMaxP, r, keyGroupFunc(func(k []byte) int { return keygroup.Of(k, testMaxP) }))
	require.NoError(t, err)
	return b
}

// setKey makes key current on b, in its keyBy key group.
func setKey(b *Backend, key string) {
	b.setCurrentKey([]byte(key), keygroup.Of([]byte(key), b.MaxParallelism()))
}

func TestValueState(t *testing.T) {
	b := newTestBackend(t, "op", keygroup.Full(testMaxP))
	v, err := Value(b, "count", serde.Int64())
	require.NoError(t, err)
	s, err := Value(b, "name", serde.String())
	require.NoError(t, err)

	setKey(b, "a")
	got, ok := v.Get()
	require.False(t, ok)
	require.Zero(t, got)
	v.Set(1)
	s.Set("alice")
	setKey(b, "b")
	_, ok = v.Get()
	require.False(t, ok, "state is per key")
	v.Set(2)
	v.Set(3)
	setKey(b, "a")
	got, ok = v.Get()
	require.True(t, ok)
	require.Equal(t, int64(1), got)
	name, _ := s.Get()
	require.Equal(t, "alice", name)
	v.Clear()
	_, ok = v.Get()
	require.False(t, ok)
	name, ok = s.Get()
	require.True(t, ok, "clearing one state leaves the others")
	require.Equal(t, "alice", name)
	v.Clear() // clearing nothing is fine
	v.Set(9)  // reuses the freed slot
	setKey(b, "b")
	got, _ = v.Get()
	require.Equal(t, int64(3), got)
	setKey(b, "a")
	got, _ = v.Get()
	require.Equal(t, int64(9), got)

	// The key is copied when stored: reusing the caller's buffer is fine.
	buf := []byte("zz")
	b.setCurrentKey(buf, keygroup.Of(buf, testMaxP))
	v.Set(5)
	buf[0] = 'y'
	setKey(b, "zz")
	got, ok = v.Get()
	require.True(t, ok)
	require.Equal(t, int64(5), got)
}

func TestListState(t *testing.T) {
	b := newTestBackend(t, "op", keygroup.Full(testMaxP))
	l, err := List(b, "events", serde.String())
	require.NoError(t, err)
	setKey(b, "k")
	require.Nil(t, l.Get())
	l.Add("a")
	l.Add("b")
	view := l.Get()
	require.Equal(t, []string{"a", "b"}, view)
	_ = append(view, "x") // cannot write into the state: capacity is length
	l.Add("c")
	require.Equal(t, []string{"a", "b", "c"}, l.Get())
	require.Equal(t, []string{"a", "b"}, view, "a view does not change when the list grows")

	in := []string{"x", "y"}
	l.Update(in)
	in[0] = "changed"
	require.Equal(t, []string{"x", "y"}, l.Get(), "Update copies")
	l.Update(nil)
	require.Nil(t, l.Get(), "an empty update clears")
	l.Add("z")
	l.Clear()
	require.Nil(t, l.Get())
	setKey(b, "other")
	require.Nil(t, l.Get())
}

func TestMapState(t *testing.T) {
	b := newTestBackend(t, "op", keygroup.Full(testMaxP))
	m, err := Map(b, "attrs", serde.String(), serde.Int64())
	require.NoError(t, err)
	setKey(b, "k")
	_, ok := m.Get("x")
	require.False(t, ok)
	require.Zero(t, m.Len())
	m.Put("x", 1)
	m.Put("y", 2)
	m.Put("x", 3)
	v, ok := m.Get("x")
	require.True(t, ok)
	require.Equal(t, int64(3), v)
	require.True(t, m.Contains("y"))
	require.Equal(t, 2, m.Len())
	require.Equal(t, map[string]int64{"x": 3, "y": 2}, maps.Collect(m.All()))
	n := 0
	m.Range(func(string, int64) bool { n++; return false })
	require.Equal(t, 1, n, "Range stops when f returns false")
	m.Delete("nope")
	m.Delete("x")
	require.Equal(t, map[string]int64{"y": 2}, maps.Collect(m.All()))
	m.Delete("y")
	require.Zero(t, m.Len())
	require.True(t, b.states[0].empty(), "an emptied map is no state")
	m.Put("z", 1)
	setKey(b, "other")
	require.Zero(t, m.Len())
	setKey(b, "k")
	m.Clear()
	require.Zero(t, m.Len())
}

func TestRegistration(t *testing.T) {
	b := newTestBackend(t, "op", keygroup.Full(testMaxP))
	_, err := Value(b, "s", serde.Int64())
	require.NoError(t, err)
	_, err = List(b, "s", serde.Int64())
	require.ErrorContains(t, err, "already registered")
	for _, bad := range []string{"", "a.b", "a b", "ü", string(make([]byte, 200))} {
		_, err = Value(b, bad, serde.Int64())
		require.Error(t, err, "%q", bad)
	}
	long := make([]byte, 125) // "op." + 125 = 128: the longest file operator
	for i := range long {
		long[i] = 'x'
	}
	_, err = Value(b, string(long), serde.Int64())
	require.NoError(t, err)
	_, err = Value(b, string(long)+"x", serde.Int64())
	require.Error(t, err)

	require.Equal(t, []stateInfo{
		{Operator: "op", Name: "s", Kind: kindValue, Fingerprint: "int64-be"},
		{Operator: "op", Name: string(long), Kind: kindValue, Fingerprint: "int64-be"},
	}, b.stateInfos())
	mp, err := Map(b, "m", serde.String(), serde.JSON[[]int]())
	require.NoError(t, err)
	_ = mp
	refs := b.operatorRefs()
	require.Equal(t, "op.m", refs[2].Name)
	require.Equal(t, "keyed.map", refs[2].Type)
	require.Equal(t, "key=string;value=json:[]int", refs[2].SchemaFingerprint)

	for _, bad := range []string{"", "a.b", "x/y"} {
		_, err := newBackend(bad, testMaxP, keygroup.Full(testMaxP))
		require.Error(t, err, "%q", bad)
	}
	for _, r := range []keygroup.Range{{Start: 0, End: testMaxP}, {Start: -1, End: 3}, {Start: 5, End: 4}} {
		_, err := newBackend("op", testMaxP, r)
		require.Error(t, err, "%v", r)
	}
	_, err = newBackend("op", keygroup.MaxParallelismLimit+1, keygroup.Full(keygroup.MaxParallelismLimit+1))
	require.Error(t, err)
}

func TestCurrentKeyChecks(t *testing.T) {
	r := keygroup.RangeFor(1, testMaxP, 2) // [64, 127]
	b := newTestBackend(t, "op", r)
	v, err := Value(b, "v", serde.Int64())
	require.NoError(t, err)
	require.PanicsWithValue(t, `keyed: operator "op" state "v" used with no current key (state is only accessible while the runtime processes a keyed record)`,
		func() { v.Get() })
	key, kg := b.currentKey()
	require.Nil(t, key)
	require.Equal(t, -1, kg)
	require.Panics(t, func() { b.setCurrentKey([]byte("k"), 3) })
	require.Panics(t, func() { b.setCurrentKey([]byte("k"), testMaxP) })
	require.ErrorContains(t, b.check([]byte("k"), 3), "outside this instance's range [64, 127]")

	var in, out []byte
	for i := 0; in == nil || out == nil; i++ {
		k := fmt.Appendf(nil, "key-%d", i)
		if r.Contains(keygroup.Of(k, testMaxP)) {
			in = k
		} else {
			out = k
		}
	}
	kg = keygroup.Of(in, testMaxP)
	require.NoError(t, b.check(in, kg))
	other := r.Start + (kg-r.Start+1)%r.Len()
	require.ErrorContains(t, b.check(in, other), "is in key group")
	b.setCurrentKey(in, kg)
	gotKey, gotKG := b.currentKey()
	require.Equal(t, in, gotKey)
	require.Equal(t, kg, gotKG)

	// Without a key-group function only the range is checked.
	p, err := newBackend("op", testMaxP, r)
	require.NoError(t, err)
	require.NoError(t, p.check(in, other))
}

// TestHotPathAllocs checks that reading and updating an existing key
// allocates nothing, and that storing a new key allocates the key once
// (amortized table growth aside).
func TestHotPathAllocs(t *testing.T) {
	b := newTestBackend(t, "op", keygroup.Full(testMaxP))
	v, err := Value(b, "count", serde.Int64())
	require.NoError(t, err)
	m, err := Map(b, "m", serde.String(), serde.Int64())
	require.NoError(t, err)
	l, err := List(b, "l", serde.Int64())
	require.NoError(t, err)
	key := []byte("3f2b8c1e-9d4a-4e6b-8f0a-1c2d3e4f5a6b")
	kg := keygroup.Of(key, testMaxP)
	b.setCurrentKey(key, kg)
	v.Set(1)
	m.Put("x", 1)
	l.Add(1)
	require.Zero(t, testing.AllocsPerRun(1000, func() {
		b.setCurrentKey(key, kg)
		n, _ := v.Get()
		v.Set(n + 1)
		x, _ := m.Get("x")
		m.Put("x", x+1)
		_ = l.Get()
	}))
	// New keys, all in one key group so that table growth amortizes (the
	// hot path does not check the key group).
	keys := make([][]byte, 20_000)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "new-key-%06d", i)
	}
	i := 0
	allocs := testing.AllocsPerRun(len(keys)-1, func() {
		b.setCurrentKey(keys[i], 0)
		v.Set(1)
		i++
	})
	t.Logf("%.2f allocations to store a new key", allocs)
	require.LessOrEqual(t, allocs, 1.5, "a new key allocates its string, plus amortized growth")
}

// TestValueStateMemory measures the heap a ValueState[int64] takes for
// 1,000,000 uuid keys (36 bytes), after GC, and checks that the overhead
// beyond the key and value bytes (36 + 8) is at most 150 bytes a key.
func TestValueStateMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("1M keys")
	}
	const n = 1_000_000
	r := rand.New(rand.NewPCG(3, 4))
	keys := make([][]byte, n)
	kgs := make([]int, n)
	for i := range keys {
		keys[i] = []byte(uuids.V4(r))
		kgs[i] = keygroup.Of(keys[i], testMaxP)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	b := newTestBackend(t, "op", keygroup.Full(testMaxP))
	v, err := Value(b, "count", serde.Int64())
	require.NoError(t, err)
	for i, k := range keys {
		b.setCurrentKey(k, kgs[i])
		v.Set(int64(i))
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	perKey := float64(after.HeapAlloc-before.HeapAlloc) / n
	overhead := perKey - 36 - 8
	t.Logf("ValueState[int64], %d keys of 36 bytes: %.1f heap bytes a key, %.1f beyond key and value", n, perKey, overhead)
	require.LessOrEqual(t, overhead, 150.0)
	runtime.KeepAlive(b)
	runtime.KeepAlive(keys)
}

// stateSet is one of each kind of state, used by the model tests.
type stateSet struct {
	v *ValueState[int64]
	l *ListState[string]
	m *MapState[string, int64]
}

func registerStateSet(t testing.TB, b *Backend) stateSet {
	t.Helper()
	v, err := Value(b, "count", serde.Int64())
	require.NoError(t, err)
	l, err := List(b, "events", serde.String())
	require.NoError(t, err)
	m, err := Map(b, "attrs", serde.String(), serde.Int64())
	require.NoError(t, err)
	return stateSet{v, l, m}
}

// model is the deliberately simple reference: plain maps.
type model struct {
	v map[string]int64
	l map[string][]string
	m map[string]map[string]int64
}

func newModel() *model {
	return &model{v: map[string]int64{}, l: map[string][]string{}, m: map[string]map[string]int64{}}
}

func (md *model) clone() *model {
	c := newModel()
	maps.Copy(c.v, md.v)
	for k, l := range md.l {
		c.l[k] = slices.Clone(l)
	}
	for k, m := range md.m {
		c.m[k] = maps.Clone(m)
	}
	return c
}

// step applies one to three random operations on key to the states and
// the model.
func step(r *rand.Rand, b *Backend, s stateSet, md *model, key string) {
	setKey(b, key)
	for range 1 + r.IntN(3) {
		op(r, s, md, key)
	}
}

func op(r *rand.Rand, s stateSet, md *model, key string) {
	switch op := r.IntN(12); op {
	case 0, 1, 2:
		n, _ := s.v.Get()
		s.v.Set(n + 1)
		md.v[key]++
	case 3:
		s.v.Clear()
		delete(md.v, key)
	case 4, 5:
		e := fmt.Sprint(r.IntN(100))
		s.l.Add(e)
		md.l[key] = append(md.l[key], e)
	case 6:
		l := []string{fmt.Sprint(r.IntN(100)), "u"}
		s.l.Update(l)
		md.l[key] = slices.Clone(l)
	case 7:
		s.l.Clear()
		delete(md.l, key)
	case 8, 9:
		uk, uv := fmt.Sprint(r.IntN(5)), r.Int64N(1000)
		s.m.Put(uk, uv)
		if md.m[key] == nil {
			md.m[key] = map[string]int64{}
		}
		md.m[key][uk] = uv
	case 10:
		uk := fmt.Sprint(r.IntN(5))
		s.m.Delete(uk)
		if mm := md.m[key]; mm != nil {
			delete(mm, uk)
			if len(mm) == 0 {
				delete(md.m, key)
			}
		}
	case 11:
		s.m.Clear()
		delete(md.m, key)
	}
}

// check compares every key's state with the model, through the API.
func check(t testing.TB, b *Backend, s stateSet, md *model, keys []string) {
	t.Helper()
	for _, k := range keys {
		if !b.keyRange().Contains(keygroup.Of([]byte(k), b.MaxParallelism())) {
			continue
		}
		setKey(b, k)
		v, ok := s.v.Get()
		want, wantOK := md.v[k]
		require.Equal(t, wantOK, ok, "value of %s", k)
		require.Equal(t, want, v, "value of %s", k)
		require.Equal(t, md.l[k], s.l.Get(), "list of %s", k)
		if md.m[k] == nil {
			require.Zero(t, s.m.Len(), "map of %s", k)
		} else {
			require.Equal(t, md.m[k], maps.Collect(s.m.All()), "map of %s", k)
		}
	}
}

func testKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("key-%04d", i)
	}
	return keys
}

// TestStatesAgainstModel runs random operations, with snapshots taken and
// released in between, and compares with the model.
func TestStatesAgainstModel(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	keys := testKeys(300)
	b := newTestBackend(t, "op", keygroup.Full(testMaxP))
	s := registerStateSet(t, b)
	md := newModel()
	var open []*snapshot
	for i := range 20_000 {
		step(r, b, s, md, keys[r.IntN(len(keys))])
		switch {
		case i%997 == 0:
			open = append(open, b.takeSnapshot())
		case i%1499 == 0 && len(open) > 0:
			open[0].Release()
			open = open[1:]
		}
	}
	check(t, b, s, md, keys)
	for _, sn := range open {
		sn.Release()
	}
}
