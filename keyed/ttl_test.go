package keyed

import (
	"maps"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kordproject/kord/keyed/internal/keygroup"
	"github.com/kordproject/kord/serde"
)

// ttlStates are a value, a list and a map state with a 100 ms TTL on
// backend b, whose clock is *now (Unix ms).
type ttlStates struct {
	v *ValueState[int64]
	l *ListState[string]
	m *MapState[string, int64]
}

func newTTLBackend(t *testing.T, now *int64, ttl time.Duration) (*Backend, ttlStates) {
	t.Helper()
	b := newTestBackend(t, "op", keygroup.Full(testMaxP))
	b.clock = func() int64 { return *now }
	var s ttlStates
	var err error
	s.v, err = Value(b, "v", serde.Int64(), TTL(ttl))
	require.NoError(t, err)
	s.l, err = List(b, "l", serde.String(), TTL(ttl))
	require.NoError(t, err)
	s.m, err = Map(b, "m", serde.String(), serde.Int64(), TTL(ttl))
	require.NoError(t, err)
	return b, s
}

func mapOf(m *MapState[string, int64]) map[string]int64 {
	out := map[string]int64{}
	m.Range(func(k string, v int64) bool { out[k] = v; return true })
	return out
}

// TestTTL: entries of value, list and map states expire 100 ms after
// their last write, each on its own: invisible at once (Get, Range, Len),
// rewritten ones live again.
func TestTTL(t *testing.T) {
	now := int64(1_000_000)
	b, s := newTTLBackend(t, &now, 100*time.Millisecond)
	setKey(b, "a")
	s.v.Set(1)
	s.l.Add("x")
	s.m.Put("p", 1)
	now += 60
	s.l.Add("y")
	s.m.Put("q", 2)
	now += 39 // 99 ms after the first writes: all live
	v, ok := s.v.Get()
	require.True(t, ok)
	require.Equal(t, int64(1), v)
	require.Equal(t, []string{"x", "y"}, s.l.Get())
	require.Equal(t, map[string]int64{"p": 1, "q": 2}, mapOf(s.m))
	now++ // 100 ms: the first writes expired
	_, ok = s.v.Get()
	require.False(t, ok)
	require.Equal(t, []string{"y"}, s.l.Get())
	require.Equal(t, map[string]int64{"q": 2}, mapOf(s.m))
	require.Equal(t, 1, s.m.Len())
	_, ok = s.m.Get("p")
	require.False(t, ok)
	require.False(t, s.m.Contains("p"))
	s.v.Set(2) // a write lives again
	s.m.Put("q", 3)
	now += 99
	v, _ = s.v.Get()
	require.Equal(t, int64(2), v)
	require.Nil(t, s.l.Get(), "y expired too")
	require.Equal(t, map[string]int64{"q": 3}, mapOf(s.m))
	s.l.Update([]string{"u", "w"})
	require.Equal(t, []string{"u", "w"}, s.l.Get())
	now += 100
	require.Nil(t, s.l.Get())
	require.Zero(t, s.m.Len())
	_, ok = s.v.Get()
	require.False(t, ok)
	_, err := Value(b, "bad", serde.Int64(), TTL(time.Microsecond))
	require.ErrorContains(t, err, "TTL")
}

// TestTTLSnapshot: a snapshot leaves expired entries out (a restore in the
// past would otherwise see them live), and live ones keep their write
// time, so that they expire on time after the restore. A state cannot
// gain a TTL across a restore.
func TestTTLSnapshot(t *testing.T) {
	now := int64(1_000_000)
	b, s := newTTLBackend(t, &now, 100*time.Millisecond)
	for _, k := range []string{"a", "b"} {
		setKey(b, k)
		s.v.Set(1)
		s.l.Add("old")
		s.m.Put("old", 1)
	}
	now += 50
	setKey(b, "a")
	s.l.Add("new")
	s.m.Put("new", 2)
	setKey(b, "c")
	s.v.Set(3)
	now += 60 // the first writes expired; "new" and c's value live until 1_000_150
	m, files := checkpointOf(t, 1, b)

	back := int64(1_000_000) // a clock before every write: only what was saved shows
	r, rs := newTTLBackend(t, &back, 100*time.Millisecond)
	require.NoError(t, r.restore(m, files))
	for _, k := range []string{"a", "b"} {
		setKey(r, k)
		_, ok := rs.v.Get()
		require.False(t, ok, "%s's expired value was saved", k)
	}
	setKey(r, "a")
	require.Equal(t, []string{"new"}, rs.l.Get())
	require.Equal(t, map[string]int64{"new": 2}, mapOf(rs.m))
	setKey(r, "b")
	require.Nil(t, rs.l.Get())
	require.Zero(t, rs.m.Len())
	setKey(r, "c")
	v, ok := rs.v.Get()
	require.True(t, ok)
	require.Equal(t, int64(3), v)

	back = 1_000_149 // the saved write times hold: still live
	setKey(r, "a")
	require.Equal(t, []string{"new"}, rs.l.Get())
	back = 1_000_150
	require.Nil(t, rs.l.Get())
	require.Zero(t, rs.m.Len())
	setKey(r, "c")
	_, ok = rs.v.Get()
	require.False(t, ok)

	plain := newTestBackend(t, "op", keygroup.Full(testMaxP))
	_, err := Value(plain, "v", serde.Int64())
	require.NoError(t, err)
	_, err = List(plain, "l", serde.String())
	require.NoError(t, err)
	_, err = Map(plain, "m", serde.String(), serde.Int64())
	require.NoError(t, err)
	var me *MismatchError
	require.ErrorAs(t, plain.restore(m, files), &me)
	require.Equal(t, "fingerprint", me.Field)
}

// TestTTLCopyOnWrite: a snapshot judges expiry at the time it was taken,
// and removing an expired entry on read while the snapshot holds the table
// leaves the snapshot's copy as it was.
func TestTTLCopyOnWrite(t *testing.T) {
	now := int64(1_000_000)
	b, s := newTTLBackend(t, &now, 100*time.Millisecond)
	setKey(b, "a")
	s.m.Put("p", 1)
	s.m.Put("q", 2)
	now += 50
	s.m.Put("q", 3)
	snap := b.takeSnapshot()
	defer snap.Release()
	before := maps.Clone(mapOf(s.m))
	now += 60
	_, ok := s.m.Get("p") // expired: removed from the live table
	require.False(t, ok)
	files, err := snap.Encode(testRun, 3, 0)
	require.NoError(t, err)
	got := decodeFilesAny(t, files)
	require.Len(t, got["op.m"], 1)
	saved, err := decodeMap(got["op.m"]["a"], serde.String(), serde.Serde[stamped[int64]](stampedCodec[int64]{c: serde.Int64()}))
	require.NoError(t, err)
	require.Equal(t, map[string]stamped[int64]{"p": {V: 1, At: 1_000_000}, "q": {V: 3, At: 1_000_050}}, saved,
		"the snapshot, taken before p expired, holds it")
	require.Equal(t, map[string]int64{"p": 1, "q": 3}, before)
	require.Equal(t, map[string]int64{"q": 3}, mapOf(s.m))
}
