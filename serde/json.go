package serde

import (
	"fmt"
	"reflect"
	"strconv"

	"github.com/kordproject/kord/internal/jsonx"
)

type jsonSerde[T any] struct {
	fp  string
	dec *jsonx.Decoder[T]
}

// JSON writes values as encoding/json encodes them, and reads them as it
// decodes them, refusing anything after the value (kord's JSON is
// internal/jsonx: encoding/json's bytes, results and errors, faster). Its
// fingerprint is "json:" and T's full type name, package path included, so
// renaming or moving the type refuses a restore of keyed state; adding or
// removing fields does not (encoding/json ignores unknown fields and leaves
// missing ones zero).
func JSON[T any]() Serde[T] {
	return jsonSerde[T]{fp: "json:" + typeName(reflect.TypeFor[T]()), dec: new(jsonx.Decoder[T])}
}

func (s jsonSerde[T]) Encode(dst []byte, v T) ([]byte, error) {
	b, err := jsonx.Marshal(v)
	if err != nil {
		return dst, fmt.Errorf("serde: json: %w", err)
	}
	if dst == nil {
		return b, nil
	}
	return append(dst, b...), nil
}

func (s jsonSerde[T]) Decode(b []byte) (T, error) {
	if b == nil {
		var v T
		return v, null("JSON")
	}
	v, err := s.dec.Unmarshal(b)
	if err != nil {
		return v, fmt.Errorf("serde: json: %w", err)
	}
	return v, nil
}

func (s jsonSerde[T]) Fingerprint() string { return s.fp }

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
