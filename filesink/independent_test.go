package filesink

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/linkedin/goavro/v2"

	"github.com/kordproject/kord/internal/rig/duckdb"
)

// The independent reader tests: files written by each format and
// compression are read back by readers that share no code with the Go
// libraries that wrote them (internal/rig/duckdb): DuckDB for Parquet and
// JSON lines (framed Snappy decompressed by cramjam first), fastavro for
// Avro. Every row and column must come back.

// indep is a row as an independent reader gives it, in Go's types: the
// time in microseconds since 1970 (Parquet's timestamp, or DuckDB parsing
// the JSON text), or as Avro's text (fastavro does not parse a string).
type indep struct {
	Name   string
	Count  int64
	Score  float64
	OK     bool
	AtUS   int64
	AtText string
	City   string
	Zip    int64
}

func want(es []event, text bool) []indep {
	out := make([]indep, len(es))
	for i, e := range es {
		out[i] = indep{Name: e.Name, Count: e.Count, Score: e.Score, OK: e.OK, City: e.Where.City, Zip: e.Where.Zip}
		if text {
			out[i].AtText = e.At.Format(time.RFC3339Nano)
		} else {
			out[i].AtUS = e.At.UnixMicro()
		}
	}
	return out
}

// fromRow converts a reader's row (flat: name, count, score, ok, at_us or
// at, city, zip) to an indep, failing on a missing column or a value of
// another type.
func fromRow(t *testing.T, i int, r map[string]any) indep {
	t.Helper()
	get := func(col string) any {
		v, ok := r[col]
		if !ok {
			t.Fatalf("row %d has no column %q: %v", i, col, r)
		}
		return v
	}
	str := func(col string) string {
		s, ok := get(col).(string)
		if !ok {
			t.Fatalf("row %d: %s is %T %v, want a string", i, col, r[col], r[col])
		}
		return s
	}
	num := func(col string) json.Number {
		n, ok := get(col).(json.Number)
		if !ok {
			t.Fatalf("row %d: %s is %T %v, want a number", i, col, r[col], r[col])
		}
		return n
	}
	i64 := func(col string) int64 {
		v, err := strconv.ParseInt(string(num(col)), 10, 64)
		if err != nil {
			t.Fatalf("row %d: %s: %v", i, col, err)
		}
		return v
	}
	f64 := func(col string) float64 {
		v, err := strconv.ParseFloat(string(num(col)), 64)
		if err != nil {
			t.Fatalf("row %d: %s: %v", i, col, err)
		}
		return v
	}
	ok, isBool := get("ok").(bool)
	if !isBool {
		t.Fatalf("row %d: ok is %T %v, want a bool", i, r["ok"], r["ok"])
	}
	x := indep{Name: str("name"), Count: i64("count"), Score: f64("score"), OK: ok, City: str("city"), Zip: i64("zip")}
	if _, text := r["at"]; text {
		x.AtText = str("at")
	} else {
		x.AtUS = i64("at_us")
	}
	if len(r) != 7 {
		t.Fatalf("row %d has columns %v, want 7", i, r)
	}
	return x
}

func fromNumber(t *testing.T, v any) int64 {
	t.Helper()
	n, ok := v.(json.Number)
	if !ok {
		t.Fatalf("%T %v, want a number", v, v)
	}
	i, err := n.Int64()
	if err != nil {
		t.Fatal(err)
	}
	return i
}

func equalIndep(t *testing.T, rows []map[string]any, want []indep) {
	t.Helper()
	if len(rows) != len(want) {
		t.Fatalf("%d rows read back, want %d", len(rows), len(want))
	}
	for i, r := range rows {
		if got := fromRow(t, i, r); !reflect.DeepEqual(got, want[i]) {
			t.Fatalf("row %d:\n got %+v\nwant %+v", i, got, want[i])
		}
	}
}

// writeFile writes rows into dir/name+ext with f.
func writeFile[T any](t *testing.T, f Format[T], dir, name string, rows []T) string {
	t.Helper()
	path := filepath.Join(dir, name+f.Ext())
	if err := os.WriteFile(path, write(t, f, rows), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// Each test writes two files: part-0 with the format's defaults, part-1
// with small Avro blocks and Parquet row groups (many in a file).
const (
	part0Rows = 2000
	part1Rows = 3000
)

func TestIndependentParquet(t *testing.T) {
	duckdb.Python(t)
	for _, c := range []Compression{Uncompressed, Snappy, Zstd} {
		t.Run(c.String(), func(t *testing.T) {
			dir, rows := t.TempDir(), events(part0Rows+part1Rows)
			writeFile(t, Parquet[event](c), dir, "part-0", rows[:part0Rows])
			small := Parquet[event](c).(parquetFormat[event])
			small.rowGroupBytes = 16 << 10
			writeFile[event](t, small, dir, "part-1", rows[part0Rows:])
			glob := filepath.Join(dir, "*.parquet")

			got := duckdb.Query(t, `SELECT name, count, score, ok, epoch_us("at") AS at_us, "where".city AS city, "where".zip AS zip FROM `+
				duckdb.ReadParquet(glob, "filename = true", "file_row_number = true")+` ORDER BY filename, file_row_number`)
			// filename and file_row_number are not selected: ORDER BY
			// may use them all the same.
			equalIndep(t, got, want(rows, false))

			// The columns' types and codec, as DuckDB reads the footer.
			meta := duckdb.Query(t, `SELECT DISTINCT path_in_schema AS col, type, compression FROM parquet_metadata(`+duckdb.Quote(glob)+`) ORDER BY col`)
			wantCodec := map[Compression]string{Uncompressed: "UNCOMPRESSED", Snappy: "SNAPPY", Zstd: "ZSTD"}[c]
			wantType := map[string]string{"name": "BYTE_ARRAY", "count": "INT64", "score": "DOUBLE", "ok": "BOOLEAN", "at": "INT64", "where, city": "BYTE_ARRAY", "where, zip": "INT64"}
			for _, m := range meta {
				col := m["col"].(string)
				if m["compression"] != wantCodec || m["type"] != wantType[col] {
					t.Errorf("column %s: %v %v, want %s %s", col, m["type"], m["compression"], wantType[col], wantCodec)
				}
			}
			if len(meta) != len(wantType) {
				t.Errorf("columns %v, want %d", meta, len(wantType))
			}
			groups := duckdb.Query(t, `SELECT file_name AS f, count(DISTINCT row_group_id) AS n FROM parquet_metadata(`+duckdb.Quote(glob)+`) GROUP BY f ORDER BY f`)
			if len(groups) != 2 || fmt.Sprint(groups[0]["n"]) != "1" || fromNumber(t, groups[1]["n"]) < 5 {
				t.Errorf("row groups per file: %v, want 1 and many", groups)
			}
		})
	}
}

// jsonColumns declares read_json's columns, so that a value of another
// type is an error rather than a column of a wider type.
const jsonColumns = `columns = {name: 'VARCHAR', count: 'BIGINT', score: 'DOUBLE', ok: 'BOOLEAN', "at": 'VARCHAR', "where": 'STRUCT(city VARCHAR, zip BIGINT)'}`

// queryJSON reads the JSON lines files in dir with DuckDB, framed Snappy
// decompressed by cramjam first.
func queryJSON(t *testing.T, c Compression, dir string) []map[string]any {
	t.Helper()
	f := JSONLines[event](c)
	glob := filepath.Join(dir, "*"+f.Ext())
	if c == Snappy {
		plain := t.TempDir()
		files, err := filepath.Glob(glob)
		if err != nil || len(files) == 0 {
			t.Fatalf("no %s: %v", glob, err)
		}
		for _, p := range files {
			duckdb.Unsnappy(t, p, filepath.Join(plain, strings.TrimSuffix(filepath.Base(p), ".sz")))
		}
		glob = filepath.Join(plain, "*.jsonl")
	}
	// DuckDB parses the RFC 3339 text itself: at_us is its reading of
	// the time. Without ORDER BY (DuckDB's sort is not stable, and a line
	// has no number), rows come in the files' order, by name, and the
	// lines' order within each (DuckDB's preserve_insertion_order, on by
	// default).
	return duckdb.Query(t, `SELECT name, count, score, ok, epoch_us(CAST("at" AS TIMESTAMPTZ)) AS at_us, "where".city AS city, "where".zip AS zip FROM `+
		duckdb.ReadJSON(glob, jsonColumns))
}

func TestIndependentJSONLines(t *testing.T) {
	duckdb.Python(t)
	for _, c := range []Compression{Uncompressed, Snappy, Zstd} {
		t.Run(c.String(), func(t *testing.T) {
			dir, rows := t.TempDir(), events(part0Rows+part1Rows)
			writeFile(t, JSONLines[event](c), dir, "part-0", rows[:part0Rows])
			writeFile(t, JSONLines[event](c), dir, "part-1", rows[part0Rows:])
			equalIndep(t, queryJSON(t, c, dir), want(rows, false))
		})
	}
}

func TestIndependentAvro(t *testing.T) {
	duckdb.Python(t)
	for _, c := range []Compression{Uncompressed, Snappy, Zstd} {
		t.Run(c.String(), func(t *testing.T) {
			dir, rows := t.TempDir(), events(part0Rows+part1Rows)
			writeFile(t, mustAvro(t, c), dir, "part-0", rows[:part0Rows])
			small := mustAvro(t, c).(avroFormat[event])
			small.blockBytes = 4 << 10
			writeFile[event](t, small, dir, "part-1", rows[part0Rows:])

			files := duckdb.ReadAvro(t, filepath.Join(dir, "*.avro"))
			if len(files) != 2 {
				t.Fatalf("fastavro read %d files, want 2", len(files))
			}
			var got []map[string]any
			for _, f := range files {
				if f.Codec != avroCodecs[c] {
					t.Errorf("%s: codec %q, want %q", f.Path, f.Codec, avroCodecs[c])
				}
				if f.Schema["name"] != "kord.test.Event" {
					t.Errorf("%s: schema %v", f.Path, f.Schema)
				}
				for _, r := range f.Rows {
					where, ok := r["where"].(map[string]any)
					if !ok {
						t.Fatalf("%s: where is %T", f.Path, r["where"])
					}
					flat := map[string]any{"city": where["city"], "zip": where["zip"]}
					for k, v := range r {
						if k != "where" {
							flat[k] = v
						}
					}
					got = append(got, flat)
				}
			}
			equalIndep(t, got, want(rows, true))
		})
	}
}

// TestIndependentEmpty: a file of no rows is a valid file of its format.
func TestIndependentEmpty(t *testing.T) {
	duckdb.Python(t)
	for _, c := range []Compression{Uncompressed, Snappy, Zstd} {
		t.Run(c.String(), func(t *testing.T) {
			dir := t.TempDir()
			writeFile(t, Parquet[event](c), dir, "empty", nil)
			if got := duckdb.Query(t, "SELECT count(*) AS n FROM "+duckdb.ReadParquet(filepath.Join(dir, "*.parquet"))); fmt.Sprint(got) != "[map[n:0]]" {
				t.Errorf("parquet: %v", got)
			}
			writeFile(t, mustAvro(t, c), dir, "empty", nil)
			if got := duckdb.ReadAvro(t, filepath.Join(dir, "*.avro")); len(got) != 1 || len(got[0].Rows) != 0 || got[0].Codec != avroCodecs[c] {
				t.Errorf("avro: %+v", got)
			}
			writeFile(t, JSONLines[event](c), dir, "empty", nil)
			if c != Snappy { // an empty framed Snappy stream is an empty file
				if got := queryJSON(t, c, dir); len(got) != 0 {
					t.Errorf("jsonl: %v", got)
				}
			}
		})
	}
}

// noted has an optional column: a pointer, null in JSON, an optional
// column in Parquet.
type noted struct {
	ID   int64   `json:"id" parquet:"id"`
	Note *string `json:"note" parquet:"note,optional"`
}

const notedSchema = `{"type": "record", "name": "Noted", "fields": [
  {"name": "id", "type": "long"}, {"name": "note", "type": ["null", "string"]}]}`

// TestIndependentOptional: nulls and values of an optional column, in
// Parquet and JSON lines from a struct's pointer field, in Avro from
// goavro's native form (a union's value as goavro.Union; serde.Avro's
// JSON route would need Avro's {"string": ...} shape).
func TestIndependentOptional(t *testing.T) {
	duckdb.Python(t)
	var rows []noted
	var natives []map[string]any
	for i := range 50 {
		r := noted{ID: int64(i)}
		var note any
		if i%3 != 0 {
			s := fmt.Sprintf("note %d", i)
			r.Note, note = &s, goavro.Union("string", s)
		}
		rows = append(rows, r)
		natives = append(natives, map[string]any{"id": int64(i), "note": note})
	}
	check := func(t *testing.T, got []map[string]any) {
		t.Helper()
		if len(got) != len(rows) {
			t.Fatalf("%d rows read back, want %d", len(got), len(rows))
		}
		for i, g := range got {
			want := map[string]any{"id": json.Number(strconv.Itoa(i)), "note": nil}
			if rows[i].Note != nil {
				want["note"] = *rows[i].Note
			}
			if !reflect.DeepEqual(g, want) {
				t.Fatalf("row %d: %v, want %v", i, g, want)
			}
		}
	}
	for _, c := range []Compression{Uncompressed, Snappy, Zstd} {
		t.Run(c.String(), func(t *testing.T) {
			dir := t.TempDir()
			writeFile(t, Parquet[noted](c), dir, "part-0", rows)
			check(t, duckdb.Query(t, "SELECT id, note FROM "+duckdb.ReadParquet(filepath.Join(dir, "*.parquet"), "file_row_number = true")+" ORDER BY file_row_number"))

			f := JSONLines[noted](c)
			path := writeFile(t, f, dir, "part-0", rows)
			if c == Snappy {
				duckdb.Unsnappy(t, path, strings.TrimSuffix(path, ".sz"))
				path = strings.TrimSuffix(path, ".sz")
			}
			check(t, duckdb.Query(t, "SELECT id, note FROM "+duckdb.ReadJSON(path, `columns = {id: 'BIGINT', note: 'VARCHAR'}`)))

			a, err := Avro[map[string]any](notedSchema, c)
			if err != nil {
				t.Fatal(err)
			}
			writeFile(t, a, dir, "part-0", natives)
			files := duckdb.ReadAvro(t, filepath.Join(dir, "*.avro"))
			if len(files) != 1 {
				t.Fatalf("fastavro read %d files", len(files))
			}
			check(t, files[0].Rows)
		})
	}
}
