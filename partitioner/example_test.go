package partitioner_test

import (
	"fmt"

	"github.com/kordproject/kord/partitioner"
)

// A Java producer puts this key on the same partition of a 12-partition
// topic.
func ExampleKeyPartition() {
	key := []byte("8c2f6a32-0c0e-4d41-9a3e-2f0b6c1d9e77")
	fmt.Println(partitioner.Murmur2(key), partitioner.KeyPartition(key, 12))
	// Output: -228148521 11
}

func ExampleNewRoundRobin() {
	rr := partitioner.NewRoundRobin()
	available := []int32{0, 2, 3} // partition 1 has no leader
	for i := 0; i < 4; i++ {
		fmt.Print(rr.Partition("events", nil, 4, available), " ")
	}
	// Output: 0 2 3 0
}
