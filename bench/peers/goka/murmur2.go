package main

import "hash"

// murmur2 is Kafka's key hash (Java's Utils.murmur2, the default
// partitioner's), made a hash.Hash32 for goka.WithHasher. Sum32 returns the
// hash with the sign bit cleared (Java's Utils.toPositive), so that sarama's
// hash partitioner, which takes int32(Sum32()) modulo the partition count,
// places keys as Kafka's Java producer does.
type murmur2 struct{ buf []byte }

func newMurmur2() hash.Hash32 { return new(murmur2) }

func (m *murmur2) Write(p []byte) (int, error) {
	m.buf = append(m.buf, p...)
	return len(p), nil
}

func (m *murmur2) Sum(b []byte) []byte {
	s := m.Sum32()
	return append(b, byte(s>>24), byte(s>>16), byte(s>>8), byte(s))
}

func (m *murmur2) Reset()         { m.buf = m.buf[:0] }
func (m *murmur2) Size() int      { return 4 }
func (m *murmur2) BlockSize() int { return 4 }
func (m *murmur2) Sum32() uint32  { return murmur2Hash(m.buf) & 0x7fffffff }

// murmur2Hash is MurmurHash2 with Kafka's seed.
func murmur2Hash(data []byte) uint32 {
	const (
		seed = 0x9747b28c
		m    = 0x5bd1e995
		r    = 24
	)
	n := len(data)
	h := uint32(seed) ^ uint32(n)
	i := 0
	for ; i+4 <= n; i += 4 {
		k := uint32(data[i]) | uint32(data[i+1])<<8 | uint32(data[i+2])<<16 | uint32(data[i+3])<<24
		k *= m
		k ^= k >> r
		k *= m
		h *= m
		h ^= k
	}
	switch n - i {
	case 3:
		h ^= uint32(data[i+2]) << 16
		fallthrough
	case 2:
		h ^= uint32(data[i+1]) << 8
		fallthrough
	case 1:
		h ^= uint32(data[i])
		h *= m
	}
	h ^= h >> 13
	h *= m
	h ^= h >> 15
	return h
}
