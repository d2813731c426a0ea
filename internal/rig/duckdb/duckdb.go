// Package duckdb reads files back for tests with readers independent of
// the Go libraries that wrote them: DuckDB (Parquet, JSON lines, plain or
// Zstandard-compressed) and fastavro (Avro object container files: DuckDB
// reads Avro only through its avro extension, which it downloads from
// DuckDB's own site at INSTALL, out of reach here), run by the python that
// KORD_DUCKDB_PYTHON names. scripts/duckdb.sh installs them in a
// virtualenv and prints that python; scripts/test.sh sets both variables.
//
// Without KORD_DUCKDB_PYTHON a test that reads through this package is
// skipped, or fails when KORD_REQUIRE_DUCKDB=1, so that CI cannot pass
// without the independent reads.
//
// Values come back as JSON does: numbers as json.Number (an int64 keeps
// every digit), strings, bools, nil, nested maps and lists. Python turns
// what JSON has no form for into text with str(): DuckDB's timestamps,
// dates and decimals, fastavro's datetimes; bytes become base64, and a
// float NaN or infinity its str().
package duckdb

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// Env names the environment variables the package reads.
const (
	EnvPython  = "KORD_DUCKDB_PYTHON"
	EnvRequire = "KORD_REQUIRE_DUCKDB"
)

// Python is the python of KORD_DUCKDB_PYTHON. Without it, the test is
// skipped, or fails when KORD_REQUIRE_DUCKDB=1.
func Python(t testing.TB) string {
	t.Helper()
	p := os.Getenv(EnvPython)
	if p == "" {
		if os.Getenv(EnvRequire) == "1" {
			t.Fatalf("%s is not set and %s=1: run scripts/duckdb.sh and set %s to the python it prints", EnvPython, EnvRequire, EnvPython)
		}
		t.Skipf("%s is not set (scripts/duckdb.sh prints one)", EnvPython)
	}
	return p
}

// prelude is the start of every program: conv makes a value JSON.
const prelude = `
import base64, json, math, sys

def conv(v):
    if v is None or isinstance(v, (bool, int, str)):
        return v
    if isinstance(v, float):
        return v if math.isfinite(v) else str(v)
    if isinstance(v, dict):
        return {str(k): conv(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [conv(x) for x in v]
    if isinstance(v, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(v)).decode()
    return str(v)

def emit(row):
    sys.stdout.write(json.dumps(conv(row), allow_nan=False) + "\n")
`

// Run runs a Python program (after a prelude defining conv, which makes a
// value JSON, and emit, which prints one as a line) with args as
// sys.argv[1:], and returns the JSON lines it printed, each an object. A
// program that fails fails the test with what it wrote on stderr.
func Run(t testing.TB, program string, args ...string) []map[string]any {
	t.Helper()
	py := Python(t)
	cmd := exec.Command(py, append([]string{"-c", prelude + program}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("duckdb rig: %s: %v\n%s", py, err, strings.TrimSpace(stderr.String()))
	}
	var rows []map[string]any
	dec := json.NewDecoder(&stdout)
	dec.UseNumber()
	for {
		var row map[string]any
		err := dec.Decode(&row)
		if errors.Is(err, io.EOF) {
			return rows
		}
		if err != nil {
			t.Fatalf("duckdb rig: reading the program's output: %v", err)
		}
		rows = append(rows, row)
	}
}

// query runs argv[1] in a new in-memory DuckDB, its time zone UTC.
const query = `
import duckdb
try:
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    cur = con.execute(sys.argv[1])
    cols = [d[0] for d in cur.description]
    for r in cur.fetchall():
        emit(dict(zip(cols, r)))
except duckdb.Error as e:
    sys.stderr.write(type(e).__name__ + ": " + str(e) + "\n")
    sys.exit(1)
`

// Query runs sql in a new in-memory DuckDB (time zone UTC) and returns its
// rows, each a map from column name to value; DuckDB's error fails the
// test.
func Query(t testing.TB, sql string) []map[string]any {
	t.Helper()
	return Run(t, query, sql)
}

// ReadParquet is the table function reading the Parquet files that glob
// matches: read_parquet('glob', options...), each option SQL as
// read_parquet takes it ("file_row_number = true").
func ReadParquet(glob string, options ...string) string {
	return "read_parquet(" + strings.Join(append([]string{Quote(glob)}, options...), ", ") + ")"
}

// ReadJSON is the table function reading the JSON lines files that glob
// matches: read_json('glob', format = 'newline_delimited', options...),
// each option SQL as read_json takes it ("columns = {a: 'BIGINT'}").
// DuckDB decompresses files ending in .zst or .gz; it reads no Snappy (see
// Unsnappy).
func ReadJSON(glob string, options ...string) string {
	return "read_json(" + strings.Join(append([]string{Quote(glob), "format = 'newline_delimited'"}, options...), ", ") + ")"
}

// Quote is s as an SQL string literal: in single quotes, each single
// quote in s doubled.
func Quote(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// unsnappy decompresses argv[1], a stream in Snappy's framing format, into
// argv[2], with cramjam.
const unsnappy = `
import cramjam
with open(sys.argv[1], "rb") as f:
    data = bytes(cramjam.snappy.decompress(f.read()))
with open(sys.argv[2], "wb") as f:
    f.write(data)
`

// Unsnappy decompresses the file src, in Snappy's framing format, into the
// file dst, with cramjam (the snappy of python-snappy and fastavro),
// since DuckDB reads no Snappy stream.
func Unsnappy(t testing.TB, src, dst string) {
	t.Helper()
	Run(t, unsnappy, src, dst)
}

// AvroFile is an Avro object container file as fastavro read it.
type AvroFile struct {
	Path   string
	Codec  string         // the header's avro.codec: "null", "snappy", "zstandard", ...
	Schema map[string]any // the writer's schema, as fastavro parsed it
	Rows   []map[string]any
}

// readAvro reads each file argv[1] matches with fastavro: a line for each
// file, then a line for each of its rows.
const readAvro = `
import glob, fastavro
files = sorted(glob.glob(sys.argv[1]))
if not files:
    sys.stderr.write("no file matches " + sys.argv[1] + "\n")
    sys.exit(1)
for path in files:
    with open(path, "rb") as f:
        r = fastavro.reader(f)
        rows = list(r)
        emit({"path": path, "codec": r.codec, "schema": r.writer_schema, "rows": len(rows)})
        for row in rows:
            emit({"row": row})
`

// ReadAvro reads the Avro object container files that glob matches, in
// name order, with fastavro; a file it cannot read fails the test.
func ReadAvro(t testing.TB, glob string) []AvroFile {
	t.Helper()
	var files []AvroFile
	for _, line := range Run(t, readAvro, glob) {
		if row, ok := line["row"]; ok {
			f := &files[len(files)-1]
			f.Rows = append(f.Rows, row.(map[string]any))
			continue
		}
		schema, _ := line["schema"].(map[string]any)
		files = append(files, AvroFile{Path: line["path"].(string), Codec: line["codec"].(string), Schema: schema})
	}
	return files
}
