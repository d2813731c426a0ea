package partitioner

import "testing"

// BenchmarkKeyPartitionUUID measures keyed placement of a 36-byte UUID key,
// the main use case. bench/peers compares it with franz-go's
// Kafka-compatible partitioner in one run.
func BenchmarkKeyPartitionUUID(b *testing.B) {
	key := []byte("8c2f6a32-0c0e-4d41-9a3e-2f0b6c1d9e77")
	var sink int32
	b.ReportAllocs()
	for b.Loop() {
		sink += KeyPartition(key, 12)
	}
	_ = sink
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "keys/s")
}

func BenchmarkRoundRobin(b *testing.B) {
	r := NewRoundRobin()
	avail := []int32{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}
	b.ReportAllocs()
	for b.Loop() {
		r.Partition("events", nil, 12, avail)
	}
}
