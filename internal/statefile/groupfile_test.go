package statefile

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kordproject/kord/checkpoint"
	"github.com/kordproject/kord/internal/layout"
	"github.com/linkedin/goavro/v2"
)

// testGroups returns key groups and their entries: groups of 0, 1, a block
// and a block plus one entries, and an empty key and value.
func testGroups() ([]int, [][]Entry) {
	kgs := []int{0, 3, 4, 17, 127, layout.MaxKeyGroups - 1}
	es := [][]Entry{testEntries(5), nil, testEntries(blockEntries), testEntries(blockEntries + 1), {{Key: []byte{}, Value: []byte{}}}, testEntries(1)}
	for i := range es {
		for j := range es[i] { // distinct keys per group
			es[i][j].Key = fmt.Appendf(nil, "%d/%s", kgs[i], es[i][j].Key)
		}
	}
	return kgs, es
}

func encodeGroups(t testing.TB, kgs []int, es [][]Entry, parallel int) []byte {
	t.Helper()
	b, err := EncodeKeyGroups(kgs, parallel, func(_, i int) ([]Entry, error) { return es[i], nil })
	require.NoError(t, err)
	return b
}

// goavroEncodeKeyGroups writes a key-group range file with goavro's OCF
// writer, one Append per block, with the index computed here: the reference
// for EncodeKeyGroups' framing.
func goavroEncodeKeyGroups(t testing.TB, kgs []int, es [][]Entry, compression string) []byte {
	t.Helper()
	// First pass with a placeholder index to learn each group's block
	// sizes: write each group alone and measure its body.
	var index []byte
	groups, total := 0, 0
	var bodies [][]byte
	for i, kg := range kgs {
		if len(es[i]) == 0 {
			continue
		}
		var buf bytes.Buffer
		w, err := goavro.NewOCFWriter(goavro.OCFConfig{W: &buf, Codec: groupEntryCodec, CompressionName: compression})
		require.NoError(t, err)
		head := buf.Len()
		for rest := es[i]; len(rest) > 0; {
			n := min(len(rest), blockEntries)
			recs := make([]any, n)
			for j, e := range rest[:n] {
				recs[j] = map[string]any{"keyGroup": int32(kg), "key": nonNil(e.Key), "value": nonNil(e.Value)}
			}
			require.NoError(t, w.Append(recs))
			rest = rest[n:]
		}
		bodies = append(bodies, buf.Bytes()[head:])
		groups++
		total += len(es[i])
		index = appendLong(index, int64(kg))
		index = appendLong(index, int64(len(es[i])))
		index = appendLong(index, int64(buf.Len()-head))
	}
	index = append(appendLong(nil, int64(groups)), index...)
	// Each writer chose its own sync marker; rewrite them all to the final
	// file's. goavro's writer exposes none, so write the header with goavro
	// and take its marker.
	var buf bytes.Buffer
	_, err := goavro.NewOCFWriter(goavro.OCFConfig{W: &buf, Codec: groupEntryCodec, CompressionName: compression, MetaData: map[string][]byte{
		formatKey: []byte(keyGroupsFormat), countKey: strconv.AppendInt(nil, int64(total), 10), indexKey: index,
	}})
	require.NoError(t, err)
	out := buf.Bytes()
	sync := out[len(out)-16:]
	for _, body := range bodies {
		d := ocfDecoder{b: body}
		for d.off < len(body) {
			_, _, err := d.block(compression, body[len(body)-16:], 3)
			require.NoError(t, err)
			copy(body[d.off-16:d.off], sync)
		}
		out = append(out, body...)
	}
	return out
}

func TestKeyGroupsRoundTrip(t *testing.T) {
	kgs, es := testGroups()
	files := map[string][]byte{
		"kord-serial":    encodeGroups(t, kgs, es, 1),
		"kord-parallel":  encodeGroups(t, kgs, es, 4),
		"goavro-null":    goavroEncodeKeyGroups(t, kgs, es, goavro.CompressionNullLabel),
		"goavro-deflate": goavroEncodeKeyGroups(t, kgs, es, goavro.CompressionDeflateLabel),
	}
	var wantKGs []int
	var want [][]Entry
	var flat []Entry
	for i, kg := range kgs {
		if len(es[i]) > 0 {
			wantKGs = append(wantKGs, kg)
			want = append(want, normalize(es[i]))
			flat = append(flat, normalize(es[i])...)
		}
	}
	for name, b := range files {
		t.Run(name, func(t *testing.T) {
			gotKGs, got, err := DecodeKeyGroups(name, b)
			require.NoError(t, err)
			require.Equal(t, wantKGs, gotKGs)
			require.Equal(t, want, got)
			// Any Avro reader reads the entries, key groups included.
			r, err := goavro.NewOCFReader(bytes.NewReader(b))
			require.NoError(t, err)
			var all []Entry
			for r.Scan() {
				d, err := r.Read()
				require.NoError(t, err)
				rec := d.(map[string]any)
				k, v := rec["key"].([]byte), rec["value"].([]byte)
				require.Equal(t, int32(wantKGs[groupOf(t, want, len(all))]), rec["keyGroup"])
				all = append(all, Entry{Key: k, Value: v})
			}
			require.NoError(t, r.Err())
			require.Equal(t, flat, all)
		})
	}
	// Serial and parallel encodings differ only in the random sync marker.
	f1, err := OpenKeyGroups("a", files["kord-serial"])
	require.NoError(t, err)
	f2, err := OpenKeyGroups("b", files["kord-parallel"])
	require.NoError(t, err)
	require.Equal(t, len(files["kord-serial"]), len(files["kord-parallel"]))
	require.Equal(t, f1.groups, f2.groups)
}

// groupOf returns which group the n-th entry of the concatenation falls in.
func groupOf(t testing.TB, groups [][]Entry, n int) int {
	for i, g := range groups {
		if n < len(g) {
			return i
		}
		n -= len(g)
	}
	t.Fatalf("entry %d beyond the last group", n)
	return -1
}

func TestEncodeKeyGroupsRefusals(t *testing.T) {
	none := func(int, int) ([]Entry, error) { return nil, nil }
	for _, kgs := range [][]int{{3, 3}, {4, 2}, {-1}, {layout.MaxKeyGroups}} {
		_, err := EncodeKeyGroups(kgs, 1, none)
		require.Error(t, err, "%v", kgs)
	}
	boom := errors.New("boom")
	for _, p := range []int{1, 3} {
		_, err := EncodeKeyGroups([]int{1, 2, 3}, p, func(_, i int) ([]Entry, error) {
			if i == 1 {
				return nil, boom
			}
			return testEntries(2), nil
		})
		require.ErrorIs(t, err, boom, "parallel %d", p)
	}
	// No key groups: a valid empty file.
	b, err := EncodeKeyGroups(nil, 0, none)
	require.NoError(t, err)
	kgs, es, err := DecodeKeyGroups("f", b)
	require.NoError(t, err)
	require.Empty(t, kgs)
	require.Empty(t, es)
}

func TestKeyGroupsErrors(t *testing.T) {
	const path = "/ckpt/ckpt-a-00000000000000000001.op-count.n-kg-00000.avro"
	kgs := []int{2, 5}
	es := [][]Entry{make([]Entry, blockEntries+3), testEntries(7)} // two blocks, then one
	for i := range es[0] {
		es[0][i] = Entry{Key: []byte{byte(i), byte(i >> 8)}, Value: []byte{byte(i)}}
	}
	valid := encodeGroups(t, kgs, es, 1)
	requireCorrupt := func(t *testing.T, b []byte, want string) {
		t.Helper()
		_, _, err := DecodeKeyGroups(path, b)
		var ce *checkpoint.CorruptError
		require.ErrorAs(t, err, &ce)
		require.Equal(t, path, ce.Path)
		require.ErrorContains(t, err, path)
		require.ErrorContains(t, err, want)
	}
	t.Run("every truncation", func(t *testing.T) {
		for i := range len(valid) {
			requireCorrupt(t, valid[:i], "")
		}
	})
	t.Run("trailing bytes", func(t *testing.T) {
		requireCorrupt(t, append(bytes.Clone(valid), 0), "after the last key group")
	})
	t.Run("bit flips never panic", func(t *testing.T) {
		// The header, the index and the first records; the last block.
		for i := range len(valid) {
			if i >= 600 && i < len(valid)-300 {
				continue
			}
			b := bytes.Clone(valid)
			b[i] ^= 1 << (i % 8)
			DecodeKeyGroups(path, b)
		}
	})
	t.Run("record of another key group", func(t *testing.T) {
		// Same sizes, key group 5's records claim key group 6: only the
		// per-record check can see it.
		bad := encodeGroups(t, kgs, es, 1)
		f, err := OpenKeyGroups(path, bad)
		require.NoError(t, err)
		g := f.groups[1]
		d := ocfDecoder{b: bad, off: g.off}
		_, _ = d.long()
		_, _ = d.long()
		require.Equal(t, byte(10), bad[d.off]) // zig-zag 5
		bad[d.off] = 12
		requireCorrupt(t, bad, "record of key group 6 among key group 5's")
	})
	// Files with valid's blocks under another header.
	f, err := OpenKeyGroups(path, valid)
	require.NoError(t, err)
	body, sync := valid[f.groups[0].off:], f.sync
	s0, s1 := int64(f.groups[0].end-f.groups[0].off), int64(f.groups[1].end-f.groups[1].off)
	withHeader := func(schema, count string, index ...int64) []byte {
		b := append([]byte(nil), ocfMagic...)
		n := 3
		if index != nil {
			n++
		}
		b = appendLong(b, int64(n))
		b = appendString(b, "avro.schema", schema)
		b = appendString(b, formatKey, keyGroupsFormat)
		b = appendString(b, countKey, count)
		if index != nil {
			var ib []byte
			for _, v := range index {
				ib = appendLong(ib, v)
			}
			b = appendString(b, indexKey, string(ib))
		}
		b = appendLong(b, 0)
		b = append(b, sync...)
		return append(b, body...)
	}
	_, _, err = DecodeKeyGroups(path, withHeader(groupEntrySchema, "4106", 2, 2, 4099, s0, 5, 7, s1))
	require.NoError(t, err, "the rebuilt header is valid")
	keyGroupFile, err := EncodeKeyGroup(testEntries(2))
	require.NoError(t, err)
	for _, tc := range []struct {
		name string
		b    []byte
		want string
	}{
		{"key-group file", keyGroupFile, `format "keygroup-1"`},
		{"no index", withHeader(groupEntrySchema, "4106"), "has no " + indexKey},
		{"other schema", withHeader(entrySchema, "4106", 2, 2, 4099, s0, 5, 7, s1), "avro.schema"},
		{"index count too large", withHeader(groupEntrySchema, "4106", 50), "number of key groups"},
		{"index descending", withHeader(groupEntrySchema, "4106", 2, 5, 4099, s0, 2, 7, s1), "key group 2 after 5"},
		{"index entries above header", withHeader(groupEntrySchema, "4106", 2, 2, 4200, s0, 5, 7, s1), "has 4200 entries"},
		{"index past the end", withHeader(groupEntrySchema, "4106", 1, 2, 4106, s0+s1+100), "bytes of blocks"},
		{"index sum below header", withHeader(groupEntrySchema, "4200", 2, 2, 4099, s0, 5, 7, s1), "lists 4106 entries, the header 4200"},
		{"index trailing", withHeader(groupEntrySchema, "4106", 2, 2, 4099, s0, 5, 7, s1, 9), "after the last entry"},
		{"key group out of range", withHeader(groupEntrySchema, "4106", 1, layout.MaxKeyGroups, 4106, s0+s1), "out of range"},
		{"index shorter than blocks", withHeader(groupEntrySchema, "4099", 1, 2, 4099, s0), "after the last key group's blocks"},
		{"group count below its records", withHeader(groupEntrySchema, "4106", 2, 2, 4098, s0, 5, 8, s1), "more records than the 4098 in the index"},
		{"group count above its records", withHeader(groupEntrySchema, "4106", 2, 2, 4100, s0, 5, 6, s1), "4099 records, the index says 4100"},
	} {
		t.Run(tc.name, func(t *testing.T) { requireCorrupt(t, tc.b, tc.want) })
	}
	var hb bytes.Buffer
	_, err = goavro.NewOCFWriter(goavro.OCFConfig{W: &hb, Schema: groupEntrySchema, MetaData: map[string][]byte{formatKey: []byte("keygroups-2")}})
	require.NoError(t, err)
	_, _, err = DecodeKeyGroups(path, hb.Bytes())
	require.ErrorIs(t, err, checkpoint.ErrUnsupportedVersion)
}

func FuzzDecodeKeyGroups(f *testing.F) {
	kgs, es := testGroups()
	f.Add(encodeGroups(f, kgs[:3], es[:3], 1))
	f.Add(encodeGroups(f, []int{7}, [][]Entry{testEntries(3)}, 1))
	f.Add(encodeGroups(f, nil, nil, 1))
	f.Add(goavroEncodeKeyGroups(f, []int{1, 9}, [][]Entry{testEntries(2), testEntries(1)}, goavro.CompressionDeflateLabel))
	f.Fuzz(func(t *testing.T, b []byte) {
		kgs, es, err := DecodeKeyGroups("f", b)
		if err != nil {
			var ce *checkpoint.CorruptError
			if !errors.As(err, &ce) || ce.Path != "f" {
				t.Fatalf("error %v is not a *checkpoint.CorruptError naming the file", err)
			}
			return
		}
		// Accepted input re-encodes to a file that decodes the same.
		enc, err := EncodeKeyGroups(kgs, 2, func(_, i int) ([]Entry, error) { return es[i], nil })
		if err != nil {
			t.Fatal(err)
		}
		kgs2, es2, err := DecodeKeyGroups("f", enc)
		if err != nil || len(kgs2) != len(kgs) {
			t.Fatalf("round trip: %v", err)
		}
		for i := range es {
			if kgs2[i] != kgs[i] || !equalEntries(es[i], es2[i]) {
				t.Fatalf("round trip: key group %d differs", kgs[i])
			}
		}
	})
}

func BenchmarkEncodeKeyGroups(b *testing.B) {
	// 50,000 entries over 64 key groups: one task's share of the pipeline
	// benchmark's state.
	kgs := make([]int, 64)
	es := make([][]Entry, 64)
	for i := range kgs {
		kgs[i] = i
		es[i] = benchEntries(50_000/64, i)
	}
	var size int
	for b.Loop() {
		out, err := EncodeKeyGroups(kgs, 1, func(_, i int) ([]Entry, error) { return es[i], nil })
		if err != nil {
			b.Fatal(err)
		}
		size = len(out)
	}
	b.ReportMetric(float64(size), "bytes/file")
}

func TestKeyGroupEncoderReuse(t *testing.T) {
	kgs, es := testGroups()
	var e KeyGroupEncoder
	for _, p := range []int{1, 3} {
		for _, n := range []int{len(kgs), 1, len(kgs), 2} {
			b, err := e.Encode(kgs[:n], p, func(_, i int) ([]Entry, error) { return es[i], nil })
			require.NoError(t, err)
			gotKGs, got, err := DecodeKeyGroups("f", b)
			require.NoError(t, err)
			var wantKGs []int
			var want [][]Entry
			for i := range n {
				if len(es[i]) > 0 {
					wantKGs = append(wantKGs, kgs[i])
					want = append(want, normalize(es[i]))
				}
			}
			require.Equal(t, wantKGs, gotKGs, "parallel %d, %d key groups", p, n)
			require.Equal(t, want, got, "parallel %d, %d key groups", p, n)
		}
	}
}
