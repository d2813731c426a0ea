package serde_test

import (
	"errors"
	"math"
	"testing"

	"github.com/linkedin/goavro/v2"
	"github.com/stretchr/testify/require"

	"github.com/kordproject/kord/serde"
)

type event struct {
	User  string   `json:"user"`
	Count int64    `json:"count"`
	Tags  []string `json:"tags"`
}

const eventSchema = `{"type":"record","name":"Event","namespace":"kord.test","fields":[
	{"name":"user","type":"string"},
	{"name":"count","type":"long"},
	{"name":"tags","type":{"type":"array","items":"string"}}]}`

// The same schema in another layout, with a doc: the same canonical form.
const eventSchemaReformatted = `{"namespace":"kord.test","type":"record","name":"Event","doc":"an event",
	"fields":[{"name":"user","type":"string","doc":"who"},{"name":"count","type":"long"},
	{"name":"tags","type":{"items":"string","type":"array"}}]}`

// Another schema: a field added.
const eventSchemaV2 = `{"type":"record","name":"Event","namespace":"kord.test","fields":[
	{"name":"user","type":"string"},
	{"name":"count","type":"long"},
	{"name":"tags","type":{"type":"array","items":"string"}},
	{"name":"region","type":"string","default":""}]}`

// roundTrip encodes v after a prefix (Encode appends) and alone (a nil
// dst), and decodes both.
func roundTrip[T any](t *testing.T, s serde.Serde[T], v T) T {
	t.Helper()
	prefix := []byte("prefix")
	b, err := s.Encode(append([]byte(nil), prefix...), v)
	require.NoError(t, err)
	require.Equal(t, prefix, b[:len(prefix)], "Encode appends")
	alone, err := s.Encode(nil, v)
	require.NoError(t, err)
	require.Equal(t, b[len(prefix):], alone)
	got, err := s.Decode(b[len(prefix):])
	require.NoError(t, err)
	return got
}

func TestRoundTrip(t *testing.T) {
	require.Equal(t, []byte("x\x00y"), roundTrip(t, serde.Bytes(), []byte("x\x00y")))
	require.Equal(t, []byte{}, roundTrip(t, serde.Bytes(), []byte{}))
	require.Equal(t, "héllo", roundTrip(t, serde.String(), "héllo"))
	require.Equal(t, "", roundTrip(t, serde.String(), ""))
	for _, v := range []int64{0, 1, -1, math.MaxInt64, math.MinInt64} {
		require.Equal(t, v, roundTrip(t, serde.Int64(), v))
	}
	b, _ := serde.Int64().Encode(nil, 258)
	require.Equal(t, []byte{0, 0, 0, 0, 0, 0, 1, 2}, b, "big endian, as Kafka's LongSerializer")

	ev := event{User: "u1", Count: 42, Tags: []string{"a", "中文"}}
	require.Equal(t, ev, roundTrip(t, serde.JSON[event](), ev))
	b, err := serde.JSON[event]().Encode(nil, ev)
	require.NoError(t, err)
	require.JSONEq(t, `{"user":"u1","count":42,"tags":["a","中文"]}`, string(b))

	ac, err := serde.Avro[event](eventSchema)
	require.NoError(t, err)
	require.Equal(t, ev, roundTrip(t, ac, ev))

	an, err := serde.AvroNative(eventSchema)
	require.NoError(t, err)
	native := map[string]any{"user": "u1", "count": int64(42), "tags": []any{"a", "中文"}}
	require.Equal(t, native, roundTrip(t, an, any(native)))
	// The native and typed serdes write the same bytes, which goavro (the
	// reader here) reads back whole.
	b1, err := ac.Encode(nil, ev)
	require.NoError(t, err)
	b2, err := an.Encode(nil, native)
	require.NoError(t, err)
	require.Equal(t, b1, b2)
	require.Equal(t, ac.Fingerprint(), an.Fingerprint())
	codec, err := goavro.NewCodec(eventSchema)
	require.NoError(t, err)
	got, rest, err := codec.NativeFromBinary(b1)
	require.NoError(t, err)
	require.Empty(t, rest)
	require.Equal(t, native, got)
	type schemaed interface{ Schema() string }
	require.Equal(t, codec.CanonicalSchema(), ac.(schemaed).Schema())
	require.Equal(t, codec.CanonicalSchema(), an.(schemaed).Schema())
}

// TestNull: a nil slice is a null. Bytes keeps it both ways; every other
// serde writes a non-nil slice (the empty string is an empty key, not a
// null one) and refuses to decode a null rather than make a zero value.
func TestNull(t *testing.T) {
	b, err := serde.Bytes().Encode(nil, nil)
	require.NoError(t, err)
	require.Nil(t, b)
	b, err = serde.Bytes().Encode(nil, []byte{})
	require.NoError(t, err)
	require.NotNil(t, b, "an empty value is not a null")
	raw, err := serde.Bytes().Decode(nil)
	require.NoError(t, err)
	require.Nil(t, raw)

	b, err = serde.String().Encode(nil, "")
	require.NoError(t, err)
	require.NotNil(t, b, "the empty string is an empty key, not a null key")

	ac, err := serde.Avro[event](eventSchema)
	require.NoError(t, err)
	an, err := serde.AvroNative(eventSchema)
	require.NoError(t, err)
	for name, decode := range map[string]func([]byte) error{
		"string": func(b []byte) error { _, err := serde.String().Decode(b); return err },
		"int64":  func(b []byte) error { _, err := serde.Int64().Decode(b); return err },
		"json":   func(b []byte) error { _, err := serde.JSON[event]().Decode(b); return err },
		"avro":   func(b []byte) error { _, err := ac.Decode(b); return err },
		"native": func(b []byte) error { _, err := an.Decode(b); return err },
	} {
		err := decode(nil)
		require.True(t, errors.Is(err, serde.ErrNull), "%s: %v", name, err)
	}
	s, err := serde.String().Decode([]byte{})
	require.NoError(t, err, "an empty value is the empty string")
	require.Equal(t, "", s)
}

func TestBytesCopies(t *testing.T) {
	in := []byte("abc")
	out, err := serde.Bytes().Decode(in)
	require.NoError(t, err)
	enc, err := serde.Bytes().Encode(nil, in)
	require.NoError(t, err)
	in[0] = 'X'
	require.Equal(t, []byte("abc"), out)
	require.Equal(t, []byte("abc"), enc)
}

func TestFingerprints(t *testing.T) {
	a1, err := serde.Avro[event](eventSchema)
	require.NoError(t, err)
	a2, err := serde.Avro[event](eventSchemaReformatted)
	require.NoError(t, err)
	a3, err := serde.Avro[event](eventSchemaV2)
	require.NoError(t, err)
	require.Regexp(t, `^avro:[0-9a-f]{16}$`, a1.Fingerprint())
	require.Equal(t, a1.Fingerprint(), a2.Fingerprint(), "same canonical form")
	require.NotEqual(t, a1.Fingerprint(), a3.Fingerprint(), "another schema")

	type other struct{ A int }
	fps := []string{
		serde.Bytes().Fingerprint(), serde.String().Fingerprint(), serde.Int64().Fingerprint(),
		serde.JSON[event]().Fingerprint(), serde.JSON[other]().Fingerprint(), serde.JSON[[]event]().Fingerprint(),
		serde.JSON[map[string]int64]().Fingerprint(), serde.JSON[int64]().Fingerprint(), a1.Fingerprint(), a3.Fingerprint(),
	}
	seen := map[string]bool{}
	for _, fp := range fps {
		require.False(t, seen[fp], "duplicate fingerprint %q", fp)
		seen[fp] = true
	}
	require.Equal(t, "json:github.com/kordproject/kord/serde_test.event", serde.JSON[event]().Fingerprint())
	require.Equal(t, "json:[]github.com/kordproject/kord/serde_test.event", serde.JSON[[]event]().Fingerprint())
	require.Equal(t, "json:map[string]int64", serde.JSON[map[string]int64]().Fingerprint())

	_, err = serde.Avro[event](`{"type":"record"`)
	require.Error(t, err)
	_, err = serde.AvroNative(`nope`)
	require.Error(t, err)
}

func TestBadBytes(t *testing.T) {
	ac, err := serde.Avro[event](eventSchema)
	require.NoError(t, err)
	an, err := serde.AvroNative(eventSchema)
	require.NoError(t, err)
	good, err := ac.Encode(nil, event{User: "u", Count: 1, Tags: []string{"t"}})
	require.NoError(t, err)
	bad := [][]byte{nil, {0xff}, {0x80, 0x80}, append(good[:len(good):len(good)], 0), good[:len(good)-1], []byte("{}")}
	for _, b := range bad {
		_, err := ac.Decode(b)
		require.Error(t, err, "%x", b)
		_, err = an.Decode(b)
		require.Error(t, err, "%x", b)
	}
	_, err = ac.Decode(append(good[:len(good):len(good)], 0))
	require.ErrorContains(t, err, "1 bytes left")
	for _, b := range [][]byte{{1, 2, 3}, make([]byte, 9)} {
		_, err := serde.Int64().Decode(b)
		require.Error(t, err)
	}
	_, err = serde.JSON[event]().Decode([]byte(`{"user":1}`))
	require.Error(t, err)
	_, err = serde.JSON[event]().Decode([]byte(`{} x`))
	require.Error(t, err, "anything after the value")
	// A value the schema refuses is an error on encode, not a panic: a nil
	// slice is JSON null, which an Avro array is not.
	_, err = ac.Encode(nil, event{})
	require.Error(t, err)
	sc, _ := serde.Avro[int](`"string"`)
	_, err = sc.Encode(nil, 5)
	require.Error(t, err)
	_, err = serde.JSON[chan int]().Encode(nil, make(chan int))
	require.Error(t, err)
	_, err = an.Encode(nil, map[string]any{"user": "x"})
	require.Error(t, err, "a record missing fields")
}

// FuzzAvroDecode checks that the Avro serdes never panic on bad bytes. The
// schema has no arrays or maps: goavro preallocates an array or map block
// of up to goavro.MaxBlockCount (2^31-1) items from the block count alone,
// which on corrupt bytes is an allocation the fuzzer cannot afford.
func FuzzAvroDecode(f *testing.F) {
	const schema = `{"type":"record","name":"R","fields":[{"name":"s","type":"string"},{"name":"n","type":["null","long"]},{"name":"d","type":"double"}]}`
	type rec struct {
		S string         `json:"s"`
		N map[string]any `json:"n"`
		D float64        `json:"d"`
	}
	ac, err := serde.Avro[rec](schema)
	require.NoError(f, err)
	an, err := serde.AvroNative(schema)
	require.NoError(f, err)
	b, err := an.Encode(nil, map[string]any{"s": "x", "n": map[string]any{"long": int64(3)}, "d": 1.5})
	require.NoError(f, err)
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = ac.Decode(b)
		_, _ = an.Decode(b)
	})
}

// TestNullable: a null reads as a nil pointer and a nil pointer writes as
// a null; a value goes through the inner serde, an empty one stays a value.
func TestNullable(t *testing.T) {
	s := serde.Nullable(serde.String())
	v, err := s.Decode(nil)
	require.NoError(t, err)
	require.Nil(t, v)
	b, err := s.Encode(nil, nil)
	require.NoError(t, err)
	require.Nil(t, b, "a nil pointer is a null")
	x := "user-1"
	b, err = s.Encode(nil, &x)
	require.NoError(t, err)
	v, err = s.Decode(b)
	require.NoError(t, err)
	require.Equal(t, "user-1", *v)
	empty := ""
	b, err = s.Encode(nil, &empty)
	require.NoError(t, err)
	require.NotNil(t, b, "an empty value is no null")
	v, err = s.Decode(b)
	require.NoError(t, err)
	require.Equal(t, "", *v)
	_, err = serde.Nullable(serde.Int64()).Decode([]byte{0xff, 0xfe})
	require.Error(t, err, "the inner serde's refusal")
	require.Equal(t, "nullable("+serde.String().Fingerprint()+")", s.Fingerprint())
}
