// Package jsonx is kord's JSON codec: encoding/json's behaviour at
// github.com/goccy/go-json's speed. The JSON serializers and deserializers
// of producer, consumer, kafkaio and keyed all go through it.
//
// goccy/go-json was chosen by measurement (issue #15, bench/RESULTS.md): on
// the benchmark job's event it decodes 5 times and encodes 2.3 times as
// fast as encoding/json, with fewer allocations; it matched encoding/json's
// decoded values and encoded bytes on every input a differential fuzzer and
// 70,000 random values produced, where segmentio/encoding and
// bytedance/sonic (its std configuration) did not (times encoding/json
// refuses, \b written as \u0008, invalid UTF-8 in a RawMessage rewritten).
//
// Where goccy/go-json fails, encoding/json decides: its error is returned
// (the same text, naming the field, and the same types for errors.As), or
// its result when it succeeds. So a failure is always encoding/json's
// failure. What goccy/go-json accepts is what encoding/json accepts, and
// decodes alike, as far as the differential tests in this package reach.
// A type's MarshalJSON or UnmarshalJSON runs a second time on that path.
package jsonx

import (
	"encoding/json"
	"sync"

	gojson "github.com/goccy/go-json"
)

// Marshal returns v's JSON encoding, encoding/json's bytes.
func Marshal(v any) ([]byte, error) {
	b, err := gojson.Marshal(v)
	if err != nil {
		return json.Marshal(v)
	}
	return b, nil
}

// Unmarshal decodes data into a new T, as encoding/json.Unmarshal does.
// On an error the T returned is encoding/json's (what it decoded before
// the error).
func Unmarshal[T any](data []byte) (T, error) {
	var v T
	if err := gojson.Unmarshal(data, &v); err == nil {
		return v, nil
	}
	return std[T](data)
}

// std decodes data into a new T with encoding/json: what Unmarshal and a
// Decoder return when goccy/go-json fails.
func std[T any](data []byte) (T, error) {
	var w T
	err := json.Unmarshal(data, &w)
	return w, err
}

// Decoder decodes JSON into Ts as Unmarshal does, with one allocation
// fewer per value: Unmarshal's T escapes to the heap through
// goccy/go-json's interface argument, while a Decoder decodes into a T it
// keeps in a pool, copies it out and zeroes it for the next value. Nothing
// of one value reaches the next: what the T holds (strings, slices, maps)
// is the decoder's fresh allocation each time. The zero Decoder is ready;
// it is safe for concurrent use and must not be copied after first use.
type Decoder[T any] struct{ pool sync.Pool }

// Unmarshal decodes data into a new T, as the package's Unmarshal does.
func (d *Decoder[T]) Unmarshal(data []byte) (T, error) {
	p, _ := d.pool.Get().(*T)
	if p == nil {
		p = new(T)
	}
	err := gojson.Unmarshal(data, p)
	v := *p
	var zero T
	*p = zero
	d.pool.Put(p)
	if err == nil {
		return v, nil
	}
	return std[T](data)
}
