package filesink

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"io"
	"sync"

	"github.com/golang/snappy"
	"github.com/klauspost/compress/zstd"

	"github.com/kordproject/kord/serde"
)

// avroBlockBytes is about how many bytes of encoded rows an Avro block
// holds before it is compressed and written (Avro's Java writer syncs
// every 64,000 bytes by default).
const avroBlockBytes = 64 << 10

// Avro writes an Avro object container file (the Avro specification's
// "Object Container Files"): a header holding schema (as given, compacted)
// and the codec, then blocks of rows, each row in the Avro binary encoding
// under schema as serde.Avro[T] encodes it (so T is goavro's native form,
// or a Go type whose encoding/json form is the row's Avro JSON form; see
// serde.Avro). The file's extension is ".avro".
//
// The codec is "null" for Uncompressed, "snappy" for Snappy (each block
// Snappy-compressed and followed by the CRC-32 of its uncompressed bytes,
// big endian) and "zstandard" for Zstd, as the specification names them.
// Rows are gathered into blocks of about 64 KiB; Close writes the last.
//
// Avro is Bulk: a file ends at every checkpoint. Its blocks could be
// written out at a checkpoint, but continuing the file after a restore
// would take its header's sync marker, which a new writer on an io.Writer
// cannot read back. (The container is written here, not by goavro's
// OCFWriter: that one knows no zstandard codec, and writes a block for
// every Append.)
//
// Avro fails for a schema that does not parse, or an unknown Compression.
func Avro[T any](schema string, c Compression) (Format[T], error) {
	codec, ok := avroCodecs[c]
	if !ok {
		return nil, fmt.Errorf("filesink: avro: unknown compression %v", c)
	}
	enc, err := serde.Avro[T](schema)
	if err != nil {
		return nil, fmt.Errorf("filesink: avro: %w", err)
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, []byte(schema)); err != nil {
		return nil, fmt.Errorf("filesink: avro: schema: %w", err)
	}
	return avroFormat[T]{c: c, codec: codec, enc: enc, schema: compact.Bytes(), blockBytes: avroBlockBytes}, nil
}

// avroCodecs are the codecs' names in a container file's avro.codec.
var avroCodecs = map[Compression]string{Uncompressed: "null", Snappy: "snappy", Zstd: "zstandard"}

type avroFormat[T any] struct {
	c      Compression
	codec  string
	enc    serde.Serde[T]
	schema []byte
	// blockBytes is avroBlockBytes; less in tests.
	blockBytes int
}

func (avroFormat[T]) Ext() string { return ".avro" }
func (avroFormat[T]) Bulk() bool  { return true }

func (f avroFormat[T]) name() string { return "avro (" + f.codec + ")" }

// NewWriter writes the container file's header: the magic bytes, the
// metadata (avro.schema, avro.codec) and a new random sync marker.
func (f avroFormat[T]) NewWriter(w io.Writer) (RowWriter[T], error) {
	aw := &avroWriter[T]{f: f, cw: &countingWriter{w: w}}
	if _, err := rand.Read(aw.sync[:]); err != nil {
		return nil, fmt.Errorf("filesink: %s: sync marker: %w", f.name(), err)
	}
	h := []byte("Obj\x01")
	// The metadata, an Avro map of bytes: one block of two entries, then
	// the empty block that ends the map.
	h = binary.AppendVarint(h, 2)
	for _, kv := range [][2][]byte{{[]byte("avro.schema"), f.schema}, {[]byte("avro.codec"), []byte(f.codec)}} {
		h = appendAvroBytes(h, kv[0])
		h = appendAvroBytes(h, kv[1])
	}
	h = binary.AppendVarint(h, 0)
	h = append(h, aw.sync[:]...)
	if _, err := aw.cw.Write(h); err != nil {
		return nil, fmt.Errorf("filesink: %s: header: %w", f.name(), err)
	}
	return aw, nil
}

// appendAvroBytes appends b as Avro's bytes (or string): its length, a
// long, then b. Avro's long is Go's varint: zig-zag, then base 128, low
// group first.
func appendAvroBytes(dst, b []byte) []byte {
	return append(binary.AppendVarint(dst, int64(len(b))), b...)
}

type avroWriter[T any] struct {
	f      avroFormat[T]
	cw     *countingWriter
	sync   [16]byte
	block  []byte // the rows of the block being gathered, encoded
	rows   int64  // how many
	out    []byte // the block as written
	raw    int64  // the bytes of the blocks written, uncompressed
	packed int64  // and compressed
	closed bool
}

func (a *avroWriter[T]) Write(v T) error {
	if a.closed {
		return fmt.Errorf("filesink: %s: write: %w", a.f.name(), errClosed)
	}
	b, err := a.f.enc.Encode(a.block, v)
	if err != nil {
		return fmt.Errorf("filesink: %s: encode %T: %w", a.f.name(), v, err)
	}
	a.block = b
	a.rows++
	if len(a.block) >= a.f.blockBytes {
		return a.writeBlock()
	}
	return nil
}

// writeBlock writes the gathered rows as a block: their count and size in
// bytes (longs), the rows compressed by the codec, the sync marker.
func (a *avroWriter[T]) writeBlock() error {
	if a.rows == 0 {
		return nil
	}
	var data []byte
	switch a.f.c {
	case Uncompressed:
		data = a.block
	case Snappy:
		data = snappy.Encode(nil, a.block)
		data = binary.BigEndian.AppendUint32(data, crc32.ChecksumIEEE(a.block))
	case Zstd:
		data = zstdBlocks().EncodeAll(a.block, nil)
	}
	out := binary.AppendVarint(a.out[:0], a.rows)
	out = binary.AppendVarint(out, int64(len(data)))
	out = append(out, data...)
	out = append(out, a.sync[:]...)
	a.out = out
	a.raw += int64(len(a.block))
	a.packed += int64(len(data))
	a.block, a.rows = a.block[:0], 0
	if _, err := a.cw.Write(out); err != nil {
		return fmt.Errorf("filesink: %s: write block: %w", a.f.name(), err)
	}
	return nil
}

// Size is the bytes written to w and the gathered rows, compressed as
// well as the blocks written so far were.
func (a *avroWriter[T]) Size() int64 {
	pending := int64(len(a.block))
	if a.raw > 0 {
		pending = pending * a.packed / a.raw
	}
	return a.cw.n + pending
}

func (a *avroWriter[T]) Close() error {
	if a.closed {
		return fmt.Errorf("filesink: %s: close: %w", a.f.name(), errClosed)
	}
	a.closed = true
	return a.writeBlock()
}

// zstdBlocks compresses whole Avro blocks, each a Zstandard frame;
// EncodeAll is safe for concurrent use.
var zstdBlocks = sync.OnceValue(func() *zstd.Encoder {
	e, err := zstd.NewWriter(nil)
	if err != nil {
		panic(err) // only for invalid options
	}
	return e
})
