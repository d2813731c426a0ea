// Package serde describes records: one shape, [Serde], turns a typed value
// into bytes and back for every part of kord that needs it. The producer
// writes keys and values with it, kafkaio's sources and sinks read and
// write records with it, keyed state keeps its values in snapshots with it,
// and file sinks write rows with it. A Schema Registry format is a Serde
// like any other.
//
// The package holds the plain formats: [Bytes], [String], [Int64], [JSON]
// and [Avro] (binary, without a registry's framing). The Avro serdes are
// Resolvers too: they read values written under an older schema by Avro's
// schema resolution, which lets keyed state's schema evolve across a
// restore. Write your own by implementing the three methods, or by
// embedding one of these and overriding Decode to check what it decoded:
//
//	type accessSerde struct{ serde.Serde[Access] }
//
//	func (s accessSerde) Decode(b []byte) (Access, error) {
//		a, err := s.Serde.Decode(b)
//		if err == nil && a.URI == "" {
//			err = errors.New("no uri")
//		}
//		return a, err
//	}
//
// # Null
//
// Kafka tells a null key or value (a tombstone) from an empty one. A Serde
// sees a null as a nil slice, on both sides: Bytes encodes a nil []byte as
// nil (null) and decodes nil as nil; every other Serde here encodes to a
// non-nil slice (the empty string is an empty key, hashed like any other,
// never a null key) and refuses to decode nil, naming it: a null is not a
// string, a number, JSON or Avro. Nothing is decoded as a zero value in its
// place.
package serde

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Serde turns values of type T into bytes and back.
//
// Encode appends v's encoding to dst and returns the extended slice; with
// a nil dst its result is nil only for a null (see the package doc). It
// never keeps v's memory: the result may be reused.
//
// Decode decodes all of b (bytes left over are an error), returns an error
// and never panics on bytes that are not an encoding, and does not retain
// b.
//
// Fingerprint names the format and its schema ("json:example.com/m.Event",
// "avro:5f1c…"): keyed state records it in every snapshot, and a restore
// refuses state written under another fingerprint, unless the Serde is a
// Resolver (the Avro serdes are) that can read it: an Avro schema may then
// change by Avro's schema resolution rules (fields added with a default,
// fields removed, types promoted; see Resolver).
//
// A Serde is safe for concurrent use.
type Serde[T any] interface {
	Encode(dst []byte, v T) ([]byte, error)
	Decode(b []byte) (T, error)
	Fingerprint() string
}

// Header is a record header as a Serde sees it.
type Header struct {
	Key   string
	Value []byte
}

// HeaderSerde is a Serde whose values may name their schema in a header
// of their record rather than in their bytes (Schema Registry's
// __value_schema_id, serde/registry's HeaderIDs). A Kafka source reads
// with DecodeHeaders, and a sink writes with EncodeHeaders, when its
// Serde is one.
type HeaderSerde[T any] interface {
	Serde[T]
	// DecodeHeaders reads b, the record's value, with its headers.
	DecodeHeaders(headers []Header, b []byte) (T, error)
	// EncodeHeaders appends v to dst, and returns the headers the record
	// must carry as well.
	EncodeHeaders(dst []byte, v T) ([]byte, []Header, error)
}

// ErrNull is the error a Serde other than Bytes returns for a null (nil)
// input to Decode.
var ErrNull = errors.New("serde: null")

func null(what string) error { return fmt.Errorf("%w, not %s", ErrNull, what) }

type bytesSerde struct{}

// Bytes passes bytes through: Encode appends them, Decode returns a copy.
// A nil slice is a null, both ways; an empty one is empty.
func Bytes() Serde[[]byte] { return bytesSerde{} }

func (bytesSerde) Encode(dst []byte, v []byte) ([]byte, error) {
	if dst == nil && v != nil {
		dst = make([]byte, 0, len(v))
	}
	return append(dst, v...), nil
}

func (bytesSerde) Decode(b []byte) ([]byte, error) {
	if b == nil {
		return nil, nil
	}
	return append(make([]byte, 0, len(b)), b...), nil
}

func (bytesSerde) Fingerprint() string { return "bytes" }

type stringSerde struct{}

// String writes a string's UTF-8 bytes. The empty string is an empty
// slice, never a null; a null does not decode.
func String() Serde[string] { return stringSerde{} }

func (stringSerde) Encode(dst []byte, v string) ([]byte, error) {
	if dst == nil {
		dst = make([]byte, 0, len(v))
	}
	return append(dst, v...), nil
}

func (stringSerde) Decode(b []byte) (string, error) {
	if b == nil {
		return "", null("a string")
	}
	return string(b), nil
}

func (stringSerde) Fingerprint() string { return "string" }

type int64Serde struct{}

// Int64 writes an int64 as 8 bytes, big endian, as Kafka's LongSerializer
// does (org.apache.kafka.common.serialization.LongSerializer).
func Int64() Serde[int64] { return int64Serde{} }

func (int64Serde) Encode(dst []byte, v int64) ([]byte, error) {
	return binary.BigEndian.AppendUint64(dst, uint64(v)), nil
}

func (int64Serde) Decode(b []byte) (int64, error) {
	if b == nil {
		return 0, null("an int64")
	}
	if len(b) != 8 {
		return 0, fmt.Errorf("serde: int64: %d bytes, want 8", len(b))
	}
	return int64(binary.BigEndian.Uint64(b)), nil
}

func (int64Serde) Fingerprint() string { return "int64-be" }

// Nullable makes a Serde of *T from one of T that reads a null (a
// tombstone of a compacted topic) as a nil pointer and writes a nil
// pointer as a null, every other value through s: the table of
// keyed.TableJoin takes its deletions so.
func Nullable[T any](s Serde[T]) Serde[*T] { return nullable[T]{s} }

type nullable[T any] struct{ s Serde[T] }

func (n nullable[T]) Encode(dst []byte, v *T) ([]byte, error) {
	if v == nil {
		return dst, nil
	}
	out, err := n.s.Encode(dst, *v)
	if err == nil && out == nil {
		out = []byte{} // a value, empty: never read back as a null
	}
	return out, err
}

func (n nullable[T]) Decode(b []byte) (*T, error) {
	if b == nil {
		return nil, nil
	}
	v, err := n.s.Decode(b)
	if err != nil {
		return nil, err
	}
	return &v, nil
}

func (n nullable[T]) Fingerprint() string { return "nullable(" + n.s.Fingerprint() + ")" }
