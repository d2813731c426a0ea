package statefile

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kordproject/kord/checkpoint"
	"github.com/linkedin/goavro/v2"
)

// goavroEncodeKeyGroup writes a key-group file with goavro's OCF writer: the
// reference that EncodeKeyGroup's own framing is checked against. Records
// are reused across blocks: the writer encodes them before Append returns.
func goavroEncodeKeyGroup(entries []Entry, compression string) ([]byte, error) {
	var buf bytes.Buffer
	w, err := goavro.NewOCFWriter(goavro.OCFConfig{
		W:               &buf,
		Codec:           entryCodec,
		CompressionName: compression,
		MetaData: map[string][]byte{
			formatKey: []byte(keyGroupFormat),
			countKey:  strconv.AppendInt(nil, int64(len(entries)), 10),
		},
	})
	if err != nil {
		return nil, err
	}
	chunk := make([]any, min(len(entries), blockEntries))
	recs := make([]map[string]any, len(chunk))
	for i := range chunk {
		recs[i] = map[string]any{"key": nil, "value": nil}
		chunk[i] = recs[i]
	}
	for len(entries) > 0 {
		n := min(len(entries), len(chunk))
		for i, e := range entries[:n] {
			recs[i]["key"] = nonNil(e.Key)
			recs[i]["value"] = nonNil(e.Value)
		}
		if err := w.Append(chunk[:n]); err != nil {
			return nil, err
		}
		entries = entries[n:]
	}
	return buf.Bytes(), nil
}

var writers = []struct {
	name   string
	encode func([]Entry) ([]byte, error)
}{
	{"kord", EncodeKeyGroup},
	{"goavro-null", func(es []Entry) ([]byte, error) { return goavroEncodeKeyGroup(es, goavro.CompressionNullLabel) }},
	{"goavro-deflate", func(es []Entry) ([]byte, error) { return goavroEncodeKeyGroup(es, goavro.CompressionDeflateLabel) }},
}

func testEntries(n int) []Entry {
	es := make([]Entry, n)
	for i := range es {
		es[i] = Entry{Key: fmt.Appendf(nil, "%08x-0000-4000-8000-%012x", i, i*7919), Value: fmt.Appendf(nil, "%08d", i)}
	}
	return es
}

// normalize turns nil keys and values into empty ones, as decoding does.
func normalize(es []Entry) []Entry {
	out := make([]Entry, len(es))
	for i, e := range es {
		out[i] = Entry{Key: nonNil(e.Key), Value: nonNil(e.Value)}
	}
	return out
}

// readWithGoavro reads a key-group file with goavro's OCF reader.
func readWithGoavro(t testing.TB, b []byte) []Entry {
	t.Helper()
	r, err := goavro.NewOCFReader(bytes.NewReader(b))
	require.NoError(t, err)
	var es []Entry
	for r.Scan() {
		d, err := r.Read()
		require.NoError(t, err)
		rec := d.(map[string]any)
		es = append(es, Entry{Key: rec["key"].([]byte), Value: rec["value"].([]byte)})
	}
	require.NoError(t, r.Err())
	return es
}

func TestKeyGroupRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name    string
		entries []Entry
	}{
		{"empty", nil},
		{"one", []Entry{{Key: []byte("k"), Value: []byte("v")}}},
		{"empty key and nil value", []Entry{{Key: []byte{}, Value: nil}, {Key: nil, Value: []byte{0}}}},
		{"several blocks", testEntries(3*blockEntries + 17)},
		{"large value", []Entry{{Key: []byte("big"), Value: bytes.Repeat([]byte("x"), 1<<20)}}},
	} {
		for _, w := range writers {
			t.Run(tc.name+"/"+w.name, func(t *testing.T) {
				b, err := w.encode(tc.entries)
				require.NoError(t, err)
				got, err := DecodeKeyGroup("f", b)
				require.NoError(t, err)
				want := normalize(tc.entries)
				if len(want) == 0 {
					require.Empty(t, got)
				} else {
					require.Equal(t, want, got)
				}
				// Any Avro reader reads it: goavro's OCF reader agrees.
				if len(want) > 0 {
					require.Equal(t, want, readWithGoavro(t, b))
				}
				// Decoded entries do not alias the input.
				if len(got) > 0 && len(got[0].Key) > 0 {
					for i := range b {
						b[i] = 0
					}
					require.Equal(t, want[0], got[0])
				}
			})
		}
	}
	b, err := EncodeKeyGroup(testEntries(3))
	require.NoError(t, err)
	r, err := goavro.NewOCFReader(bytes.NewReader(b))
	require.NoError(t, err)
	require.Equal(t, goavro.CompressionNullLabel, r.CompressionName())
	require.Equal(t, keyGroupFormat, string(r.MetaData()[formatKey]))
}

// TestDecodeKeyGroupForeign decodes a file written by goavro alone, with the
// header kord expects: any conforming Avro writer can produce state files.
func TestDecodeKeyGroupForeign(t *testing.T) {
	var buf bytes.Buffer
	w, err := goavro.NewOCFWriter(goavro.OCFConfig{
		W: &buf, Schema: `{"type":"record","name":"Entry","namespace":"kord.state","fields":[{"name":"key","type":"bytes","doc":"k"},{"name":"value","type":"bytes"}]}`,
		CompressionName: goavro.CompressionDeflateLabel,
		MetaData:        map[string][]byte{formatKey: []byte(keyGroupFormat), countKey: []byte("3")},
	})
	require.NoError(t, err)
	for i := range 3 {
		require.NoError(t, w.Append([]any{map[string]any{"key": []byte{byte(i)}, "value": []byte("v")}}))
	}
	got, err := DecodeKeyGroup("f", buf.Bytes())
	require.NoError(t, err)
	require.Equal(t, []Entry{{[]byte{0}, []byte("v")}, {[]byte{1}, []byte("v")}, {[]byte{2}, []byte("v")}}, got)
}

func TestDecodeKeyGroupErrors(t *testing.T) {
	const path = "/ckpt/ckpt-a-00000000000000000001.op-count-kg-00003.avro"
	small := make([]Entry, blockEntries+5) // two blocks
	for i := range small {
		small[i] = Entry{Key: []byte{byte(i)}, Value: []byte{byte(i >> 8)}}
	}
	valid, err := EncodeKeyGroup(small)
	require.NoError(t, err)

	t.Run("every truncation", func(t *testing.T) {
		for i := range len(valid) {
			_, err := DecodeKeyGroup(path, valid[:i])
			var ce *checkpoint.CorruptError
			require.ErrorAs(t, err, &ce, "prefix %d", i)
			require.Equal(t, path, ce.Path)
			require.ErrorContains(t, err, path)
		}
	})
	t.Run("header bit flips never panic", func(t *testing.T) {
		for i := range 400 {
			b := bytes.Clone(valid)
			b[i] ^= 1 << (i % 8)
			DecodeKeyGroup(path, b)
		}
	})
	other := func(meta map[string][]byte, schema string) []byte {
		var buf bytes.Buffer
		_, err := goavro.NewOCFWriter(goavro.OCFConfig{W: &buf, Schema: schema, MetaData: meta})
		require.NoError(t, err)
		return buf.Bytes()
	}
	for _, tc := range []struct {
		name string
		b    []byte
		want string
	}{
		{"not avro", []byte("hello"), "not an Avro object container file"},
		{"no kord format", other(nil, entrySchema), "kord.format"},
		{"future format", other(map[string][]byte{formatKey: []byte("keygroup-2"), countKey: []byte("0")}, entrySchema), "keygroup-2"},
		{"other schema", other(map[string][]byte{formatKey: []byte(keyGroupFormat), countKey: []byte("0")}, `"string"`), "avro.schema"},
		{"no count", other(map[string][]byte{formatKey: []byte(keyGroupFormat)}, entrySchema), countKey},
		{"count too large", other(map[string][]byte{formatKey: []byte(keyGroupFormat), countKey: []byte("1")}, entrySchema), "truncated"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeKeyGroup(path, tc.b)
			var ce *checkpoint.CorruptError
			require.ErrorAs(t, err, &ce)
			require.ErrorContains(t, err, tc.want)
			require.ErrorContains(t, err, path)
		})
	}
	_, err = DecodeKeyGroup(path, other(map[string][]byte{formatKey: []byte("keygroup-2")}, entrySchema))
	require.True(t, errors.Is(err, checkpoint.ErrUnsupportedVersion))
}

func FuzzDecodeKeyGroup(f *testing.F) {
	for _, es := range [][]Entry{nil, testEntries(1), testEntries(5), {{Key: []byte{}, Value: []byte{}}}} {
		for _, w := range writers {
			b, err := w.encode(es)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		es, err := DecodeKeyGroup("f", b)
		if err != nil {
			var ce *checkpoint.CorruptError
			if !errors.As(err, &ce) || ce.Path != "f" {
				t.Fatalf("error %v is not a *checkpoint.CorruptError naming the file", err)
			}
			return
		}
		// Accepted input: goavro reads the same entries (our decoder bounds
		// every length, so goavro's unbounded allocations are safe here).
		if len(es) > 0 {
			if got := readWithGoavro(t, b); !equalEntries(got, es) {
				t.Fatalf("goavro read %d entries, we read %d", len(got), len(es))
			}
		}
		// Re-encoding round-trips.
		enc, err := EncodeKeyGroup(es)
		if err != nil {
			t.Fatal(err)
		}
		es2, err := DecodeKeyGroup("f", enc)
		if err != nil || !equalEntries(es, es2) {
			t.Fatalf("round trip: %v", err)
		}
		// A strict prefix of a valid encoding is an error.
		for _, i := range []int{0, 4, len(enc) / 2, len(enc) - 17, len(enc) - 1} {
			if i >= 0 && i < len(enc) {
				if _, err := DecodeKeyGroup("f", enc[:i]); err == nil {
					t.Fatalf("prefix of %d bytes decoded", i)
				}
			}
		}
	})
}

func equalEntries(a, b []Entry) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !bytes.Equal(a[i].Key, b[i].Key) || !bytes.Equal(a[i].Value, b[i].Value) {
			return false
		}
	}
	return true
}

// benchEntries returns n entries with 36-byte uuid-text keys and 8-byte
// values, the shape of the main use case.
func benchEntries(n, seed int) []Entry {
	es := make([]Entry, n)
	for i := range es {
		x := uint64(seed)<<32 | uint64(i)
		x *= 0x9e3779b97f4a7c15
		key := fmt.Appendf(make([]byte, 0, 36), "%08x-%04x-4%03x-8%03x-%012x", uint32(x>>32), uint16(x>>16), x&0xfff, (x>>12)&0xfff, x*31&0xffffffffffff)
		es[i] = Entry{Key: key, Value: binary.BigEndian.AppendUint64(make([]byte, 0, 8), x)}
	}
	return es
}

const benchPerGroup = 83334 // 12 key groups, 1M keys

func BenchmarkEncodeKeyGroup(b *testing.B) {
	es := benchEntries(benchPerGroup, 0)
	for _, w := range writers {
		b.Run(w.name, func(b *testing.B) {
			var size int
			for b.Loop() {
				data, err := w.encode(es)
				if err != nil {
					b.Fatal(err)
				}
				size = len(data)
			}
			b.SetBytes(int64(size))
			b.ReportMetric(float64(size), "file-bytes")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/benchPerGroup, "ns/entry")
		})
	}
}

func BenchmarkDecodeKeyGroup(b *testing.B) {
	es := benchEntries(benchPerGroup, 0)
	for _, w := range writers {
		if w.name == "goavro-null" {
			continue // the same bytes as kord's
		}
		b.Run(w.name, func(b *testing.B) {
			data, err := w.encode(es)
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				if _, err := DecodeKeyGroup("f", data); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/benchPerGroup, "ns/entry")
		})
	}
}
