package duckdb

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// TestQuery checks the reader is there and answers as documented: with
// KORD_REQUIRE_DUCKDB=1 this fails when it is missing.
func TestQuery(t *testing.T) {
	rows := Query(t, `SELECT 9223372036854775807 AS big, 'it''s' AS s, 0.1::DOUBLE AS f, true AS b, NULL AS n,
		DATE '2026-01-02' AS d, TIMESTAMPTZ '2026-01-02 03:04:05.123456+00' AS ts, {'a': [1, 2]} AS nested, 'NaN'::DOUBLE AS nan`)
	if len(rows) != 1 {
		t.Fatalf("rows = %v, want one", rows)
	}
	r := rows[0]
	want := map[string]any{
		"big": json.Number("9223372036854775807"), "s": "it's", "f": json.Number("0.1"), "b": true, "n": nil,
		"d": "2026-01-02", "ts": "2026-01-02 03:04:05.123456+00:00", "nan": "nan",
		"nested": map[string]any{"a": []any{json.Number("1"), json.Number("2")}},
	}
	for k, v := range want {
		if got, _ := json.Marshal(r[k]); string(got) != mustJSON(t, v) {
			t.Errorf("%s = %s, want %s", k, got, mustJSON(t, v))
		}
	}
}

func mustJSON(t *testing.T, v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestReadJSONQuotes(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "it's")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "a.jsonl"), []byte(`{"x": 1}`+"\n"+`{"x": 2}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	rows := Query(t, "SELECT sum(x) AS s FROM "+ReadJSON(filepath.Join(dir, "*.jsonl")))
	if len(rows) != 1 || rows[0]["s"] != json.Number("3") {
		t.Fatalf("rows = %v, want s 3", rows)
	}
}
