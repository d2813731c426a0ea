package statefile

import (
	"bytes"
	"compress/flate"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"

	"github.com/kordproject/kord/checkpoint"
	"github.com/linkedin/goavro/v2"
)

// Keyed-state files. One file holds the entries of one operator's key group
// as an Avro Object Container File (OCF, Avro 1.x specification) whose
// records have the schema entrySchema, so any Avro tool can read a snapshot.
// The header metadata carries "kord.format" = keyGroupFormat, the version of
// this layout, and "kord.entries", the number of entries, since an OCF cut
// at a block boundary is otherwise still a valid OCF. Integrity is checked by the CRC32C in the checkpoint metadata;
// the OCF framing (block counts, sizes, sync markers) is checked again on
// decode.

// Entry is one key and its value in a key group.
type Entry struct {
	Key, Value []byte
}

const (
	entrySchema    = `{"type":"record","name":"Entry","namespace":"kord.state","fields":[{"name":"key","type":"bytes"},{"name":"value","type":"bytes"}]}`
	formatKey      = "kord.format"
	keyGroupFormat = "keygroup-1"
	countKey       = "kord.entries" // decimal number of entries, so truncation at a block boundary is detected

	blockEntries = 4096 // records per OCF block

	maxBlockBytes = 1 << 30 // bound on one decoded block
)

var ocfMagic = []byte("Obj\x01")

var entryCodec = func() *goavro.Codec {
	c, err := goavro.NewCodec(entrySchema)
	if err != nil {
		panic("statefile: entry schema: " + err.Error())
	}
	return c
}()

// EncodeKeyGroup encodes entries, in order, as a key-group state file: an
// uncompressed Avro OCF with blocks of up to 4096 records. The framing and
// the record encoding are written here rather than through goavro's
// OCFWriter, which costs about a microsecond per entry (a map and two
// interface conversions per record); the tests check that goavro reads these
// files back identically and that DecodeKeyGroup reads goavro's.
func EncodeKeyGroup(entries []Entry) ([]byte, error) {
	size := 256 + len(entrySchema)
	for _, e := range entries {
		size += len(e.Key) + len(e.Value) + 2*binary.MaxVarintLen64
	}
	size += (len(entries)/blockEntries + 1) * (2*binary.MaxVarintLen64 + 16)
	b := make([]byte, 0, size)
	b = append(b, ocfMagic...)
	b = appendLong(b, 4) // header metadata: one block of four entries
	b = appendString(b, "avro.schema", entrySchema)
	b = appendString(b, "avro.codec", goavro.CompressionNullLabel)
	b = appendString(b, formatKey, keyGroupFormat)
	b = appendString(b, countKey, strconv.Itoa(len(entries)))
	b = appendLong(b, 0)
	var sync [16]byte
	rand.Read(sync[:]) // never fails
	b = append(b, sync[:]...)
	for len(entries) > 0 {
		n := min(len(entries), blockEntries)
		blockSize := 0
		for _, e := range entries[:n] {
			blockSize += longLen(len(e.Key)) + len(e.Key) + longLen(len(e.Value)) + len(e.Value)
		}
		b = appendLong(b, int64(n))
		b = appendLong(b, int64(blockSize))
		for _, e := range entries[:n] {
			b = appendLong(b, int64(len(e.Key)))
			b = append(b, e.Key...)
			b = appendLong(b, int64(len(e.Value)))
			b = append(b, e.Value...)
		}
		b = append(b, sync[:]...)
		entries = entries[n:]
	}
	return b, nil
}

// appendLong appends an Avro long: a zig-zag varint.
func appendLong(b []byte, v int64) []byte {
	return binary.AppendUvarint(b, uint64(v<<1)^uint64(v>>63))
}

func longLen(n int) int {
	v := uint64(n) << 1 // n >= 0
	l := 1
	for ; v >= 0x80; v >>= 7 {
		l++
	}
	return l
}

func appendString(b []byte, k, v string) []byte {
	b = appendLong(b, int64(len(k)))
	b = append(b, k...)
	b = appendLong(b, int64(len(v)))
	return append(b, v...)
}

func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// DecodeKeyGroup decodes a key-group state file read from name (used in
// errors). Any malformed input is a *checkpoint.CorruptError; it never panics, and it
// bounds every allocation by the input's size (a deflate block by 1 GiB).
// The returned entries share memory with each other but not with b.
func DecodeKeyGroup(name string, b []byte) ([]Entry, error) {
	d := ocfDecoder{b: b}
	entries, err := d.decode()
	if err != nil {
		return nil, &checkpoint.CorruptError{Path: name, Reason: fmt.Sprintf("state file at byte %d: %v", d.off, err), Err: err}
	}
	return entries, nil
}

type ocfDecoder struct {
	b   []byte
	off int
}

var errShort = errors.New("unexpected end of file")

// long reads an Avro long (zig-zag varint).
func (d *ocfDecoder) long() (int64, error) {
	var v uint64
	for shift := uint(0); shift < 64; shift += 7 {
		if d.off >= len(d.b) {
			return 0, errShort
		}
		c := d.b[d.off]
		d.off++
		v |= uint64(c&0x7f) << shift
		if c < 0x80 {
			return int64(v>>1) ^ -int64(v&1), nil
		}
	}
	return 0, errors.New("varint longer than 10 bytes")
}

func (d *ocfDecoder) bytes() ([]byte, error) {
	n, err := d.long()
	if err != nil {
		return nil, err
	}
	if n < 0 || n > int64(len(d.b)-d.off) {
		return nil, fmt.Errorf("byte string of length %d with %d bytes left", n, len(d.b)-d.off)
	}
	v := d.b[d.off : d.off+int(n)]
	d.off += int(n)
	return v, nil
}

// ocfHeader reads an OCF header: its metadata, its codec (null or deflate)
// and its sync marker.
func (d *ocfDecoder) ocfHeader() (meta map[string][]byte, compression string, sync []byte, err error) {
	if !bytes.HasPrefix(d.b, ocfMagic) {
		return nil, "", nil, fmt.Errorf("not an Avro object container file (magic %q)", d.b[:min(len(d.b), 4)])
	}
	d.off = len(ocfMagic)
	meta = map[string][]byte{}
	for {
		count, err := d.long()
		if err != nil {
			return nil, "", nil, fmt.Errorf("header metadata: %w", err)
		}
		if count == 0 {
			break
		}
		if count < 0 { // a negative count is followed by the block's size
			count = -count
			if _, err := d.long(); err != nil {
				return nil, "", nil, fmt.Errorf("header metadata: %w", err)
			}
		}
		if count < 0 || count > int64(len(d.b)-d.off)/2 {
			return nil, "", nil, fmt.Errorf("header metadata: %d entries with %d bytes left", count, len(d.b)-d.off)
		}
		for range count {
			k, err := d.bytes()
			if err != nil {
				return nil, "", nil, fmt.Errorf("header metadata key: %w", err)
			}
			v, err := d.bytes()
			if err != nil {
				return nil, "", nil, fmt.Errorf("header metadata value: %w", err)
			}
			if _, dup := meta[string(k)]; dup {
				return nil, "", nil, fmt.Errorf("header metadata: duplicate key %q", k)
			}
			meta[string(k)] = v
		}
	}
	compression = goavro.CompressionNullLabel
	if c, ok := meta["avro.codec"]; ok {
		compression = string(c)
	}
	if compression != goavro.CompressionNullLabel && compression != goavro.CompressionDeflateLabel {
		return nil, "", nil, fmt.Errorf("unsupported avro.codec %q", compression)
	}
	if len(d.b)-d.off < 16 {
		return nil, "", nil, fmt.Errorf("header sync marker: %w", errShort)
	}
	sync = d.b[d.off : d.off+16]
	d.off += 16
	return meta, compression, sync, nil
}

// checkFormat checks the header's kord.format against want and its schema
// against the schema of want's records (canonical form).
func checkFormat(meta map[string][]byte, want string, schema *goavro.Codec) error {
	if f := string(meta[formatKey]); f != want {
		if f == "" {
			return fmt.Errorf("header metadata has no %s: not a kord state file", formatKey)
		}
		return fmt.Errorf("%w: state file format %q, this reader reads %q", checkpoint.ErrUnsupportedVersion, f, want)
	}
	return checkSchema(string(meta["avro.schema"]), schema)
}

// entryCount reads the header's kord.entries.
func entryCount(meta map[string][]byte) (int64, error) {
	count, err := strconv.ParseInt(string(meta[countKey]), 10, 64)
	if err != nil || count < 0 {
		return 0, fmt.Errorf("header metadata %s = %q: want a count of entries", countKey, meta[countKey])
	}
	return count, nil
}

// header reads a key-group file's header.
func (d *ocfDecoder) header() (compression string, sync []byte, count int64, err error) {
	meta, compression, sync, err := d.ocfHeader()
	if err != nil {
		return "", nil, 0, err
	}
	if err := checkFormat(meta, keyGroupFormat, entryCodec); err != nil {
		return "", nil, 0, err
	}
	if count, err = entryCount(meta); err != nil {
		return "", nil, 0, err
	}
	return compression, sync, count, nil
}

// block reads the OCF block at d.off: its record count and its decoded
// bytes, which never alias d.b. minRecord is the least number of bytes a
// record takes, to bound count by the block's size.
func (d *ocfDecoder) block(compression string, sync []byte, minRecord int) (int64, []byte, error) {
	count, err := d.long()
	if err != nil {
		return 0, nil, fmt.Errorf("block count: %w", err)
	}
	size, err := d.long()
	if err != nil {
		return 0, nil, fmt.Errorf("block size: %w", err)
	}
	if count <= 0 || size <= 0 || size > int64(len(d.b)-d.off) {
		return 0, nil, fmt.Errorf("block of %d records and %d bytes with %d bytes left", count, size, len(d.b)-d.off)
	}
	raw := d.b[d.off : d.off+int(size)]
	d.off += int(size)
	if len(d.b)-d.off < 16 {
		return 0, nil, fmt.Errorf("block sync marker: %w", errShort)
	}
	if !bytes.Equal(d.b[d.off:d.off+16], sync) {
		return 0, nil, errors.New("block sync marker mismatch")
	}
	d.off += 16
	var block []byte
	if compression == goavro.CompressionDeflateLabel {
		r := flate.NewReader(bytes.NewReader(raw))
		block, err = io.ReadAll(io.LimitReader(r, maxBlockBytes+1))
		if err != nil {
			return 0, nil, fmt.Errorf("inflate block: %w", err)
		}
		if len(block) > maxBlockBytes {
			return 0, nil, fmt.Errorf("inflated block larger than %d bytes", maxBlockBytes)
		}
	} else {
		block = bytes.Clone(raw) // entries must not alias the caller's b
	}
	if count > int64(len(block)/minRecord) {
		return 0, nil, fmt.Errorf("block of %d records in %d bytes", count, len(block))
	}
	return count, block, nil
}

func checkSchema(schema string, want *goavro.Codec) error {
	if schema == want.Schema() { // the common case: a file kord wrote
		return nil
	}
	if schema == "" {
		return errors.New("header metadata has no avro.schema")
	}
	c, err := goavro.NewCodec(schema)
	if err != nil {
		return fmt.Errorf("invalid avro.schema: %w", err)
	}
	if c.CanonicalSchema() != want.CanonicalSchema() {
		return fmt.Errorf("avro.schema %s, want %s", c.CanonicalSchema(), want.CanonicalSchema())
	}
	return nil
}

func (d *ocfDecoder) decode() ([]Entry, error) {
	compression, sync, total, err := d.header()
	if err != nil {
		return nil, err
	}
	// Capacity for every entry of an uncompressed file (each takes two bytes
	// or more), without trusting the header's count further than the input.
	entries := make([]Entry, 0, min(total, int64(len(d.b)-d.off)/2))
	for d.off < len(d.b) {
		// Every record takes at least two bytes (two empty byte strings).
		count, block, err := d.block(compression, sync, 2)
		if err != nil {
			return nil, err
		}
		if count > total-int64(len(entries)) {
			return nil, fmt.Errorf("more records than the %d in the header", total)
		}
		entries = slices.Grow(entries, int(count))[:len(entries)+int(count)]
		bd := ocfDecoder{b: block}
		es := entries[len(entries)-int(count):]
		for i := range es {
			if es[i].Key, err = bd.bytes(); err != nil {
				return nil, fmt.Errorf("record key: %w", err)
			}
			if es[i].Value, err = bd.bytes(); err != nil {
				return nil, fmt.Errorf("record value: %w", err)
			}
		}
		if bd.off != len(block) {
			return nil, fmt.Errorf("%d bytes after the last record of a block", len(block)-bd.off)
		}
	}
	if int64(len(entries)) != total {
		return nil, fmt.Errorf("truncated: %d records, header says %d", len(entries), total)
	}
	return entries, nil
}
