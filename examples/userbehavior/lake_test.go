package main

import (
	"fmt"
	"path/filepath"
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

// requireLakeNoDuplicate reads the lake as it is now, between kills, with
// DuckDB: whatever is visible to the glob reads whole and holds no result
// twice (a checkpoint's files may be half published, never published
// twice, and a staged file is never matched).
func requireLakeNoDuplicate(t *testing.T, dir string) {
	t.Helper()
	if files, _ := filepath.Glob(dir + "/*/*.parquet"); len(files) == 0 {
		return
	}
	rows := duckdb.Query(t, fmt.Sprintf(`SELECT count(*) AS n, count(DISTINCT uuid || '/' || seq) AS distinct_results FROM %s`,
		duckdb.ReadParquet(dir+"/*/*.parquet")))
	require.Len(t, rows, 1)
	require.Equal(t, fmt.Sprint(rows[0]["distinct_results"]), fmt.Sprint(rows[0]["n"]), "a result visible twice in the lake: %v", rows[0])
}
