package main

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kordproject/kord/internal/rig/duckdb"
)

// requireLakeByDuckDB reads the lake with DuckDB, a reader no one here
// wrote, through the glob a user would give it: every event's result
// exactly once, with a count of seq+1, in its action's directory.
func requireLakeByDuckDB(t *testing.T, dir string, events int) {
	t.Helper()
	rows := duckdb.Query(t, fmt.Sprintf(`SELECT count(*) AS n, count(DISTINCT uuid || '/' || seq) AS distinct_results,
		count(*) FILTER (WHERE count != seq + 1) AS wrong_counts,
		count(*) FILTER (WHERE filename NOT LIKE '%%/action=' || action || '/%%') AS misplaced
		FROM %s`, duckdb.ReadParquet(dir+"/*/*.parquet", "filename = true")))
	require.Len(t, rows, 1)
	r := rows[0]
	want := fmt.Sprint(events)
	require.Equal(t, want, fmt.Sprint(r["n"]), "rows in the lake: %v", r)
	require.Equal(t, want, fmt.Sprint(r["distinct_results"]), "distinct results in the lake: %v", r)
	require.Equal(t, "0", fmt.Sprint(r["wrong_counts"]), "%v", r)
	require.Equal(t, "0", fmt.Sprint(r["misplaced"]), "%v", r)
}
