package filesink

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/golang/snappy"
	"github.com/klauspost/compress/zstd"
	"github.com/linkedin/goavro/v2"
	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/format"

	"github.com/kordproject/kord/serde"
)

// The rows the tests write: every column type the three formats share,
// and a nested record. The time is text in Avro (serde.Avro goes through
// encoding/json, which writes a time.Time as RFC 3339), a timestamp in
// microseconds in Parquet, text in JSON.
type place struct {
	City string `json:"city" parquet:"city"`
	Zip  int64  `json:"zip" parquet:"zip"`
}

type event struct {
	Name  string    `json:"name" parquet:"name"`
	Count int64     `json:"count" parquet:"count"`
	Score float64   `json:"score" parquet:"score"`
	OK    bool      `json:"ok" parquet:"ok"`
	At    time.Time `json:"at" parquet:"at,timestamp(microsecond)"`
	Where place     `json:"where" parquet:"where"`
}

const eventSchema = `{
  "type": "record", "name": "Event", "namespace": "kord.test",
  "fields": [
    {"name": "name", "type": "string"},
    {"name": "count", "type": "long"},
    {"name": "score", "type": "double"},
    {"name": "ok", "type": "boolean"},
    {"name": "at", "type": "string"},
    {"name": "where", "type": {"type": "record", "name": "Place", "fields": [
      {"name": "city", "type": "string"},
      {"name": "zip", "type": "long"}]}}
  ]
}`

// events returns n rows cycling through awkward values: empty and
// escaped strings, int64's ends, tiny and huge floats, times before 1970.
func events(n int) []event {
	names := []string{"", "plain", `quote " and \ backslash`, "line\nbreak\ttab", "ünïcødé ✓ 日本", "emoji 🦆", "'single'", "comma, semicolon;"}
	counts := []int64{math.MinInt64, math.MaxInt64, 0, -1, 1<<53 + 1}
	scores := []float64{0.1, -1e300, math.Pi, 5e-324, 1, -2.5, 1e21}
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 123456000, time.UTC)
	out := make([]event, n)
	for i := range out {
		at := t0.Add(time.Duration(i)*time.Hour + time.Duration(i)*time.Microsecond)
		if i%3 == 2 {
			at = time.Date(1969, 12, 31, 23, 59, 59, 999999000, time.UTC).Add(-time.Duration(i) * time.Minute)
		}
		out[i] = event{
			Name:  fmt.Sprintf("%s#%d", names[i%len(names)], i),
			Count: counts[i%len(counts)] + int64(i%2)*(1-2*int64(i%len(counts)%2)), // stays in range
			Score: scores[i%len(scores)],
			OK:    i%2 == 0,
			At:    at,
			Where: place{City: names[(i+3)%len(names)], Zip: int64(i) * 1000003},
		}
	}
	return out
}

// testFormat is a format under test and how to read its files back in
// process, with the libraries that wrote them or the specification.
type testFormat struct {
	name string
	f    Format[event]
	c    Compression
	read func(t *testing.T, b []byte) []event
}

func mustAvro(t *testing.T, c Compression) Format[event] {
	t.Helper()
	f, err := Avro[event](eventSchema, c)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func testFormats(t *testing.T) []testFormat {
	var fs []testFormat
	for _, c := range []Compression{Uncompressed, Snappy, Zstd} {
		fs = append(fs,
			testFormat{"jsonl-" + c.String(), JSONLines[event](c), c, func(t *testing.T, b []byte) []event { return readJSONLines(t, c, b) }},
			testFormat{"avro-" + c.String(), mustAvro(t, c), c, func(t *testing.T, b []byte) []event { return readAvro(t, c, b) }},
			testFormat{"parquet-" + c.String(), Parquet[event](c), c, func(t *testing.T, b []byte) []event { return readParquet(t, c, b) }},
		)
	}
	return fs
}

// write writes rows into a new file of f and closes it.
func write[T any](t *testing.T, f Format[T], rows []T) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := f.NewWriter(&buf)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if err := w.Write(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func equalEvents(t *testing.T, got, want []event) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d rows read back, want %d", len(got), len(want))
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.At.Equal(w.At) {
			g.At = w.At
		}
		if g != w {
			t.Fatalf("row %d:\n got %+v\nwant %+v", i, got[i], want[i])
		}
	}
}

func TestRoundTrip(t *testing.T) {
	for _, n := range []int{0, 1, 5000} {
		for _, tf := range testFormats(t) {
			t.Run(fmt.Sprintf("%s/%d", tf.name, n), func(t *testing.T) {
				want := events(n)
				equalEvents(t, tf.read(t, write(t, tf.f, want)), want)
			})
		}
	}
}

// TestSmallBlocks writes Avro blocks and Parquet row groups of a few KiB,
// so that a file has many.
func TestSmallBlocks(t *testing.T) {
	for _, c := range []Compression{Uncompressed, Snappy, Zstd} {
		want := events(3000)
		a := mustAvro(t, c).(avroFormat[event])
		a.blockBytes = 4 << 10
		b := write[event](t, a, want)
		if n := len(avroBlocks(t, b).blocks); n < 10 {
			t.Errorf("avro %v: %d blocks, want many", c, n)
		}
		equalEvents(t, readAvro(t, c, b), want)

		p := Parquet[event](c).(parquetFormat[event])
		p.rowGroupBytes = 16 << 10
		b = write[event](t, p, want)
		f, err := parquet.OpenFile(bytes.NewReader(b), int64(len(b)))
		if err != nil {
			t.Fatal(err)
		}
		if n := len(f.RowGroups()); n < 5 {
			t.Errorf("parquet %v: %d row groups, want many", c, n)
		}
		// After the first row group, Size estimates the buffered rows
		// compressed.
		var buf bytes.Buffer
		w, err := p.NewWriter(&buf)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range want {
			if err := w.Write(e); err != nil {
				t.Fatal(err)
			}
		}
		size := w.Size()
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		if n := int64(buf.Len()); size < n*2/3 || size > n*3/2 {
			t.Errorf("parquet %v: Size before Close %d, file %d bytes", c, size, n)
		}
		equalEvents(t, readParquet(t, c, b), want)
	}
}

func TestExt(t *testing.T) {
	want := map[string]string{
		"jsonl-uncompressed": ".jsonl", "jsonl-snappy": ".jsonl.sz", "jsonl-zstd": ".jsonl.zst",
		"avro-uncompressed": ".avro", "avro-snappy": ".avro", "avro-zstd": ".avro",
		"parquet-uncompressed": ".parquet", "parquet-snappy": ".parquet", "parquet-zstd": ".parquet",
	}
	for _, tf := range testFormats(t) {
		if got := tf.f.Ext(); got != want[tf.name] {
			t.Errorf("%s: Ext() = %q, want %q", tf.name, got, want[tf.name])
		}
		if got, want := tf.f.Bulk(), !strings.HasPrefix(tf.name, "jsonl"); got != want {
			t.Errorf("%s: Bulk() = %v, want %v", tf.name, got, want)
		}
	}
}

// TestAfterClose: Write and Close after Close are errors naming the
// format, not panics, and write nothing more.
func TestAfterClose(t *testing.T) {
	for _, tf := range testFormats(t) {
		t.Run(tf.name, func(t *testing.T) {
			var buf bytes.Buffer
			w, err := tf.f.NewWriter(&buf)
			if err != nil {
				t.Fatal(err)
			}
			if err := w.Write(events(1)[0]); err != nil {
				t.Fatal(err)
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			n := buf.Len()
			prefix := "filesink: " + strings.Split(tf.name, "-")[0]
			for what, err := range map[string]error{"write": w.Write(events(1)[0]), "close": w.Close()} {
				if !errors.Is(err, errClosed) || !strings.HasPrefix(err.Error(), prefix) {
					t.Errorf("%s after close: %v, want %q... and errClosed", what, err, prefix)
				}
			}
			if buf.Len() != n {
				t.Errorf("%d bytes written after close", buf.Len()-n)
			}
		})
	}
}

func TestSize(t *testing.T) {
	for _, tf := range testFormats(t) {
		t.Run(tf.name, func(t *testing.T) {
			var buf bytes.Buffer
			w, err := tf.f.NewWriter(&buf)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range events(20000) {
				if err := w.Write(e); err != nil {
					t.Fatal(err)
				}
			}
			last := w.Size()
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			// At most 256 KiB behind the file (what a compressor may
			// hold), and at most twice it (buffered rows count
			// uncompressed), or four times for a compressed Parquet file
			// of one row group (see parquetWriter.Size).
			n := int64(buf.Len())
			t.Logf("Size before Close %d, file %d bytes", last, n)
			over := int64(2)
			if strings.HasPrefix(tf.name, "parquet") && tf.c != Uncompressed {
				over = 4
			}
			if n-last > 256<<10 || last > over*n+64<<10 {
				t.Errorf("Size before Close %d, file %d bytes", last, n)
			}
		})
	}
}

func TestUnknownCompression(t *testing.T) {
	if _, err := Avro[event](eventSchema, 7); err == nil || !strings.Contains(err.Error(), "avro: unknown compression Compression(7)") {
		t.Errorf("Avro: %v", err)
	}
	for _, f := range []Format[event]{JSONLines[event](7), Parquet[event](7)} {
		if _, err := f.NewWriter(io.Discard); err == nil || !strings.Contains(err.Error(), "unknown compression Compression(7)") {
			t.Errorf("%T: %v", f, err)
		}
	}
}

func TestBadInput(t *testing.T) {
	if _, err := Avro[event](`{"type": "record", "name": "x"`, Zstd); err == nil || !strings.HasPrefix(err.Error(), "filesink: avro: ") {
		t.Errorf("a schema that does not parse: %v", err)
	}
	// A row the schema does not fit.
	f, err := Avro[map[string]any](eventSchema, Uncompressed)
	if err != nil {
		t.Fatal(err)
	}
	w, err := f.NewWriter(io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(map[string]any{"name": 1}); err == nil || !strings.HasPrefix(err.Error(), "filesink: avro (null): encode") {
		t.Errorf("a row the schema does not fit: %v", err)
	}
	// No struct: parquet-go has no schema for it, and panics.
	if _, err := Parquet[int](Snappy).NewWriter(io.Discard); err == nil || !strings.HasPrefix(err.Error(), "filesink: parquet (snappy): schema of int") {
		t.Errorf("Parquet[int]: %v", err)
	}
	// JSON has no form for a channel.
	jw, err := JSONLines[chan int](Zstd).NewWriter(io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if err := jw.Write(make(chan int)); err == nil || !strings.HasPrefix(err.Error(), "filesink: jsonl (zstd): encode chan int") {
		t.Errorf("a channel: %v", err)
	}
}

// errWriter fails every write.
type errWriter struct{}

func (errWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestWriteErrors(t *testing.T) {
	for _, tf := range testFormats(t) {
		t.Run(tf.name, func(t *testing.T) {
			w, err := tf.f.NewWriter(errWriter{})
			if err != nil {
				if !strings.Contains(err.Error(), "disk full") {
					t.Fatalf("NewWriter: %v", err)
				}
				return // the header failed
			}
			for _, e := range events(3) {
				if err = w.Write(e); err != nil {
					break
				}
			}
			if err == nil {
				err = w.Close()
			}
			if err == nil || !strings.Contains(err.Error(), "disk full") || !strings.HasPrefix(err.Error(), "filesink: ") {
				t.Errorf("writing on a full disk: %v", err)
			}
		})
	}
}

// ---- readers

func readJSONLines(t *testing.T, c Compression, b []byte) []event {
	t.Helper()
	var r io.Reader = bytes.NewReader(b)
	switch c {
	case Snappy:
		if len(b) > 0 && !bytes.HasPrefix(b, []byte("\xff\x06\x00\x00sNaPpY")) {
			t.Fatalf("no snappy stream identifier: % x", b[:min(10, len(b))])
		}
		r = snappy.NewReader(r)
	case Zstd:
		if !bytes.HasPrefix(b, []byte{0x28, 0xb5, 0x2f, 0xfd}) {
			t.Fatalf("no zstd magic: % x", b[:min(10, len(b))])
		}
		z, err := zstd.NewReader(r)
		if err != nil {
			t.Fatal(err)
		}
		defer z.Close()
		r = z
	}
	var rows []event
	s := bufio.NewScanner(r)
	s.Buffer(nil, 1<<20)
	for s.Scan() {
		var e event
		if err := json.Unmarshal(s.Bytes(), &e); err != nil {
			t.Fatalf("line %d: %v: %s", len(rows)+1, err, s.Bytes())
		}
		rows = append(rows, e)
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	return rows
}

// ocf is a container file's parts, read as the Avro specification lays
// them out.
type ocf struct {
	meta   map[string][]byte
	blocks []ocfBlock
}

type ocfBlock struct {
	count int64
	data  []byte // as in the file
}

func avroBlocks(t *testing.T, b []byte) ocf {
	t.Helper()
	if !bytes.HasPrefix(b, []byte("Obj\x01")) {
		t.Fatalf("no Avro magic: % x", b[:min(4, len(b))])
	}
	metaCodec, err := goavro.NewCodec(`{"type": "map", "values": "bytes"}`)
	if err != nil {
		t.Fatal(err)
	}
	native, rest, err := metaCodec.NativeFromBinary(b[4:])
	if err != nil {
		t.Fatalf("metadata: %v", err)
	}
	f := ocf{meta: map[string][]byte{}}
	for k, v := range native.(map[string]any) {
		f.meta[k] = v.([]byte)
	}
	if len(rest) < 16 {
		t.Fatal("no sync marker")
	}
	sync, rest := rest[:16], rest[16:]
	for len(rest) > 0 {
		count, n := binary.Varint(rest)
		if n <= 0 || count <= 0 {
			t.Fatalf("block %d: bad count", len(f.blocks))
		}
		rest = rest[n:]
		size, n := binary.Varint(rest)
		if n <= 0 || size < 0 || int64(len(rest)-n) < size+16 {
			t.Fatalf("block %d: bad size", len(f.blocks))
		}
		rest = rest[n:]
		f.blocks = append(f.blocks, ocfBlock{count: count, data: rest[:size]})
		if !bytes.Equal(rest[size:size+16], sync) {
			t.Fatalf("block %d: sync marker differs", len(f.blocks)-1)
		}
		rest = rest[size+16:]
	}
	return f
}

// readAvro reads a container file with a reader following the
// specification and, where goavro has the codec (not zstandard), with
// goavro's OCFReader too; both must agree.
func readAvro(t *testing.T, c Compression, b []byte) []event {
	t.Helper()
	f := avroBlocks(t, b)
	if got, want := string(f.meta["avro.codec"]), avroCodecs[c]; got != want {
		t.Fatalf("avro.codec %q, want %q", got, want)
	}
	s, err := serde.Avro[event](string(f.meta["avro.schema"]))
	if err != nil {
		t.Fatal(err)
	}
	codec, err := goavro.NewCodec(string(f.meta["avro.schema"]))
	if err != nil {
		t.Fatal(err)
	}
	var rows []event
	for i, blk := range f.blocks {
		data := blk.data
		switch c {
		case Snappy:
			if len(data) < 4 {
				t.Fatalf("block %d: no checksum", i)
			}
			d, err := snappy.Decode(nil, data[:len(data)-4])
			if err != nil {
				t.Fatalf("block %d: %v", i, err)
			}
			if crc32.ChecksumIEEE(d) != binary.BigEndian.Uint32(data[len(data)-4:]) {
				t.Fatalf("block %d: checksum differs", i)
			}
			data = d
		case Zstd:
			z, err := zstd.NewReader(nil)
			if err != nil {
				t.Fatal(err)
			}
			data, err = z.DecodeAll(data, nil)
			z.Close()
			if err != nil {
				t.Fatalf("block %d: %v", i, err)
			}
		}
		for j := int64(0); j < blk.count; j++ {
			_, rest, err := codec.NativeFromBinary(data)
			if err != nil {
				t.Fatalf("block %d row %d: %v", i, j, err)
			}
			e, err := s.Decode(data[:len(data)-len(rest)])
			if err != nil {
				t.Fatalf("block %d row %d: %v", i, j, err)
			}
			rows = append(rows, e)
			data = rest
		}
		if len(data) != 0 {
			t.Fatalf("block %d: %d bytes after its %d rows", i, len(data), blk.count)
		}
	}
	if c == Zstd {
		return rows
	}
	r, err := goavro.NewOCFReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	i := 0
	for r.Scan() {
		native, err := r.Read()
		if err != nil {
			t.Fatal(err)
		}
		bin, err := codec.BinaryFromNative(nil, native)
		if err != nil {
			t.Fatal(err)
		}
		e, err := s.Decode(bin)
		if err != nil {
			t.Fatal(err)
		}
		if i >= len(rows) || e != rows[i] {
			t.Fatalf("goavro's OCFReader reads row %d as %+v", i, e)
		}
		i++
	}
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	if i != len(rows) {
		t.Fatalf("goavro's OCFReader reads %d rows, the specification %d", i, len(rows))
	}
	return rows
}

func readParquet(t *testing.T, c Compression, b []byte) []event {
	t.Helper()
	f, err := parquet.OpenFile(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	want := map[Compression]format.CompressionCodec{Uncompressed: format.Uncompressed, Snappy: format.Snappy, Zstd: format.Zstd}[c]
	for i, rg := range f.Metadata().RowGroups {
		for _, col := range rg.Columns {
			if col.MetaData.Codec != want {
				t.Fatalf("row group %d, column %v: codec %v, want %v", i, col.MetaData.PathInSchema, col.MetaData.Codec, want)
			}
		}
	}
	rows, err := parquet.Read[event](bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	return rows
}
