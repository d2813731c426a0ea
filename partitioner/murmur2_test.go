package partitioner

import (
	"encoding/binary"
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

// Kafka's own pinned murmur2 values (kafka-clients, UtilsTest.testMurmur2).
// The full conformance vectors from the real jar are in testdata/murmur2.tsv.
func TestMurmur2KafkaUtilsTestValues(t *testing.T) {
	for in, want := range map[string]int32{
		"21":                         -973932308,
		"foobar":                     -790332482,
		"a-little-bit-long-string":   -985981536,
		"a-little-bit-longer-string": -1486304829,
		"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
		"abc": 479470107,
	} {
		require.Equal(t, want, Murmur2([]byte(in)), "murmur2(%q)", in)
	}
}

func TestToPositiveIsNotAbs(t *testing.T) {
	require.Equal(t, int32(0), ToPositive(math.MinInt32))
	require.Equal(t, int32(math.MaxInt32), ToPositive(-1))
	require.Equal(t, int32(math.MaxInt32), ToPositive(math.MaxInt32))
	require.Equal(t, int32(0), ToPositive(0))
	require.Equal(t, int32(2147483647-41), ToPositive(-42))
}

func TestKeyPartitionEmptyKeyIsHashed(t *testing.T) {
	// murmur2 of zero bytes is a fixed value, not "no key".
	require.Equal(t, KeyPartition(nil, 1000), KeyPartition([]byte{}, 1000))
	require.Equal(t, int32(int64(ToPositive(Murmur2(nil)))%1000), KeyPartition([]byte{}, 1000))
}

func TestKeyPartitionRejectsNoPartitions(t *testing.T) {
	require.Equal(t, int32(-1), KeyPartition([]byte("k"), 0))
	require.Equal(t, int32(-1), KeyPartition([]byte("k"), -3))
}

// murmur2Reference is an independent formulation of Kafka's murmur2, written
// the way the Java source reads: signed 32-bit arithmetic emulated in int64
// with explicit wrapping, logical right shifts done on the unsigned bit
// pattern, and the tail folded by an explicit loop instead of a fallthrough
// switch. The fuzz test checks Murmur2 against it.
func murmur2Reference(data []byte) int32 {
	wrap := func(x int64) int64 { return int64(int32(uint32(x))) }
	ushr := func(x int64, s uint) int64 { return int64(uint32(x) >> s) }
	const m = int64(0x5bd1e995)
	h := wrap(int64(int32(-1756908916)) ^ int64(len(data))) // 0x9747b28c as a Java int
	words := len(data) / 4
	for i := 0; i < words; i++ {
		k := int64(binary.LittleEndian.Uint32(data[4*i:]))
		k = wrap(k * m)
		k = wrap(k ^ ushr(k, 24))
		k = wrap(k * m)
		h = wrap(h * m)
		h = wrap(h ^ k)
	}
	tail := data[words*4:]
	if len(tail) > 0 {
		for i := len(tail) - 1; i >= 0; i-- {
			h = wrap(h ^ int64(tail[i])<<(8*uint(i)))
		}
		h = wrap(h * m)
	}
	h = wrap(h ^ ushr(h, 13))
	h = wrap(h * m)
	h = wrap(h ^ ushr(h, 15))
	return int32(h)
}

func TestMurmur2ReferenceAgreesOnPinnedValues(t *testing.T) {
	// The reference must itself be right, or the fuzz test proves nothing.
	require.Equal(t, int32(-973932308), murmur2Reference([]byte("21")))
	require.Equal(t, int32(-58897971), murmur2Reference([]byte("lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8")))
	require.Equal(t, int32(479470107), murmur2Reference([]byte("abc")))
}

func FuzzMurmur2(f *testing.F) {
	for _, s := range []string{"", "a", "ab", "abc", "abcd", "abcde", "\xff\xfe\xfd", "8c2f6a32-0c0e-4d41-9a3e-2f0b6c1d9e77", "用户行为"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, want := Murmur2(data), murmur2Reference(data)
		if got != want {
			t.Fatalf("Murmur2(%x) = %d, reference %d", data, got, want)
		}
		for _, n := range []int{1, 2, 3, 7, 12, 100, 1000, math.MaxInt32} {
			p := KeyPartition(data, n)
			if p < 0 || int(p) >= n {
				t.Fatalf("KeyPartition(%x, %d) = %d out of range", data, n, p)
			}
		}
	})
}
