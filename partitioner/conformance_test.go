package partitioner

import (
	"bufio"
	"encoding/hex"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The vectors in testdata/ are written by the real kafka-clients jar
// (scripts/gen-vectors.sh); they are never edited by hand.

// vectorPartitionCounts are the partition counts of murmur2.tsv's p columns.
var vectorPartitionCounts = []int{1, 2, 3, 7, 12, 100, 1000}

type murmur2Vector struct {
	line       int
	class      string
	key        []byte
	hash       int32
	partitions []int32 // one per vectorPartitionCounts
}

func loadMurmur2Vectors(tb testing.TB) []murmur2Vector {
	tb.Helper()
	var out []murmur2Vector
	forEachVectorLine(tb, "testdata/murmur2.tsv", func(line int, f []string) {
		require.Len(tb, f, 3+len(vectorPartitionCounts), "murmur2.tsv line %d", line)
		key, err := hex.DecodeString(f[1])
		require.NoError(tb, err, "murmur2.tsv line %d", line)
		v := murmur2Vector{line: line, class: f[0], key: key, hash: atoi32(tb, f[2], line)}
		for _, s := range f[3:] {
			v.partitions = append(v.partitions, atoi32(tb, s, line))
		}
		out = append(out, v)
	})
	return out
}

func forEachVectorLine(tb testing.TB, path string, fn func(line int, fields []string)) {
	tb.Helper()
	f, err := os.Open(path)
	require.NoError(tb, err, "conformance vectors missing; regenerate with scripts/gen-vectors.sh")
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	n := 0
	for sc.Scan() {
		n++
		text := sc.Text()
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		fn(n, strings.Split(text, "\t"))
	}
	require.NoError(tb, sc.Err())
}

func atoi32(tb testing.TB, s string, line int) int32 {
	n, err := strconv.ParseInt(s, 10, 32)
	require.NoError(tb, err, "line %d", line)
	return int32(n)
}

func TestConformanceMurmur2(t *testing.T) {
	vs := loadMurmur2Vectors(t)
	require.GreaterOrEqual(t, len(vs), 5000)
	classes := map[string]int{}
	for _, v := range vs {
		classes[v.class]++
		require.Equal(t, v.hash, Murmur2(v.key), "line %d: murmur2(%x)", v.line, v.key)
		for i, n := range vectorPartitionCounts {
			require.Equal(t, v.partitions[i], KeyPartition(v.key, n), "line %d: key %x, %d partitions", v.line, v.key, n)
			// Every kord partitioner places keyed records by the same rule.
			require.Equal(t, v.partitions[i], NewLegacy().Partition("t", v.key, n, []int32{0}), "line %d", v.line)
		}
	}
	for _, c := range []string{"empty", "high", "binary", "text", "uuid", "decimal"} {
		require.NotZero(t, classes[c], "no %s keys in murmur2.tsv", c)
	}
}

func TestConformanceRoundRobin(t *testing.T) {
	var r *RoundRobin
	calls := 0
	forEachVectorLine(t, "testdata/roundrobin.tsv", func(line int, f []string) {
		if len(f) == 1 && f[0] == "reset" {
			r = NewRoundRobin()
			return
		}
		require.Len(t, f, 5, "roundrobin.tsv line %d", line)
		require.NotNil(t, r, "roundrobin.tsv line %d before the first reset", line)
		n, err := strconv.Atoi(f[1])
		require.NoError(t, err)
		var avail []int32
		if f[2] != "-" {
			for _, s := range strings.Split(f[2], ",") {
				avail = append(avail, atoi32(t, s, line))
			}
		}
		var key []byte
		if f[3] != "null" {
			key, err = hex.DecodeString(f[3])
			require.NoError(t, err)
		}
		require.Equal(t, atoi32(t, f[4], line), r.Partition(f[0], key, n, avail), "roundrobin.tsv line %d", line)
		calls++
	})
	require.GreaterOrEqual(t, calls, 3000)
}
