package keyed

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kordproject/kord/checkpoint"
	"github.com/kordproject/kord/keyed/internal/keygroup"
	"github.com/kordproject/kord/serde"
)

// A user's record, in two versions of its schema: v2 promotes age from
// int to long, removes old, and adds region with a default.
type userV1 struct {
	Name string `json:"name"`
	Age  int32  `json:"age"`
	Old  string `json:"old"`
}

type userV2 struct {
	Name   string `json:"name"`
	Age    int64  `json:"age"`
	Region string `json:"region"`
}

const (
	userSchemaV1 = `{"type":"record","name":"User","namespace":"kord.test","fields":[
		{"name":"name","type":"string"},{"name":"age","type":"int"},{"name":"old","type":"string"}]}`
	userSchemaV2 = `{"type":"record","name":"User","namespace":"kord.test","fields":[
		{"name":"name","type":"string"},{"name":"age","type":"long"},
		{"name":"region","type":"string","default":"eu"}]}`
	// v3 makes age a string: int cannot be read as one.
	userSchemaV3 = `{"type":"record","name":"User","namespace":"kord.test","fields":[
		{"name":"name","type":"string"},{"name":"age","type":"string"}]}`
	// v4 adds a field without a default.
	userSchemaV4 = `{"type":"record","name":"User","namespace":"kord.test","fields":[
		{"name":"name","type":"string"},{"name":"age","type":"int"},{"name":"email","type":"string"}]}`
)

func avroCodec[T any](t testing.TB, schema string) serde.Serde[T] {
	t.Helper()
	c, err := serde.Avro[T](schema)
	require.NoError(t, err)
	return c
}

// userStates is one state of each kind, of users: a value, a list, a map
// keyed by string, a map of lists (WindowApply's state), a map of sessions
// (session windows') and a value with a TTL.
type userStates[U any] struct {
	v        *ValueState[U]
	l        *ListState[U]
	m        *MapState[string, U]
	windows  *MapState[int64, []U]
	sessions *MapState[int64, session[U]]
	ttl      *ValueState[U]
}

func registerUsers[U any](t testing.TB, b *Backend, schema string) userStates[U] {
	t.Helper()
	c := avroCodec[U](t, schema)
	var s userStates[U]
	var err error
	s.v, err = Value(b, "v", c)
	require.NoError(t, err)
	s.l, err = List(b, "l", c)
	require.NoError(t, err)
	s.m, err = Map(b, "m", serde.String(), c)
	require.NoError(t, err)
	s.windows, err = Map(b, "windows", serde.Int64(), serde.Serde[[]U](listCodec[U]{c: c}))
	require.NoError(t, err)
	s.sessions, err = Map(b, "sessions", serde.Int64(), serde.Serde[session[U]](sessionCodec[U]{c: c}))
	require.NoError(t, err)
	s.ttl, err = Value(b, "ttl", c, TTL(time.Hour))
	require.NoError(t, err)
	return s
}

func refsByName(m *checkpoint.Metadata) map[string]checkpoint.OperatorRef {
	out := map[string]checkpoint.OperatorRef{}
	for _, r := range m.Operators {
		out[r.Name] = r
	}
	return out
}

// TestStateSchemaEvolution snapshots Avro-coded states of every kind under
// one schema and restores them under another (a field added with a
// default, one removed, a type promoted): the values read are the old
// ones in the new shape, what is written after is written under the new
// schema, and the next checkpoint records it.
func TestStateSchemaEvolution(t *testing.T) {
	now := int64(1_000_000)
	src := newTestBackend(t, "op", keygroup.Full(testMaxP))
	src.clock = func() int64 { return now }
	s1 := registerUsers[userV1](t, src, userSchemaV1)
	ann := userV1{Name: "ann", Age: 41, Old: "x"}
	bob := userV1{Name: "bob", Age: 7, Old: "y"}
	for _, k := range []string{"a", "b", "c"} {
		setKey(src, k)
		s1.v.Set(ann)
		s1.l.Add(ann)
		s1.l.Add(bob)
		s1.m.Put("p", bob)
		s1.windows.Put(100, []userV1{ann, bob})
		s1.sessions.Put(200, session[userV1]{End: 300, Acc: bob})
		s1.ttl.Set(ann)
	}
	m, files := checkpointOf(t, 1, src)
	refs := refsByName(m)
	v1, v2 := avroCodec[userV1](t, userSchemaV1), avroCodec[userV2](t, userSchemaV2)
	wv1 := v1.(serde.Resolver[userV1]).WriterSchema()
	require.Equal(t, checkpoint.OperatorRef{Name: "op.v", Type: "keyed.value", SchemaFingerprint: v1.Fingerprint(), ValueSchema: wv1}, refs["op.v"])
	require.Equal(t, checkpoint.OperatorRef{Name: "op.m", Type: "keyed.map", SchemaFingerprint: "key=string;value=" + v1.Fingerprint(), ValueSchema: wv1}, refs["op.m"])
	require.Equal(t, "key=int64-be;value=list("+v1.Fingerprint()+")", refs["op.windows"].SchemaFingerprint)
	require.Equal(t, wv1, refs["op.windows"].ValueSchema)
	require.Equal(t, "ttl("+v1.Fingerprint()+")", refs["op.ttl"].SchemaFingerprint)
	require.Equal(t, wv1, refs["op.ttl"].ValueSchema)

	dst := newTestBackend(t, "op", keygroup.Full(testMaxP))
	dst.clock = func() int64 { return now }
	s2 := registerUsers[userV2](t, dst, userSchemaV2)
	require.NoError(t, dst.restore(m, files))
	ann2 := userV2{Name: "ann", Age: 41, Region: "eu"}
	bob2 := userV2{Name: "bob", Age: 7, Region: "eu"}
	for _, k := range []string{"a", "b", "c"} {
		setKey(dst, k)
		got, ok := s2.v.Get()
		require.True(t, ok)
		require.Equal(t, ann2, got)
		require.Equal(t, []userV2{ann2, bob2}, s2.l.Get())
		got, ok = s2.m.Get("p")
		require.True(t, ok)
		require.Equal(t, bob2, got)
		w, ok := s2.windows.Get(100)
		require.True(t, ok)
		require.Equal(t, []userV2{ann2, bob2}, w)
		ss, ok := s2.sessions.Get(200)
		require.True(t, ok)
		require.Equal(t, session[userV2]{End: 300, Acc: bob2}, ss)
		got, ok = s2.ttl.Get()
		require.True(t, ok)
		require.Equal(t, ann2, got)
	}

	// Written after the restore: under v2, and the next checkpoint
	// records v2.
	setKey(dst, "a")
	s2.v.Set(userV2{Name: "cy", Age: 1 << 40, Region: "us"})
	m2, files2 := checkpointOf(t, 2, dst)
	refs = refsByName(m2)
	require.Equal(t, v2.Fingerprint(), refs["op.v"].SchemaFingerprint)
	require.Equal(t, v2.(serde.Resolver[userV2]).WriterSchema(), refs["op.v"].ValueSchema)
	again := newTestBackend(t, "op", keygroup.Full(testMaxP))
	again.clock = func() int64 { return now }
	s3 := registerUsers[userV2](t, again, userSchemaV2)
	require.NoError(t, again.restore(m2, files2))
	setKey(again, "a")
	got, ok := s3.v.Get()
	require.True(t, ok)
	require.Equal(t, userV2{Name: "cy", Age: 1 << 40, Region: "us"}, got)
	setKey(again, "b")
	require.Equal(t, []userV2{ann2, bob2}, s3.l.Get())
}

// TestStateSchemaRefused: a checkpoint whose schema the code's cannot
// read is refused from its metadata alone (no state file is read), naming
// the state, the field and why.
func TestStateSchemaRefused(t *testing.T) {
	src := newTestBackend(t, "op", keygroup.Full(testMaxP))
	v, err := Value(src, "counts", avroCodec[userV1](t, userSchemaV1))
	require.NoError(t, err)
	mp, err := Map(src, "byName", serde.String(), avroCodec[userV1](t, userSchemaV1))
	require.NoError(t, err)
	setKey(src, "a")
	v.Set(userV1{Name: "ann", Age: 41})
	mp.Put("x", userV1{Name: "ann", Age: 41})
	m, files := checkpointOf(t, 1, src)

	restore := func(schema, state string, files map[string][]byte) error {
		b := newTestBackend(t, "op", keygroup.Full(testMaxP))
		// The other state as it was: only state changes.
		if state == "counts" {
			_, err := Value(b, "counts", avroCodec[map[string]any](t, schema))
			require.NoError(t, err)
			_, err = Map(b, "byName", serde.String(), avroCodec[userV1](t, userSchemaV1))
			require.NoError(t, err)
		} else {
			_, err := Value(b, "counts", avroCodec[userV1](t, userSchemaV1))
			require.NoError(t, err)
			_, err = Map(b, "byName", serde.String(), avroCodec[map[string]any](t, schema))
			require.NoError(t, err)
		}
		return b.restore(m, files)
	}
	var me *MismatchError
	err = restore(userSchemaV3, "counts", nil) // no files: decided from the metadata
	require.ErrorAs(t, err, &me)
	require.EqualError(t, err, `keyed: operator "op" state "counts": the checkpoint's schema cannot be read with this code's: field "age": int cannot be read as string`)
	require.Equal(t, "schema", me.Field)
	var re *serde.ResolveError
	require.ErrorAs(t, err, &re)
	require.Equal(t, "age", re.Path)

	err = restore(userSchemaV4, "byName", files)
	require.EqualError(t, err, `keyed: operator "op" state "byName": the checkpoint's schema of the map's values cannot be read with this code's: field "email": the checkpoint's record kord.test.User has no field "email", and this code's kord.test.User gives it no default`)

	// A state that gained a TTL is refused though its schema resolves:
	// its values are not the checkpoint's.
	b := newTestBackend(t, "op", keygroup.Full(testMaxP))
	_, err = Value(b, "counts", avroCodec[userV2](t, userSchemaV2), TTL(time.Hour))
	require.NoError(t, err)
	_, err = Map(b, "byName", serde.String(), avroCodec[userV1](t, userSchemaV1))
	require.NoError(t, err)
	require.ErrorAs(t, b.restore(m, files), &me)
	require.Equal(t, "fingerprint", me.Field)

	// A codec of another format keeps today's rule.
	b = newTestBackend(t, "op", keygroup.Full(testMaxP))
	_, err = Value(b, "counts", serde.JSON[userV2]())
	require.NoError(t, err)
	_, err = Map(b, "byName", serde.String(), avroCodec[userV1](t, userSchemaV1))
	require.NoError(t, err)
	require.ErrorAs(t, b.restore(m, files), &me)
	require.Equal(t, "fingerprint", me.Field)
}

// TestStateSchemaNotRecorded: metadata that records no schema (older than
// format 4) restores when the fingerprints are equal, and is refused as
// before when they are not.
func TestStateSchemaNotRecorded(t *testing.T) {
	src := newTestBackend(t, "op", keygroup.Full(testMaxP))
	s1 := registerUsers[userV1](t, src, userSchemaV1)
	setKey(src, "a")
	s1.v.Set(userV1{Name: "ann", Age: 41, Old: "x"})
	s1.m.Put("p", userV1{Name: "bob", Age: 7})
	m, files := checkpointOf(t, 1, src)
	for i := range m.Operators {
		m.Operators[i].KeySchema, m.Operators[i].ValueSchema = "", ""
	}

	same := newTestBackend(t, "op", keygroup.Full(testMaxP))
	s := registerUsers[userV1](t, same, userSchemaV1)
	require.NoError(t, same.restore(m, files))
	setKey(same, "a")
	got, ok := s.v.Get()
	require.True(t, ok)
	require.Equal(t, userV1{Name: "ann", Age: 41, Old: "x"}, got)

	other := newTestBackend(t, "op", keygroup.Full(testMaxP))
	registerUsers[userV2](t, other, userSchemaV2)
	var me *MismatchError
	require.ErrorAs(t, other.restore(m, files), &me)
	require.Equal(t, "fingerprint", me.Field)
}
