package producer

import (
	"fmt"

	"github.com/linkedin/goavro/v2"

	"github.com/kordproject/kord/internal/jsonx"
)

// Serializer turns a typed key or value into the bytes written to Kafka.
// A nil result for a key means "no key" (null key); an empty non-nil slice is
// an empty key, which is hashed like any other.
type Serializer[T any] interface {
	Serialize(topic string, v T) ([]byte, error)
}

// SerializerFunc adapts a function to Serializer.
type SerializerFunc[T any] func(topic string, v T) ([]byte, error)

// Serialize calls f.
func (f SerializerFunc[T]) Serialize(topic string, v T) ([]byte, error) { return f(topic, v) }

// Bytes passes bytes through unchanged: a nil slice is a null key or value,
// an empty one is empty.
func Bytes() Serializer[[]byte] {
	return SerializerFunc[[]byte](func(_ string, v []byte) ([]byte, error) { return v, nil })
}

// String writes a string's UTF-8 bytes. The empty string is an empty key (a
// key, hashed), never a null key.
func String() Serializer[string] {
	return SerializerFunc[string](func(_ string, v string) ([]byte, error) {
		return append(make([]byte, 0, len(v)), v...), nil
	})
}

// JSON writes encoding/json's encoding of v (kord's JSON is
// internal/jsonx: encoding/json's bytes and errors, faster).
func JSON[T any]() Serializer[T] {
	return SerializerFunc[T](func(topic string, v T) ([]byte, error) {
		b, err := jsonx.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("producer: json encoding for topic %q: %w", topic, err)
		}
		return b, nil
	})
}

// Avro writes the Avro binary encoding (no schema-registry framing) of v
// under schema, with goavro. A T that is not already goavro's native form
// (map[string]any and friends) is converted through its JSON encoding read as
// Avro's JSON form, which suits records of primitive, record, array and map
// fields; a union field then needs Avro's JSON shape ({"type": value}). Use
// AvroNative to hand goavro native values directly.
func Avro[T any](schema string) (Serializer[T], error) {
	codec, err := goavro.NewCodec(schema)
	if err != nil {
		return nil, fmt.Errorf("producer: avro schema: %w", err)
	}
	return SerializerFunc[T](func(topic string, v T) ([]byte, error) {
		native, err := avroNative(codec, v)
		if err != nil {
			return nil, fmt.Errorf("producer: avro encoding for topic %q: %w", topic, err)
		}
		b, err := codec.BinaryFromNative(nil, native)
		if err != nil {
			return nil, fmt.Errorf("producer: avro encoding for topic %q: %w", topic, err)
		}
		return b, nil
	}), nil
}

// AvroNative writes the Avro binary encoding of a goavro native value (for a
// record, map[string]any with goavro's union convention).
func AvroNative(schema string) (Serializer[any], error) {
	codec, err := goavro.NewCodec(schema)
	if err != nil {
		return nil, fmt.Errorf("producer: avro schema: %w", err)
	}
	return SerializerFunc[any](func(topic string, v any) ([]byte, error) {
		b, err := codec.BinaryFromNative(nil, v)
		if err != nil {
			return nil, fmt.Errorf("producer: avro encoding for topic %q: %w", topic, err)
		}
		return b, nil
	}), nil
}

func avroNative(codec *goavro.Codec, v any) (any, error) {
	if m, ok := v.(map[string]any); ok {
		return m, nil
	}
	text, err := jsonx.Marshal(v)
	if err != nil {
		return nil, err
	}
	native, _, err := codec.NativeFromTextual(text)
	return native, err
}
