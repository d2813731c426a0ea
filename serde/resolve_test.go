package serde_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kordproject/kord/serde"
)

// readAs writes v under writer and reads it back under reader, by Avro's
// schema resolution.
func readAs(t *testing.T, writer, reader string, v any) any {
	t.Helper()
	w, err := serde.AvroNative(writer)
	require.NoError(t, err)
	r, err := serde.AvroNative(reader)
	require.NoError(t, err)
	b, err := w.Encode(nil, v)
	require.NoError(t, err)
	res := r.(serde.Resolver[any])
	fp, dec, err := res.Resolve(w.(serde.Resolver[any]).WriterSchema())
	require.NoError(t, err)
	require.Equal(t, w.Fingerprint(), fp, "the fingerprint of the writer's values")
	got, err := dec(b)
	require.NoError(t, err)
	// What was read is a native value of the reader's schema: it encodes.
	_, err = r.Encode(nil, got)
	require.NoError(t, err, "%#v", got)
	return got
}

func rec(fields string) string {
	return `{"type":"record","name":"R","namespace":"kord.test","fields":[` + fields + `]}`
}

func TestResolve(t *testing.T) {
	for _, tc := range []struct {
		name           string
		writer, reader string
		in, want       any
	}{
		{"same schema", rec(`{"name":"a","type":"int"}`), rec(`{"name":"a","type":"int"}`),
			map[string]any{"a": int32(1)}, map[string]any{"a": int32(1)}},
		{"added field with a default", rec(`{"name":"a","type":"int"}`),
			rec(`{"name":"a","type":"int"},{"name":"b","type":"string","default":"x"},{"name":"c","type":{"type":"array","items":"long"},"default":[1,2]}`),
			map[string]any{"a": int32(1)}, map[string]any{"a": int32(1), "b": "x", "c": []any{int64(1), int64(2)}}},
		{"removed field", rec(`{"name":"a","type":"int"},{"name":"gone","type":{"type":"map","values":"string"}}`), rec(`{"name":"a","type":"int"}`),
			map[string]any{"a": int32(1), "gone": map[string]any{"k": "v"}}, map[string]any{"a": int32(1)}},
		{"fields reordered", rec(`{"name":"a","type":"int"},{"name":"b","type":"string"}`), rec(`{"name":"b","type":"string"},{"name":"a","type":"int"}`),
			map[string]any{"a": int32(1), "b": "x"}, map[string]any{"a": int32(1), "b": "x"}},
		{"int to long", `"int"`, `"long"`, int32(7), int64(7)},
		{"int to double", `"int"`, `"double"`, int32(-7), float64(-7)},
		{"long to float", `"long"`, `"float"`, int64(3), float32(3)},
		{"float to double", `"float"`, `"double"`, float32(1.5), float64(1.5)},
		{"string to bytes", `"string"`, `"bytes"`, "héllo", []byte("héllo")},
		{"bytes to string", `"bytes"`, `"string"`, []byte("abc"), "abc"},
		{"int field to long", rec(`{"name":"n","type":"int"}`), rec(`{"name":"n","type":"long"}`),
			map[string]any{"n": int32(5)}, map[string]any{"n": int64(5)}},
		{"enum symbol kept", `{"type":"enum","name":"Suit","symbols":["A","B","C"]}`, `{"type":"enum","name":"Suit","symbols":["C","A","B","D"]}`, "B", "B"},
		{"enum symbol removed, reader's default", `{"type":"enum","name":"Suit","symbols":["A","B","C"]}`, `{"type":"enum","name":"Suit","symbols":["A","B","X"],"default":"X"}`, "C", "X"},
		{"into a union", `"int"`, `["null","string","long"]`, int32(4), map[string]any{"long": int64(4)}},
		{"first matching branch", `"int"`, `["null","long","int"]`, int32(4), map[string]any{"long": int64(4)}},
		{"union to union", `["null","int","string"]`, `["string","null","long"]`, map[string]any{"int": int32(4)}, map[string]any{"long": int64(4)}},
		{"union null", `["null","int"]`, `["long","null"]`, nil, nil},
		{"union to a non-union", `["int","long"]`, `"double"`, map[string]any{"int": int32(2)}, float64(2)},
		{"nested record", rec(`{"name":"in","type":{"type":"record","name":"In","fields":[{"name":"x","type":"int"},{"name":"old","type":"string"}]}}`),
			rec(`{"name":"in","type":{"type":"record","name":"In","fields":[{"name":"x","type":"double"},{"name":"new","type":"boolean","default":true}]}}`),
			map[string]any{"in": map[string]any{"x": int32(2), "old": "o"}}, map[string]any{"in": map[string]any{"x": float64(2), "new": true}}},
		{"array of records", `{"type":"array","items":` + rec(`{"name":"a","type":"int"},{"name":"b","type":"string"}`) + `}`,
			`{"type":"array","items":` + rec(`{"name":"a","type":"long"},{"name":"c","type":["null","string"],"default":null}`) + `}`,
			[]any{map[string]any{"a": int32(1), "b": "x"}, map[string]any{"a": int32(2), "b": "y"}},
			[]any{map[string]any{"a": int64(1), "c": nil}, map[string]any{"a": int64(2), "c": nil}}},
		{"map of records", `{"type":"map","values":` + rec(`{"name":"a","type":"float"}`) + `}`,
			`{"type":"map","values":` + rec(`{"name":"a","type":"double"},{"name":"d","type":"int","default":3}`) + `}`,
			map[string]any{"k": map[string]any{"a": float32(0.5)}}, map[string]any{"k": map[string]any{"a": float64(0.5), "d": int32(3)}}},
		{"record renamed, field renamed, by aliases", rec(`{"name":"a","type":"int"}`),
			`{"type":"record","name":"S","aliases":["R"],"namespace":"kord.test","fields":[{"name":"z","aliases":["a"],"type":"int"}]}`,
			map[string]any{"a": int32(9)}, map[string]any{"z": int32(9)}},
		{"record in a union renamed", `["null",` + rec(`{"name":"a","type":"int"}`) + `]`,
			`["null",{"type":"record","name":"S","namespace":"kord.v2","aliases":["R"],"fields":[{"name":"a","type":"long"}]}]`,
			map[string]any{"kord.test.R": map[string]any{"a": int32(1)}}, map[string]any{"kord.v2.S": map[string]any{"a": int64(1)}}},
		{"recursive record", `{"type":"record","name":"L","fields":[{"name":"v","type":"int"},{"name":"next","type":["null","L"]}]}`,
			`{"type":"record","name":"L","fields":[{"name":"v","type":"long"},{"name":"next","type":["null","L"]}]}`,
			map[string]any{"v": int32(1), "next": map[string]any{"L": map[string]any{"v": int32(2), "next": nil}}},
			map[string]any{"v": int64(1), "next": map[string]any{"L": map[string]any{"v": int64(2), "next": nil}}}},
		{"union field default", rec(`{"name":"a","type":"int"}`), rec(`{"name":"a","type":"int"},{"name":"u","type":["string","null"],"default":"d"}`),
			map[string]any{"a": int32(1)}, map[string]any{"a": int32(1), "u": map[string]any{"string": "d"}}},
		{"bytes and record defaults", rec(`{"name":"a","type":"int"}`),
			rec(`{"name":"a","type":"int"},{"name":"b","type":"bytes","default":"\u00ff\u0001"},{"name":"r","type":{"type":"record","name":"P","fields":[{"name":"x","type":"int"},{"name":"y","type":"int","default":2}]},"default":{"x":1}}`),
			map[string]any{"a": int32(1)}, map[string]any{"a": int32(1), "b": []byte{0xff, 1}, "r": map[string]any{"x": int32(1), "y": int32(2)}}},
		{"logical type defaults", rec(`{"name":"a","type":"int"}`),
			rec(`{"name":"a","type":"int"},{"name":"ts","type":{"type":"long","logicalType":"timestamp-millis"},"default":1500},{"name":"d","type":{"type":"int","logicalType":"date"},"default":2}`),
			map[string]any{"a": int32(1)}, map[string]any{"a": int32(1), "ts": time.UnixMilli(1500).UTC(), "d": time.Date(1970, 1, 3, 0, 0, 0, 0, time.UTC)}},
		{"logical type kept", rec(`{"name":"ts","type":{"type":"long","logicalType":"timestamp-millis"}},{"name":"x","type":"int"}`),
			rec(`{"name":"ts","type":{"type":"long","logicalType":"timestamp-millis"}},{"name":"x","type":"long"}`),
			map[string]any{"ts": time.UnixMilli(1500).UTC(), "x": int32(1)}, map[string]any{"ts": time.UnixMilli(1500).UTC(), "x": int64(1)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, readAs(t, tc.writer, tc.reader, tc.in))
		})
	}
}

func TestResolveRefused(t *testing.T) {
	for _, tc := range []struct {
		name           string
		writer, reader string
		path, reason   string
	}{
		{"added field without a default", rec(`{"name":"a","type":"int"}`), rec(`{"name":"a","type":"int"},{"name":"b","type":"string"}`),
			"b", `the checkpoint's record kord.test.R has no field "b", and this code's kord.test.R gives it no default`},
		{"string as int", rec(`{"name":"age","type":"string"}`), rec(`{"name":"age","type":"int"}`), "age", "string cannot be read as int"},
		{"long as int", `"long"`, `"int"`, "", "long cannot be read as int"},
		{"double as float", `"double"`, `"float"`, "", "double cannot be read as float"},
		{"removed enum symbol without a default", `{"type":"enum","name":"Suit","symbols":["A","B","C"]}`, `{"type":"enum","name":"Suit","symbols":["A","B"]}`,
			"", `symbol "C" of enum Suit is not in this code's enum Suit, which has no default`},
		{"record renamed without an alias", rec(`{"name":"a","type":"int"}`), `{"type":"record","name":"S","fields":[{"name":"a","type":"int"}]}`,
			"", "record kord.test.R cannot be read as record S"},
		{"a union branch the reader lacks", rec(`{"name":"u","type":["null","int","string"]}`), rec(`{"name":"u","type":["null","long"]}`),
			"u", "string cannot be read as any branch of union [null, long]"},
		{"deep in an array of records", `{"type":"array","items":` + rec(`{"name":"a","type":"boolean"}`) + `}`,
			`{"type":"array","items":` + rec(`{"name":"a","type":"string"}`) + `}`, "[].a", "boolean cannot be read as string"},
		{"deep in a map", rec(`{"name":"m","type":{"type":"map","values":"bytes"}}`), rec(`{"name":"m","type":{"type":"map","values":"int"}}`),
			"m{}", "bytes cannot be read as int"},
		{"fixed resized", `{"type":"fixed","name":"F","size":4}`, `{"type":"fixed","name":"F","size":8}`, "", "fixed F cannot be read as fixed F"},
		{"a logical type changed", `{"type":"long","logicalType":"timestamp-millis"}`, `{"type":"long","logicalType":"timestamp-micros"}`,
			"", "long (timestamp-millis) cannot be read as long (timestamp-micros) (a change of logical type)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := serde.AvroNative(tc.reader)
			require.NoError(t, err)
			_, _, err = r.(serde.Resolver[any]).Resolve(tc.writer)
			var re *serde.ResolveError
			require.True(t, errors.As(err, &re), "%v", err)
			require.Equal(t, tc.path, re.Path)
			require.Equal(t, tc.reason, re.Reason)
		})
	}
}

// The typed serde reads a resolved value into its Go type.
func TestResolveTyped(t *testing.T) {
	type v1 struct {
		User  string `json:"user"`
		Count int32  `json:"count"`
		Old   string `json:"old"`
	}
	type v2 struct {
		User   string  `json:"user"`
		Count  int64   `json:"count"`
		Region string  `json:"region"`
		Score  float64 `json:"score"`
	}
	s1 := rec(`{"name":"user","type":"string"},{"name":"count","type":"int"},{"name":"old","type":"string"}`)
	s2 := rec(`{"name":"user","type":"string"},{"name":"count","type":"long"},{"name":"region","type":"string","default":"eu"},{"name":"score","type":"double","default":0.5}`)
	w, err := serde.Avro[v1](s1)
	require.NoError(t, err)
	r, err := serde.Avro[v2](s2)
	require.NoError(t, err)
	b, err := w.Encode(nil, v1{User: "u", Count: 3, Old: "x"})
	require.NoError(t, err)
	fp, dec, err := r.(serde.Resolver[v2]).Resolve(w.(serde.Resolver[v1]).WriterSchema())
	require.NoError(t, err)
	require.Equal(t, w.Fingerprint(), fp)
	got, err := dec(b)
	require.NoError(t, err)
	require.Equal(t, v2{User: "u", Count: 3, Region: "eu", Score: 0.5}, got)

	// The same schema resolves to the plain decoder; its fingerprint is
	// the reader's.
	fp, dec, err = r.(serde.Resolver[v2]).Resolve(s2)
	require.NoError(t, err)
	require.Equal(t, r.Fingerprint(), fp)
	b, err = r.Encode(nil, got)
	require.NoError(t, err)
	again, err := dec(b)
	require.NoError(t, err)
	require.Equal(t, got, again)

	// Bytes that are not the writer's fail to decode, naming both.
	_, err = dec([]byte{0xff})
	require.Error(t, err)
	_, dec, err = r.(serde.Resolver[v2]).Resolve(s1)
	require.NoError(t, err)
	_, err = dec([]byte{0xff})
	require.ErrorContains(t, err, "read as "+r.Fingerprint())

	// The writer schema is the schema as given, compact, with its
	// defaults: not its canonical form.
	require.Contains(t, r.(serde.Resolver[v2]).WriterSchema(), `"default":"eu"`)
	require.NotContains(t, r.(serde.Resolver[v2]).WriterSchema(), "\n")
}

// FuzzAvroResolve: a resolved decoder never panics on bytes that are not
// an encoding under the writer's schema, and reads what is one. The
// schemas have no arrays or maps, as FuzzAvroDecode's.
func FuzzAvroResolve(f *testing.F) {
	writer := rec(`{"name":"s","type":"string"},{"name":"n","type":["null","int"]},{"name":"e","type":{"type":"enum","name":"E","symbols":["A","B"]}},{"name":"gone","type":"float"}`)
	reader := rec(`{"name":"s","type":"bytes"},{"name":"n","type":["null","double"]},{"name":"e","type":{"type":"enum","name":"E","symbols":["A"],"default":"A"}},{"name":"added","type":"long","default":4}`)
	w, err := serde.AvroNative(writer)
	require.NoError(f, err)
	type typed struct {
		N map[string]float64 `json:"n"`
		E string             `json:"e"`
		A int64              `json:"added"`
	}
	r, err := serde.Avro[typed](reader)
	require.NoError(f, err)
	_, dec, err := r.(serde.Resolver[typed]).Resolve(writer)
	require.NoError(f, err)
	b, err := w.Encode(nil, map[string]any{"s": "x", "n": map[string]any{"int": int32(3)}, "e": "B", "gone": float32(1)})
	require.NoError(f, err)
	got, err := dec(b)
	require.NoError(f, err)
	require.Equal(f, typed{N: map[string]float64{"double": 3}, E: "A", A: 4}, got)
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = dec(b)
	})
}
