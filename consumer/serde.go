package consumer

import (
	"fmt"

	"github.com/linkedin/goavro/v2"

	"github.com/kordproject/kord/internal/jsonx"
)

// Deserializer turns a record's value into a T: the counterpart of
// producer.Serializer, in the shape keyed.KafkaSource's Decode takes. An
// error fails the record (the job names its topic, partition and offset, or
// sends it to the dead letters, as the user chose).
type Deserializer[T any] func(rec Record) (T, error)

// BytesValue returns the value as read (nil for a null value).
func BytesValue() Deserializer[[]byte] {
	return func(rec Record) ([]byte, error) { return rec.Value, nil }
}

// StringValue returns the value as a string. A null value is an error: a
// string cannot tell it from an empty one.
func StringValue() Deserializer[string] {
	return func(rec Record) (string, error) {
		if rec.Value == nil {
			return "", fmt.Errorf("consumer: null value, not a string")
		}
		return string(rec.Value), nil
	}
}

// JSONValue decodes the value into a T as encoding/json does (kord's JSON
// is internal/jsonx: encoding/json's results and errors, faster). A null
// value and anything after the JSON value are errors.
func JSONValue[T any]() Deserializer[T] {
	dec := new(jsonx.Decoder[T])
	return func(rec Record) (T, error) {
		if rec.Value == nil {
			var v T
			return v, fmt.Errorf("consumer: null value, not JSON")
		}
		v, err := dec.Unmarshal(rec.Value)
		if err != nil {
			return v, fmt.Errorf("consumer: json: %w", err)
		}
		return v, nil
	}
}

// AvroValue decodes the value, Avro binary under schema (no schema-registry
// framing; producer.Avro writes it), into a T through Avro's JSON form, the
// mirror of producer.Avro: records of primitive, record, array and map
// fields map onto Go structs with matching json tags. Bytes left over after
// the datum are an error: the value was written under another schema.
func AvroValue[T any](schema string) (Deserializer[T], error) {
	codec, err := goavro.NewCodec(schema)
	if err != nil {
		return nil, fmt.Errorf("consumer: avro schema: %w", err)
	}
	return func(rec Record) (T, error) {
		var v T
		native, err := avroDecode(codec, rec.Value)
		if err != nil {
			return v, err
		}
		text, err := codec.TextualFromNative(nil, native)
		if err != nil {
			return v, fmt.Errorf("consumer: avro: %w", err)
		}
		if v, err = jsonx.Unmarshal[T](text); err != nil {
			return v, fmt.Errorf("consumer: avro to %T: %w", v, err)
		}
		return v, nil
	}, nil
}

// AvroNativeValue decodes the value, Avro binary under schema, into
// goavro's native form (for a record, map[string]any).
func AvroNativeValue(schema string) (Deserializer[any], error) {
	codec, err := goavro.NewCodec(schema)
	if err != nil {
		return nil, fmt.Errorf("consumer: avro schema: %w", err)
	}
	return func(rec Record) (any, error) { return avroDecode(codec, rec.Value) }, nil
}

func avroDecode(codec *goavro.Codec, b []byte) (any, error) {
	if b == nil {
		return nil, fmt.Errorf("consumer: null value, not Avro")
	}
	native, rest, err := codec.NativeFromBinary(b)
	if err != nil {
		return nil, fmt.Errorf("consumer: avro: %w", err)
	}
	if len(rest) > 0 {
		return nil, fmt.Errorf("consumer: avro: %d bytes left after the datum (written under another schema?)", len(rest))
	}
	return native, nil
}

// Header is a record header.
type Header struct {
	Key   string
	Value []byte
}
