package registry_test

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"

	"github.com/confluentinc/confluent-kafka-go/v2/schemaregistry"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/kordproject/kord/serde"
	"github.com/kordproject/kord/serde/registry"
)

// These tests run against confluent-kafka-go's mock registry (a mock://
// URL), not a registry server: see the package doc.

func mock(t *testing.T) *registry.Client {
	t.Helper()
	sr, err := schemaregistry.NewClient(schemaregistry.NewConfig("mock://kord"))
	require.NoError(t, err)
	return registry.Of(sr, "mock://kord")
}

const userV1 = `{"type":"record","name":"User","namespace":"kord.test","fields":[
	{"name":"name","type":"string"},{"name":"age","type":"int"}]}`

// userV2 adds a field with a default: values written under v1 read as v2.
const userV2 = `{"type":"record","name":"User","namespace":"kord.test","fields":[
	{"name":"name","type":"string"},{"name":"age","type":"int"},{"name":"email","type":"string","default":"none"}]}`

// userV3 adds a field without one: v1's values cannot be read as v3.
const userV3 = `{"type":"record","name":"User","namespace":"kord.test","fields":[
	{"name":"name","type":"string"},{"name":"age","type":"int"},{"name":"plan","type":"string"}]}`

type user1 struct {
	Name string `json:"name"`
	Age  int32  `json:"age"`
}

type user2 struct {
	Name  string `json:"name"`
	Age   int32  `json:"age"`
	Email string `json:"email"`
}

type user3 struct {
	Name string `json:"name"`
	Age  int32  `json:"age"`
	Plan string `json:"plan"`
}

func subjectOf(s any) string { return s.(interface{ Subject() string }).Subject() }

// TestAvroRoundTrip: a value written in magic-0 format (0x00, the id the
// registry gave the schema under <topic>-value, the Avro binary) reads
// back, and the registry holds the schema under that subject and id.
func TestAvroRoundTrip(t *testing.T) {
	c := mock(t)
	s, err := registry.Avro[user1](c, "users", userV1)
	require.NoError(t, err)
	require.Equal(t, "users-value", subjectOf(s))
	b, err := s.Encode(nil, user1{Name: "ada", Age: 36})
	require.NoError(t, err)
	require.Equal(t, byte(0), b[0])
	id := int(binary.BigEndian.Uint32(b[1:5]))
	md, err := c.Registry().GetLatestSchemaMetadata("users-value")
	require.NoError(t, err)
	require.Equal(t, md.ID, id)
	plain, err := serde.Avro[user1](userV1)
	require.NoError(t, err)
	body, err := plain.Encode(nil, user1{Name: "ada", Age: 36})
	require.NoError(t, err)
	require.Equal(t, body, b[5:], "the value is the plain Avro binary after the prefix")
	v, err := s.Decode(b)
	require.NoError(t, err)
	require.Equal(t, user1{Name: "ada", Age: 36}, v)
}

// TestGUIDFormat: WriteGUID writes magic 1 and the schema's GUID; a
// reader reads it (and magic 0) back, whichever format was written.
func TestGUIDFormat(t *testing.T) {
	c := mock(t)
	w, err := registry.Avro[user1](c, "users", userV1, registry.WriteGUID())
	require.NoError(t, err)
	b, err := w.Encode(nil, user1{Name: "bo", Age: 7})
	require.NoError(t, err)
	require.Equal(t, byte(1), b[0])
	md, err := c.Registry().GetLatestSchemaMetadata("users-value")
	require.NoError(t, err)
	g, err := uuid.FromBytes(b[1:17])
	require.NoError(t, err)
	require.Equal(t, md.GUID, g.String())
	r, err := registry.Avro[user1](c, "users", userV1)
	require.NoError(t, err)
	v, err := r.Decode(b)
	require.NoError(t, err)
	require.Equal(t, user1{Name: "bo", Age: 7}, v)
}

// TestSubjects: Confluent's three subject strategies, and the key's.
func TestSubjects(t *testing.T) {
	c := mock(t)
	for _, tc := range []struct {
		opts []registry.Opt
		want string
	}{
		{nil, "users-value"},
		{[]registry.Opt{registry.Key()}, "users-key"},
		{[]registry.Opt{registry.SubjectStrategy(registry.RecordName)}, "kord.test.User"},
		{[]registry.Opt{registry.SubjectStrategy(registry.TopicRecordName)}, "users-kord.test.User"},
	} {
		s, err := registry.Avro[user1](c, "users", userV1, tc.opts...)
		require.NoError(t, err)
		require.Equal(t, tc.want, subjectOf(s))
		_, err = s.Encode(nil, user1{Name: "x"})
		require.NoError(t, err)
		_, err = c.Registry().GetLatestSchemaMetadata(tc.want)
		require.NoError(t, err, "registered under %s", tc.want)
	}
	_, err := registry.Avro[string](c, "users", `"string"`, registry.SubjectStrategy(registry.RecordName))
	require.ErrorContains(t, err, "need a named record")
}

// TestNoAutoRegister: without AutoRegister, a schema not registered fails
// the first write, naming the subject; once registered, it is found.
func TestNoAutoRegister(t *testing.T) {
	c := mock(t)
	s, err := registry.Avro[user1](c, "users", userV1, registry.AutoRegister(false))
	require.NoError(t, err)
	_, err = s.Encode(nil, user1{Name: "x"})
	require.ErrorContains(t, err, "subject users-value")
	require.ErrorContains(t, err, "AutoRegister is off")
	id, err := c.Registry().Register("users-value", schemaregistry.SchemaInfo{Schema: userV1}, false)
	require.NoError(t, err)
	s, err = registry.Avro[user1](c, "users", userV1, registry.AutoRegister(false))
	require.NoError(t, err)
	b, err := s.Encode(nil, user1{Name: "x"})
	require.NoError(t, err)
	require.Equal(t, id, int(binary.BigEndian.Uint32(b[1:5])))
}

// TestEvolution: values written under v1 read as v2 (a field added with a
// default takes it), under the id the registry gave v1; a reader whose
// schema adds a field without a default cannot read them, and says which
// subject, id and field; and a writer can write under a given version.
func TestEvolution(t *testing.T) {
	c := mock(t)
	w1, err := registry.Avro[user1](c, "users", userV1)
	require.NoError(t, err)
	b, err := w1.Encode(nil, user1{Name: "cy", Age: 3})
	require.NoError(t, err)
	id := int(binary.BigEndian.Uint32(b[1:5]))

	r2, err := registry.Avro[user2](c, "users", userV2)
	require.NoError(t, err)
	v, err := r2.Decode(b)
	require.NoError(t, err)
	require.Equal(t, user2{Name: "cy", Age: 3, Email: "none"}, v)

	r3, err := registry.Avro[user3](c, "users", userV3)
	require.NoError(t, err)
	_, err = r3.Decode(b)
	require.Error(t, err)
	require.ErrorContains(t, err, "subject users-value")
	require.ErrorContains(t, err, "schema id")
	require.ErrorContains(t, err, `"plan"`)
	var rerr *serde.ResolveError
	require.ErrorAs(t, err, &rerr)
	_ = id

	// With v2 registered too (the latest), a v1 writer told to write
	// version 1 writes v1's id, and a v2 writer told to write the latest
	// writes v2's.
	w2, err := registry.Avro[user2](c, "users", userV2)
	require.NoError(t, err)
	b2, err := w2.Encode(nil, user2{Name: "di", Age: 9, Email: "d@x"})
	require.NoError(t, err)
	id2 := int(binary.BigEndian.Uint32(b2[1:5]))
	require.NotEqual(t, id, id2)
	old, err := registry.Avro[user1](c, "users", userV1, registry.UseVersion(1), registry.AutoRegister(false))
	require.NoError(t, err)
	b1, err := old.Encode(nil, user1{Name: "ed", Age: 1})
	require.NoError(t, err)
	require.Equal(t, id, int(binary.BigEndian.Uint32(b1[1:5])))
	latest, err := registry.Avro[user2](c, "users", userV2, registry.UseLatest())
	require.NoError(t, err)
	bl, err := latest.Encode(nil, user2{Name: "fy", Age: 2, Email: "f@x"})
	require.NoError(t, err)
	require.Equal(t, id2, int(binary.BigEndian.Uint32(bl[1:5])))
	// v2's values read as v1: the added field is skipped.
	v1, err := w1.Decode(bl)
	require.NoError(t, err)
	require.Equal(t, user1{Name: "fy", Age: 2}, v1)
}

// TestBadRecords: what cannot be read says why, naming the subject and
// the id: an unknown id, a bad magic byte, a short payload, an empty one,
// and a value of another schema type.
func TestBadRecords(t *testing.T) {
	c := mock(t)
	s, err := registry.Avro[user1](c, "users", userV1)
	require.NoError(t, err)
	_, err = s.Decode([]byte{0, 0, 0, 0x30, 0x39, 2, 'x', 0})
	require.ErrorContains(t, err, "subject users-value: schema id 12345")
	_, err = s.Decode([]byte{7, 1, 2, 3, 4, 5})
	require.ErrorIs(t, err, registry.ErrFormat)
	require.ErrorContains(t, err, "magic byte 0x07")
	_, err = s.Decode([]byte{0, 1})
	require.ErrorIs(t, err, registry.ErrFormat)
	_, err = s.Decode(nil)
	require.ErrorIs(t, err, registry.ErrFormat)

	j, err := registry.JSON[map[string]any](c, "events", `{"title":"Event","type":"object"}`)
	require.NoError(t, err)
	jb, err := j.Encode(nil, map[string]any{"a": 1.0})
	require.NoError(t, err)
	jv, err := j.Decode(jb)
	require.NoError(t, err)
	require.Equal(t, map[string]any{"a": 1.0}, jv)
	// The JSON schema's id read by an Avro serde of the same subject.
	a, err := registry.Avro[user1](c, "events", userV1)
	require.NoError(t, err)
	_, err = a.Decode(jb)
	require.ErrorContains(t, err, "is a JSON schema, not AVRO")
}

// TestNew: Java's property names, and refusals that name the setting.
func TestNew(t *testing.T) {
	_, err := registry.New(map[string]string{})
	require.ErrorContains(t, err, "schema.registry.url is not set")
	c, err := registry.New(map[string]string{"schema.registry.url": "http://127.0.0.1:1", "basic.auth.credentials.source": "USER_INFO", "basic.auth.user.info": "u:p"})
	require.NoError(t, err)
	require.NotNil(t, c)
	_, err = registry.New(map[string]string{"schema.registry.url": "http://x", "basic.auth.credentials.source": "USER_INFO"})
	require.ErrorContains(t, err, "basic.auth.user.info")
	_, err = registry.New(map[string]string{"schema.registry.url": "http://x", "schema.registry.ssl.truststore.type": "JKS"})
	require.ErrorContains(t, err, "schema.registry.ssl.truststore.type=JKS")
	_, err = registry.New(map[string]string{"schema.registry.url": "http://x", "schema.registry.ssl.cipher.suites": "x"})
	require.ErrorContains(t, err, "schema.registry.ssl.cipher.suites is not supported")
	// A Java serializer's setting is a serde's option here; anything else
	// unknown is refused too, not dropped.
	_, err = registry.New(map[string]string{"schema.registry.url": "http://x", "auto.register.schemas": "false"})
	require.ErrorContains(t, err, "auto.register.schemas is a serde's setting here, not the client's: registry.AutoRegister")
	_, err = registry.New(map[string]string{"schema.registry.url": "http://x", "schema.registry.urls": "http://y"})
	require.ErrorContains(t, err, "schema.registry.urls is not supported")
	// A store without a type is Java's JKS unless it is PEM.
	jks := filepath.Join(t.TempDir(), "trust.jks")
	require.NoError(t, os.WriteFile(jks, []byte{0xfe, 0xed, 0xfe, 0xed, 0, 0, 0, 2}, 0o600))
	_, err = registry.New(map[string]string{"schema.registry.url": "https://x", "schema.registry.ssl.truststore.location": jks})
	require.ErrorContains(t, err, "schema.registry.ssl.truststore.location="+jks+" is not a PEM file (Java's default store type is JKS")
	// Unreachable: the error names the registry and the subject.
	s, err := registry.Avro[user1](c, "users", userV1)
	require.NoError(t, err)
	_, err = s.Encode(nil, user1{})
	require.ErrorContains(t, err, "http://127.0.0.1:1")
	require.ErrorContains(t, err, "subject users-value")
}

// TestHeaderIDs: with HeaderIDs the schema's GUID goes into
// __value_schema_id (magic 1), the value is the bare Avro, and a reader
// takes the header; a reader given no header reads the prefix (Dual), and
// the bare value without its header is refused; a malformed header is
// refused, naming it; plain Encode still writes a prefix; the key's header
// is __key_schema_id.
func TestHeaderIDs(t *testing.T) {
	c := mock(t)
	s, err := registry.Avro[user1](c, "users", userV1, registry.HeaderIDs())
	require.NoError(t, err)
	hs := s.(serde.HeaderSerde[user1])
	b, headers, err := hs.EncodeHeaders(nil, user1{Name: "gus", Age: 5})
	require.NoError(t, err)
	require.Len(t, headers, 1)
	require.Equal(t, registry.ValueSchemaIDHeader, headers[0].Key)
	md, err := c.Registry().GetLatestSchemaMetadata("users-value")
	require.NoError(t, err)
	g, err := uuid.Parse(md.GUID)
	require.NoError(t, err)
	require.Equal(t, append([]byte{1}, g[:]...), headers[0].Value)
	plain, err := serde.Avro[user1](userV1)
	require.NoError(t, err)
	body, err := plain.Encode(nil, user1{Name: "gus", Age: 5})
	require.NoError(t, err)
	require.Equal(t, body, b, "the value is bare")

	r, err := registry.Avro[user1](c, "users", userV1)
	require.NoError(t, err)
	rh := r.(serde.HeaderSerde[user1])
	v, err := rh.DecodeHeaders(headers, b)
	require.NoError(t, err)
	require.Equal(t, user1{Name: "gus", Age: 5}, v)
	_, err = rh.DecodeHeaders(nil, b)
	require.ErrorIs(t, err, registry.ErrFormat, "a bare value without its header")
	_, err = rh.DecodeHeaders([]serde.Header{{Key: registry.ValueSchemaIDHeader, Value: []byte{9, 9}}}, b)
	require.ErrorContains(t, err, "header __value_schema_id (0909) names no schema")
	// An id in the header (magic 0) reads too.
	_, err = rh.DecodeHeaders([]serde.Header{{Key: registry.ValueSchemaIDHeader, Value: binary.BigEndian.AppendUint32([]byte{0}, uint32(md.ID))}}, b)
	require.NoError(t, err)
	// Without a header, the prefix.
	pb, err := s.Encode(nil, user1{Name: "hal", Age: 6})
	require.NoError(t, err)
	require.Equal(t, byte(1), pb[0], "plain Encode writes the GUID prefix")
	v, err = rh.DecodeHeaders(nil, pb)
	require.NoError(t, err)
	require.Equal(t, "hal", v.Name)

	k, err := registry.Avro[string](c, "users", `"string"`, registry.Key(), registry.HeaderIDs())
	require.NoError(t, err)
	_, kh, err := k.(serde.HeaderSerde[string]).EncodeHeaders(nil, "u1")
	require.NoError(t, err)
	require.Equal(t, registry.KeySchemaIDHeader, kh[0].Key)
}
