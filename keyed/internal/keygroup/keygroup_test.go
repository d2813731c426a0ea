package keygroup

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/kordproject/kord/internal/rig/uuids"
	"github.com/stretchr/testify/require"
)

// Pinned xxhash64 vectors, computed once with github.com/cespare/xxhash/v2
// v2.3.0 (the XXH64 of "" and "a" with seed 0 are the reference
// implementation's published values). A change here moves every key to
// another key group and breaks every checkpoint: it must never happen.
var keyGroupVectors = []struct {
	key     string
	hash    uint64
	kg128   int
	kg1000  int
	comment string
}{
	{"", 0xef46db3751d8e999, 25, 921, "empty key"},
	{"a", 0xd24ec4f1a98c6e5b, 91, 955, ""},
	{"kord", 0x858f683b938040d3, 83, 419, ""},
	{"user-42", 0x397e9d3a76af7c81, 1, 169, ""},
	{"3f2b8c1e-9d4a-4e6b-8f0a-1c2d3e4f5a6b", 0xd21145bfe47f9f3b, 59, 875, "uuid"},
}

func TestKeyGroupVectors(t *testing.T) {
	for _, v := range keyGroupVectors {
		require.Equal(t, int(v.hash%128), v.kg128, v.key)
		require.Equal(t, v.kg128, Of([]byte(v.key), 128), v.key)
		require.Equal(t, v.kg1000, Of([]byte(v.key), 1000), v.key)
		require.Equal(t, 0, Of([]byte(v.key), 1), v.key)
	}
	require.Equal(t, Of(nil, 128), Of([]byte{}, 128), "nil and empty keys are the same key")
}

func TestRangeForFlinkExamples(t *testing.T) {
	require.Equal(t, []Range{{0, 42}, {43, 85}, {86, 127}},
		[]Range{RangeFor(0, 128, 3), RangeFor(1, 128, 3), RangeFor(2, 128, 3)})
	require.Equal(t, Full(128), RangeFor(0, 128, 1))
	require.Equal(t, Range{5, 5}, RangeFor(5, 10, 10))
}

// TestKeyGroupAssignmentExhaustive checks, for every maxP up to 300 and
// every p <= maxP, that the instances' ranges are non-empty, contiguous,
// ascending and partition [0, maxP), and that OperatorIndex(kg) is the
// instance whose range holds kg.
func TestKeyGroupAssignmentExhaustive(t *testing.T) {
	for maxP := 1; maxP <= 300; maxP++ {
		for p := 1; p <= maxP; p++ {
			require.NoError(t, ValidateParallelism(p, maxP))
			next := 0
			for i := range p {
				r := RangeFor(i, maxP, p)
				if r.Start != next || r.Empty() {
					t.Fatalf("maxP %d p %d: instance %d has range %s, want a non-empty one starting at %d", maxP, p, i, r, next)
				}
				// Ranges differ in size by at most one.
				if l := r.Len(); l != maxP/p && l != (maxP+p-1)/p {
					t.Fatalf("maxP %d p %d: instance %d has %d key groups", maxP, p, i, l)
				}
				for kg := r.Start; kg <= r.End; kg++ {
					if got := OperatorIndex(kg, maxP, p); got != i {
						t.Fatalf("maxP %d p %d: OperatorIndex(%d) = %d, but instance %d's range %s holds it", maxP, p, kg, got, i, r)
					}
				}
				next = r.End + 1
			}
			if next != maxP {
				t.Fatalf("maxP %d p %d: ranges end at %d", maxP, p, next-1)
			}
		}
	}
}

func TestKeyGroupAssignmentLarge(t *testing.T) {
	// No overflow at the bound: kg*p and i*maxP reach 10^10.
	maxP := MaxParallelismLimit
	for _, p := range []int{1, 2, 3, 7, 1000, 32768, maxP - 1, maxP} {
		require.NoError(t, ValidateParallelism(p, maxP))
		next := 0
		for _, i := range []int{0, 1, p / 2, p - 2, p - 1} {
			if i < 0 || i >= p {
				continue
			}
			r := RangeFor(i, maxP, p)
			require.False(t, r.Empty())
			require.Equal(t, i, OperatorIndex(r.Start, maxP, p))
			require.Equal(t, i, OperatorIndex(r.End, maxP, p))
			if i == 0 {
				require.Equal(t, 0, r.Start)
			}
			if i == p-1 {
				require.Equal(t, maxP-1, r.End)
			}
			next = r.End + 1
		}
		require.Equal(t, maxP, next)
	}
}

func TestValidateParallelism(t *testing.T) {
	for _, c := range []struct {
		p, maxP int
		ok      bool
	}{
		{1, 1, true}, {1, 128, true}, {128, 128, true}, {129, 128, false}, {0, 128, false}, {-1, 128, false},
		{1, 0, false}, {1, MaxParallelismLimit, true}, {1, MaxParallelismLimit + 1, false},
	} {
		err := ValidateParallelism(c.p, c.maxP)
		require.Equal(t, c.ok, err == nil, "p %d maxP %d: %v", c.p, c.maxP, err)
	}
}

func TestPartitionedMode(t *testing.T) {
	maxP, err := PartitionedMaxParallelism(12)
	require.NoError(t, err)
	require.Equal(t, 12, maxP)
	require.Equal(t, 7, OfPartition(7))
	_, err = PartitionedMaxParallelism(0)
	require.Error(t, err)
	_, err = PartitionedMaxParallelism(MaxParallelismLimit + 1)
	require.Error(t, err)
	// Three source instances over 12 partitions own 4 partitions each, and
	// the keyed operator instance of each source owns the same range.
	require.Equal(t, Range{4, 7}, RangeFor(1, maxP, 3))
}

// TestKeyGroupUniform checks that 100,000 uuid keys spread over the key
// groups as a uniform draw would: Pearson's chi-square statistic within six
// standard deviations of its mean (k-1, standard deviation sqrt(2(k-1))).
// The keys come from a fixed seed, so the test is deterministic.
func TestKeyGroupUniform(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	keys := make([][]byte, 100_000)
	for i := range keys {
		keys[i] = []byte(uuids.V4(r))
	}
	for _, maxP := range []int{128, 1000, 4096} {
		counts := make([]int, maxP)
		for _, k := range keys {
			counts[Of(k, maxP)]++
		}
		expected := float64(len(keys)) / float64(maxP)
		chi2 := 0.0
		for _, c := range counts {
			d := float64(c) - expected
			chi2 += d * d / expected
		}
		df := float64(maxP - 1)
		bound := df + 6*math.Sqrt(2*df)
		t.Logf("maxP %d: chi-square %.1f (df %.0f, bound %.1f)", maxP, chi2, df, bound)
		require.Less(t, chi2, bound, "maxP %d", maxP)
	}
}

func BenchmarkKeyGroup(b *testing.B) {
	key := []byte("3f2b8c1e-9d4a-4e6b-8f0a-1c2d3e4f5a6b")
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		n += OperatorIndex(Of(key, 128), 128, 3)
	}
	_ = n
}
