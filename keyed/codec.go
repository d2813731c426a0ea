package keyed

import (
	"encoding/binary"
	"fmt"
	"reflect"
	"strconv"

	"github.com/linkedin/goavro/v2"

	"github.com/kordproject/kord/internal/jsonx"
)

// Codec turns state values of type V into bytes in snapshots and back.
//
// Encode appends v's encoding to dst and returns the extended slice. Decode
// decodes all of b, returns an error (never panics) for bytes that are not
// an encoding, and does not retain b. Fingerprint identifies the codec and
// its schema: Backend.Restore refuses state written with another
// fingerprint.
type Codec[V any] interface {
	Encode(dst []byte, v V) ([]byte, error)
	Decode(b []byte) (V, error)
	Fingerprint() string
}

type bytesCodec struct{}

// Bytes stores []byte values as they are. Decode returns a copy; nil and
// empty decode as an empty slice.
func Bytes() Codec[[]byte] { return bytesCodec{} }

func (bytesCodec) Encode(dst []byte, v []byte) ([]byte, error) { return append(dst, v...), nil }
func (bytesCodec) Decode(b []byte) ([]byte, error)             { return append([]byte{}, b...), nil }
func (bytesCodec) Fingerprint() string                         { return "bytes" }

type stringCodec struct{}

// String stores strings as their bytes.
func String() Codec[string] { return stringCodec{} }

func (stringCodec) Encode(dst []byte, v string) ([]byte, error) { return append(dst, v...), nil }
func (stringCodec) Decode(b []byte) (string, error)             { return string(b), nil }
func (stringCodec) Fingerprint() string                         { return "string" }

type int64Codec struct{}

// Int64 stores int64 values as 8 bytes, big endian: the fast path for
// counters, and the layout of kord's CountJob state.
func Int64() Codec[int64] { return int64Codec{} }

func (int64Codec) Encode(dst []byte, v int64) ([]byte, error) {
	return binary.BigEndian.AppendUint64(dst, uint64(v)), nil
}

func (int64Codec) Decode(b []byte) (int64, error) {
	if len(b) != 8 {
		return 0, fmt.Errorf("keyed: int64 codec: %d bytes, want 8", len(b))
	}
	return int64(binary.BigEndian.Uint64(b)), nil
}

func (int64Codec) Fingerprint() string { return "int64-be" }

type jsonCodec[V any] struct{ fp string }

// JSON stores values as encoding/json encodes them (by internal/jsonx:
// encoding/json's bytes and errors, faster). Its fingerprint is
// "json:" and V's full type name (package path included), so renaming or
// moving the type refuses a restore; adding or removing fields does not
// (encoding/json ignores unknown fields and leaves missing ones zero).
func JSON[V any]() Codec[V] {
	return jsonCodec[V]{fp: "json:" + typeName(reflect.TypeFor[V]())}
}

func (c jsonCodec[V]) Encode(dst []byte, v V) ([]byte, error) {
	b, err := jsonx.Marshal(v)
	if err != nil {
		return dst, fmt.Errorf("keyed: json codec: %w", err)
	}
	return append(dst, b...), nil
}

func (c jsonCodec[V]) Decode(b []byte) (V, error) {
	v, err := jsonx.Unmarshal[V](b)
	if err != nil {
		return v, fmt.Errorf("keyed: json codec %s: %w", c.fp, err)
	}
	return v, nil
}

func (c jsonCodec[V]) Fingerprint() string { return c.fp }

// typeName names t with its package path: "example.com/m/pkg.Event",
// "[]string", "map[string]example.com/m/pkg.Event".
func typeName(t reflect.Type) string {
	if t == nil {
		return "interface {}"
	}
	if t.Name() != "" {
		if t.PkgPath() != "" {
			return t.PkgPath() + "." + t.Name()
		}
		return t.Name()
	}
	switch t.Kind() {
	case reflect.Pointer:
		return "*" + typeName(t.Elem())
	case reflect.Slice:
		return "[]" + typeName(t.Elem())
	case reflect.Array:
		return "[" + strconv.Itoa(t.Len()) + "]" + typeName(t.Elem())
	case reflect.Map:
		return "map[" + typeName(t.Key()) + "]" + typeName(t.Elem())
	}
	return t.String()
}

// avroFingerprint is "avro:" and the CRC-64-AVRO (Rabin) fingerprint of the
// schema's Parsing Canonical Form, in hex, as the Avro specification defines
// schema fingerprints: two schemas that differ only in doc, aliases or
// formatting have the same fingerprint.
func avroFingerprint(c *goavro.Codec) string {
	return fmt.Sprintf("avro:%016x", c.Rabin)
}

type avroCodec[V any] struct {
	codec *goavro.Codec
	fp    string
}

// Avro stores values in the Avro binary encoding under schema, with goavro,
// as kord's producer.Avro serializer does: a V that is not goavro's native
// form is converted through its encoding/json form read as Avro's JSON
// form, and decoded back the same way, which suits records of primitive,
// record, array and map fields (a union needs Avro's JSON shape
// {"type": value}; a bytes field does not round-trip through a Go []byte,
// which encoding/json writes as base64). Use AvroNative for goavro native
// values.
func Avro[V any](schema string) (Codec[V], error) {
	c, err := goavro.NewCodec(schema)
	if err != nil {
		return nil, fmt.Errorf("keyed: avro schema: %w", err)
	}
	return avroCodec[V]{codec: c, fp: avroFingerprint(c)}, nil
}

func (c avroCodec[V]) Encode(dst []byte, v V) ([]byte, error) {
	var native any = v
	if _, ok := native.(map[string]any); !ok {
		text, err := jsonx.Marshal(v)
		if err != nil {
			return dst, fmt.Errorf("keyed: avro codec %s: %w", c.fp, err)
		}
		if native, _, err = c.codec.NativeFromTextual(text); err != nil {
			return dst, fmt.Errorf("keyed: avro codec %s: %w", c.fp, err)
		}
	}
	out, err := c.codec.BinaryFromNative(dst, native)
	if err != nil {
		return dst, fmt.Errorf("keyed: avro codec %s: %w", c.fp, err)
	}
	return out, nil
}

func (c avroCodec[V]) Decode(b []byte) (v V, err error) {
	native, err := avroDecode(c.codec, b)
	if err != nil {
		return v, fmt.Errorf("keyed: avro codec %s: %w", c.fp, err)
	}
	if m, ok := native.(V); ok { // V is goavro's native form, e.g. map[string]any
		return m, nil
	}
	text, err := c.codec.TextualFromNative(nil, native)
	if err != nil {
		return v, fmt.Errorf("keyed: avro codec %s: %w", c.fp, err)
	}
	if v, err = jsonx.Unmarshal[V](text); err != nil {
		return v, fmt.Errorf("keyed: avro codec %s: %w", c.fp, err)
	}
	return v, nil
}

func (c avroCodec[V]) Fingerprint() string { return c.fp }

// avroDecode decodes exactly one datum from all of b. goavro reports bad
// input as errors; the recover is a guard so that a state file that passed
// its checksum but holds bytes goavro chokes on fails the restore with an
// error instead of crashing the process.
func avroDecode(c *goavro.Codec, b []byte) (native any, err error) {
	defer func() {
		if r := recover(); r != nil {
			native, err = nil, fmt.Errorf("undecodable datum: %v", r)
		}
	}()
	native, rest, err := c.NativeFromBinary(b)
	if err != nil {
		return nil, err
	}
	if len(rest) != 0 {
		return nil, fmt.Errorf("%d bytes after the datum", len(rest))
	}
	return native, nil
}

type avroNativeCodec struct {
	codec *goavro.Codec
	fp    string
}

// AvroNative stores goavro native values (for a record, map[string]any with
// goavro's union convention) in the Avro binary encoding under schema. Its
// fingerprint is the same as Avro's for the same schema: the bytes are the
// same.
func AvroNative(schema string) (Codec[any], error) {
	c, err := goavro.NewCodec(schema)
	if err != nil {
		return nil, fmt.Errorf("keyed: avro schema: %w", err)
	}
	return avroNativeCodec{codec: c, fp: avroFingerprint(c)}, nil
}

func (c avroNativeCodec) Encode(dst []byte, v any) ([]byte, error) {
	out, err := c.codec.BinaryFromNative(dst, v)
	if err != nil {
		return dst, fmt.Errorf("keyed: avro codec %s: %w", c.fp, err)
	}
	return out, nil
}

func (c avroNativeCodec) Decode(b []byte) (any, error) {
	native, err := avroDecode(c.codec, b)
	if err != nil {
		return nil, fmt.Errorf("keyed: avro codec %s: %w", c.fp, err)
	}
	return native, nil
}

func (c avroNativeCodec) Fingerprint() string { return c.fp }

// Snapshot encodings of list and map state values, the Entry.Value of a
// key's list or map in a key-group file. Both are a version byte then
// length-prefixed items, every length an unsigned varint:
//
//	list:  0x01  n  n × (len  element)             n >= 1, elements in order
//	map:   0x01  n  n × (klen key  vlen value)      n >= 1, keys distinct
//
// where element, key and value are their codecs' encodings. An empty list or
// map is no state and is never written. Lengths are minimal varints. The
// decoders never panic and allocate no more than the input's length allows.
const containerFormat = 0x01

func appendFramed[V any](dst, scratch []byte, c Codec[V], v V) (out, scratchOut []byte, err error) {
	scratch, err = c.Encode(scratch[:0], v)
	if err != nil {
		return dst, scratch, err
	}
	dst = binary.AppendUvarint(dst, uint64(len(scratch)))
	return append(dst, scratch...), scratch, nil
}

func appendList[V any](dst, scratch []byte, c Codec[V], list []V) (out, scratchOut []byte, err error) {
	dst = append(dst, containerFormat)
	dst = binary.AppendUvarint(dst, uint64(len(list)))
	for _, v := range list {
		if dst, scratch, err = appendFramed(dst, scratch, c, v); err != nil {
			return dst, scratch, err
		}
	}
	return dst, scratch, nil
}

func appendMap[K comparable, V any](dst, scratch []byte, kc Codec[K], vc Codec[V], m map[K]V) (out, scratchOut []byte, err error) {
	dst = append(dst, containerFormat)
	dst = binary.AppendUvarint(dst, uint64(len(m)))
	for k, v := range m {
		if dst, scratch, err = appendFramed(dst, scratch, kc, k); err != nil {
			return dst, scratch, err
		}
		if dst, scratch, err = appendFramed(dst, scratch, vc, v); err != nil {
			return dst, scratch, err
		}
	}
	return dst, scratch, nil
}

type framedReader struct {
	b   []byte
	off int
}

func (r *framedReader) uvarint() (uint64, error) {
	v, n := binary.Uvarint(r.b[r.off:])
	if n <= 0 {
		if n == 0 {
			return 0, fmt.Errorf("truncated length at byte %d", r.off)
		}
		return 0, fmt.Errorf("length overflows 64 bits at byte %d", r.off)
	}
	if n > 1 && r.b[r.off+n-1] == 0 {
		return 0, fmt.Errorf("overlong length at byte %d", r.off) // one encoding per value
	}
	r.off += n
	return v, nil
}

func (r *framedReader) item() ([]byte, error) {
	n, err := r.uvarint()
	if err != nil {
		return nil, err
	}
	if n > uint64(len(r.b)-r.off) {
		return nil, fmt.Errorf("item of %d bytes at byte %d with %d left", n, r.off, len(r.b)-r.off)
	}
	v := r.b[r.off : r.off+int(n) : r.off+int(n)]
	r.off += int(n)
	return v, nil
}

// header reads the version byte and the item count, at least 1 and at most
// what the remaining bytes can hold at minItemBytes bytes an item.
func (r *framedReader) header(minItemBytes int) (int, error) {
	if len(r.b) == 0 {
		return 0, fmt.Errorf("empty value")
	}
	if r.b[0] != containerFormat {
		return 0, fmt.Errorf("format byte 0x%02x, want 0x%02x", r.b[0], containerFormat)
	}
	r.off = 1
	n, err := r.uvarint()
	if err != nil {
		return 0, err
	}
	if n == 0 {
		return 0, fmt.Errorf("no items (an empty container is never written)")
	}
	if n > uint64((len(r.b)-r.off)/minItemBytes) {
		return 0, fmt.Errorf("%d items in %d bytes", n, len(r.b)-r.off)
	}
	return int(n), nil
}

func decodeList[V any](b []byte, c Codec[V]) ([]V, error) {
	r := framedReader{b: b}
	n, err := r.header(1)
	if err != nil {
		return nil, fmt.Errorf("list: %w", err)
	}
	list := make([]V, n)
	for i := range list {
		item, err := r.item()
		if err != nil {
			return nil, fmt.Errorf("list element %d: %w", i, err)
		}
		if list[i], err = c.Decode(item); err != nil {
			return nil, fmt.Errorf("list element %d: %w", i, err)
		}
	}
	if r.off != len(b) {
		return nil, fmt.Errorf("list: %d bytes after the last element", len(b)-r.off)
	}
	return list, nil
}

func decodeMap[K comparable, V any](b []byte, kc Codec[K], vc Codec[V]) (map[K]V, error) {
	r := framedReader{b: b}
	n, err := r.header(2)
	if err != nil {
		return nil, fmt.Errorf("map: %w", err)
	}
	m := make(map[K]V, n)
	for i := range n {
		kb, err := r.item()
		if err != nil {
			return nil, fmt.Errorf("map entry %d key: %w", i, err)
		}
		vb, err := r.item()
		if err != nil {
			return nil, fmt.Errorf("map entry %d value: %w", i, err)
		}
		k, err := kc.Decode(kb)
		if err != nil {
			return nil, fmt.Errorf("map entry %d key: %w", i, err)
		}
		v, err := vc.Decode(vb)
		if err != nil {
			return nil, fmt.Errorf("map entry %d value: %w", i, err)
		}
		if _, dup := m[k]; dup {
			return nil, fmt.Errorf("map entry %d: duplicate key %v", i, k)
		}
		m[k] = v
	}
	if r.off != len(b) {
		return nil, fmt.Errorf("map: %d bytes after the last entry", len(b)-r.off)
	}
	return m, nil
}
