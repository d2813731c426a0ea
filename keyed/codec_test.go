package keyed

import (
	"encoding/binary"
	"math"
	"testing"

	"github.com/stretchr/testify/require"
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

func roundTrip[V any](t *testing.T, c Codec[V], v V) V {
	t.Helper()
	prefix := []byte("prefix")
	b, err := c.Encode(append([]byte(nil), prefix...), v)
	require.NoError(t, err)
	require.Equal(t, prefix, b[:len(prefix)], "Encode appends")
	got, err := c.Decode(b[len(prefix):])
	require.NoError(t, err)
	return got
}

func TestCodecRoundTrip(t *testing.T) {
	require.Equal(t, []byte("x\x00y"), roundTrip(t, Bytes(), []byte("x\x00y")))
	require.Equal(t, []byte{}, roundTrip(t, Bytes(), nil))
	require.Equal(t, "héllo", roundTrip(t, String(), "héllo"))
	for _, v := range []int64{0, 1, -1, math.MaxInt64, math.MinInt64} {
		require.Equal(t, v, roundTrip(t, Int64(), v))
	}
	b, _ := Int64().Encode(nil, 258)
	require.Equal(t, []byte{0, 0, 0, 0, 0, 0, 1, 2}, b, "big endian")

	ev := event{User: "u1", Count: 42, Tags: []string{"a", "b"}}
	require.Equal(t, ev, roundTrip(t, JSON[event](), ev))

	ac, err := Avro[event](eventSchema)
	require.NoError(t, err)
	require.Equal(t, ev, roundTrip(t, ac, ev))

	an, err := AvroNative(eventSchema)
	require.NoError(t, err)
	native := map[string]any{"user": "u1", "count": int64(42), "tags": []any{"a", "b"}}
	require.Equal(t, native, roundTrip(t, an, any(native)))
	// The native and typed codecs write the same bytes.
	b1, err := ac.Encode(nil, ev)
	require.NoError(t, err)
	b2, err := an.Encode(nil, native)
	require.NoError(t, err)
	require.Equal(t, b1, b2)
	require.Equal(t, ac.Fingerprint(), an.Fingerprint())
}

func TestBytesDecodeCopies(t *testing.T) {
	in := []byte("abc")
	out, err := Bytes().Decode(in)
	require.NoError(t, err)
	in[0] = 'X'
	require.Equal(t, []byte("abc"), out)
}

func TestCodecFingerprints(t *testing.T) {
	a1, err := Avro[event](eventSchema)
	require.NoError(t, err)
	a2, err := Avro[event](eventSchemaReformatted)
	require.NoError(t, err)
	a3, err := Avro[event](eventSchemaV2)
	require.NoError(t, err)
	require.Regexp(t, `^avro:[0-9a-f]{16}$`, a1.Fingerprint())
	require.Equal(t, a1.Fingerprint(), a2.Fingerprint(), "same canonical form")
	require.NotEqual(t, a1.Fingerprint(), a3.Fingerprint(), "another schema")

	type other struct{ A int }
	fps := []string{
		Bytes().Fingerprint(), String().Fingerprint(), Int64().Fingerprint(),
		JSON[event]().Fingerprint(), JSON[other]().Fingerprint(), JSON[[]event]().Fingerprint(),
		JSON[map[string]int64]().Fingerprint(), JSON[int64]().Fingerprint(), a1.Fingerprint(), a3.Fingerprint(),
	}
	seen := map[string]bool{}
	for _, fp := range fps {
		require.False(t, seen[fp], "duplicate fingerprint %q", fp)
		seen[fp] = true
	}
	require.Equal(t, "json:github.com/kordproject/kord/keyed.event", JSON[event]().Fingerprint())
	require.Equal(t, "json:[]github.com/kordproject/kord/keyed.event", JSON[[]event]().Fingerprint())
	require.Equal(t, "json:map[string]int64", JSON[map[string]int64]().Fingerprint())

	_, err = Avro[event](`{"type":"record"`)
	require.Error(t, err)
	_, err = AvroNative(`nope`)
	require.Error(t, err)
}

func TestCodecBadBytes(t *testing.T) {
	ac, err := Avro[event](eventSchema)
	require.NoError(t, err)
	an, err := AvroNative(eventSchema)
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
	for _, b := range [][]byte{nil, {1, 2, 3}, make([]byte, 9)} {
		_, err := Int64().Decode(b)
		require.Error(t, err)
	}
	_, err = JSON[event]().Decode([]byte(`{"user":1}`))
	require.Error(t, err)
	_, err = JSON[event]().Decode([]byte(`{} x`))
	require.Error(t, err)
	// A value the schema refuses is an error on encode, not a panic: a nil
	// slice is JSON null, which an Avro array is not.
	_, err = ac.Encode(nil, event{})
	require.Error(t, err)
	sc, _ := Avro[int](`"string"`)
	_, err = sc.Encode(nil, 5)
	require.Error(t, err)
}

func TestListMapEncoding(t *testing.T) {
	b, _, err := appendList(nil, nil, String(), []string{"a", "", "bc"})
	require.NoError(t, err)
	require.Equal(t, []byte{0x01, 3, 1, 'a', 0, 2, 'b', 'c'}, b, "documented layout")
	l, err := decodeList(b, String())
	require.NoError(t, err)
	require.Equal(t, []string{"a", "", "bc"}, l)

	b, _, err = appendMap(nil, nil, String(), Int64(), map[string]int64{"k": 7})
	require.NoError(t, err)
	require.Equal(t, []byte{0x01, 1, 1, 'k', 8, 0, 0, 0, 0, 0, 0, 0, 7}, b, "documented layout")
	m, err := decodeMap(b, String(), Int64())
	require.NoError(t, err)
	require.Equal(t, map[string]int64{"k": 7}, m)

	big := map[string]int64{}
	for i := range 1000 {
		big[string(binary.AppendUvarint(nil, uint64(i)))] = int64(i)
	}
	b, _, err = appendMap(nil, nil, String(), Int64(), big)
	require.NoError(t, err)
	m, err = decodeMap(b, String(), Int64())
	require.NoError(t, err)
	require.Equal(t, big, m)

	for _, bad := range [][]byte{
		nil, {0x02, 1, 0}, {0x01}, {0x01, 0}, {0x01, 2, 0}, {0x01, 1, 5, 'a'}, {0x01, 1, 0, 0},
		{0x01, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01},
	} {
		_, err := decodeList(bad, String())
		require.Error(t, err, "list %x", bad)
	}
	for _, bad := range [][]byte{
		nil, {0x01, 1, 1, 'k'}, {0x01, 1, 1, 'k', 1, 0}, // value not 8 bytes
		{0x01, 2, 1, 'k', 8, 0, 0, 0, 0, 0, 0, 0, 1, 1, 'k', 8, 0, 0, 0, 0, 0, 0, 0, 2}, // duplicate key
	} {
		_, err := decodeMap(bad, String(), Int64())
		require.Error(t, err, "map %x", bad)
	}
}

// FuzzDecodeList checks that the list decoder never panics, and that what
// it accepts re-encodes to the same bytes.
func FuzzDecodeList(f *testing.F) {
	for _, l := range [][]string{{"a"}, {"", "x", "yz"}} {
		b, _, _ := appendList(nil, nil, String(), l)
		f.Add(b)
	}
	f.Add([]byte{0x01, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Add([]byte("\x01\x05\x00\x80\x00\x010\x00\x010")) // overlong varint, found by the fuzzer
	f.Fuzz(func(t *testing.T, b []byte) {
		l, err := decodeList(b, String())
		if err != nil {
			return
		}
		out, _, err := appendList(nil, nil, String(), l)
		require.NoError(t, err)
		require.Equal(t, b, out)
		// Int64 elements too: fixed-size items.
		_, _ = decodeList(b, Int64())
	})
}

// FuzzDecodeMap checks that the map decoder never panics, and that what it
// accepts decodes again to the same map after re-encoding.
func FuzzDecodeMap(f *testing.F) {
	b, _, _ := appendMap(nil, nil, String(), Int64(), map[string]int64{"a": 1, "b": -2})
	f.Add(b)
	f.Add([]byte{0x01, 1, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeMap(b, String(), Int64())
		if err == nil {
			out, _, err := appendMap(nil, nil, String(), Int64(), m)
			require.NoError(t, err)
			again, err := decodeMap(out, String(), Int64())
			require.NoError(t, err)
			require.Equal(t, m, again)
		}
		_, _ = decodeMap(b, String(), Bytes())
	})
}

// FuzzAvroDecode checks that the Avro codecs never panic on bad bytes. The
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
	ac, err := Avro[rec](schema)
	require.NoError(f, err)
	an, err := AvroNative(schema)
	require.NoError(f, err)
	b, err := an.Encode(nil, map[string]any{"s": "x", "n": map[string]any{"long": int64(3)}, "d": 1.5})
	require.NoError(f, err)
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = ac.Decode(b)
		_, _ = an.Decode(b)
	})
}
