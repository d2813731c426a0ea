package serde

import (
	"fmt"

	"github.com/linkedin/goavro/v2"

	"github.com/kordproject/kord/internal/jsonx"
)

// Avro's serdes write the Avro binary encoding of one datum, with goavro,
// and no registry framing. Both have a Schema method besides Serde's:
//
//	Schema() string // the schema, in its Parsing Canonical Form
//
// which a file sink or a registry reads. Both are Resolvers: they read
// values written under another schema by Avro's schema resolution (see
// resolve.go), which keyed state uses when a restore finds its schema
// changed.

// avroFingerprint is "avro:" and the CRC-64-AVRO (Rabin) fingerprint of the
// schema's Parsing Canonical Form, in hex, as the Avro specification defines
// schema fingerprints: two schemas that differ only in doc, aliases or
// formatting have the same fingerprint.
func avroFingerprint(c *goavro.Codec) string { return fmt.Sprintf("avro:%016x", c.Rabin) }

type avroSerde[T any] struct {
	codec  *goavro.Codec
	fp     string
	schema string // as given, compact: WriterSchema
}

// Avro writes values in the Avro binary encoding under schema. A T that
// is not goavro's native form (map[string]any and friends) goes through
// its encoding/json form read as Avro's JSON form, and back the same way,
// which suits records of primitive, record, array and map fields mapped
// onto Go structs with matching json tags (a union needs Avro's JSON shape
// {"type": value}; a bytes field does not round-trip through a Go []byte,
// which encoding/json writes as base64). Use AvroNative for goavro native
// values. Bytes left after the datum are an error: they were written under
// another schema.
func Avro[T any](schema string) (Serde[T], error) {
	c, err := goavro.NewCodec(schema)
	if err != nil {
		return nil, fmt.Errorf("serde: avro schema: %w", err)
	}
	return avroSerde[T]{codec: c, fp: avroFingerprint(c), schema: compactSchema(schema)}, nil
}

func (s avroSerde[T]) Encode(dst []byte, v T) ([]byte, error) {
	var native any = v
	if _, ok := native.(map[string]any); !ok {
		text, err := jsonx.Marshal(v)
		if err != nil {
			return dst, fmt.Errorf("serde: %s: %w", s.fp, err)
		}
		if native, _, err = s.codec.NativeFromTextual(text); err != nil {
			return dst, fmt.Errorf("serde: %s: %w", s.fp, err)
		}
	}
	out, err := s.codec.BinaryFromNative(dst, native)
	if err != nil {
		return dst, fmt.Errorf("serde: %s: %w", s.fp, err)
	}
	return out, nil
}

func (s avroSerde[T]) Decode(b []byte) (v T, err error) {
	native, err := avroDecode(s.codec, b)
	if err != nil {
		return v, fmt.Errorf("serde: %s: %w", s.fp, err)
	}
	return s.fromNative(native)
}

// fromNative turns a native value of the serde's schema into a T.
func (s avroSerde[T]) fromNative(native any) (v T, err error) {
	if m, ok := native.(T); ok { // T is goavro's native form, e.g. map[string]any
		return m, nil
	}
	text, err := s.codec.TextualFromNative(nil, native)
	if err != nil {
		return v, fmt.Errorf("serde: %s: %w", s.fp, err)
	}
	if v, err = jsonx.Unmarshal[T](text); err != nil {
		return v, fmt.Errorf("serde: %s to %T: %w", s.fp, v, err)
	}
	return v, nil
}

func (s avroSerde[T]) Fingerprint() string  { return s.fp }
func (s avroSerde[T]) Schema() string       { return s.codec.CanonicalSchema() }
func (s avroSerde[T]) WriterSchema() string { return s.schema }

// Resolve reads values written under writer as values of this schema, by
// Avro's schema resolution: decoded under writer, converted to this
// schema's native form, then made a T as Decode does.
func (s avroSerde[T]) Resolve(writer string) (string, func([]byte) (T, error), error) {
	wc, conv, err := avroResolution(writer, s.schema)
	if err != nil {
		return "", nil, err
	}
	wfp := avroFingerprint(wc)
	if wc.Rabin == s.codec.Rabin {
		return wfp, s.Decode, nil // the same Parsing Canonical Form: the same bytes
	}
	return wfp, func(b []byte) (v T, err error) {
		native, err := avroDecode(wc, b)
		if err == nil {
			native, err = apply(conv, native)
		}
		if err != nil {
			return v, fmt.Errorf("serde: %s read as %s: %w", wfp, s.fp, err)
		}
		return s.fromNative(native)
	}, nil
}

type avroNativeSerde struct {
	codec  *goavro.Codec
	fp     string
	schema string // as given, compact: WriterSchema
}

// AvroNative writes goavro native values (for a record, map[string]any
// with goavro's union convention) in the Avro binary encoding under
// schema, and decodes into them. Its bytes and fingerprint are Avro's for
// the same schema.
func AvroNative(schema string) (Serde[any], error) {
	c, err := goavro.NewCodec(schema)
	if err != nil {
		return nil, fmt.Errorf("serde: avro schema: %w", err)
	}
	return avroNativeSerde{codec: c, fp: avroFingerprint(c), schema: compactSchema(schema)}, nil
}

func (s avroNativeSerde) Encode(dst []byte, v any) ([]byte, error) {
	out, err := s.codec.BinaryFromNative(dst, v)
	if err != nil {
		return dst, fmt.Errorf("serde: %s: %w", s.fp, err)
	}
	return out, nil
}

func (s avroNativeSerde) Decode(b []byte) (any, error) {
	native, err := avroDecode(s.codec, b)
	if err != nil {
		return nil, fmt.Errorf("serde: %s: %w", s.fp, err)
	}
	return native, nil
}

func (s avroNativeSerde) Fingerprint() string  { return s.fp }
func (s avroNativeSerde) Schema() string       { return s.codec.CanonicalSchema() }
func (s avroNativeSerde) WriterSchema() string { return s.schema }

// Resolve reads values written under writer as native values of this
// schema, by Avro's schema resolution.
func (s avroNativeSerde) Resolve(writer string) (string, func([]byte) (any, error), error) {
	wc, conv, err := avroResolution(writer, s.schema)
	if err != nil {
		return "", nil, err
	}
	wfp := avroFingerprint(wc)
	if wc.Rabin == s.codec.Rabin {
		return wfp, s.Decode, nil
	}
	return wfp, func(b []byte) (any, error) {
		native, err := avroDecode(wc, b)
		if err == nil {
			native, err = apply(conv, native)
		}
		if err != nil {
			return nil, fmt.Errorf("serde: %s read as %s: %w", wfp, s.fp, err)
		}
		return native, nil
	}, nil
}

// avroDecode decodes exactly one datum from all of b. goavro reports bad
// input as errors; the recover is a guard so that bytes goavro chokes on
// (a state file that passed its checksum, a record from another producer)
// fail with an error instead of crashing the process.
func avroDecode(c *goavro.Codec, b []byte) (native any, err error) {
	if b == nil {
		return nil, null("Avro")
	}
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
		return nil, fmt.Errorf("%d bytes left after the datum (written under another schema?)", len(rest))
	}
	return native, nil
}
