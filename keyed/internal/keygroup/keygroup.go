// Package keygroup is the key-group math of kord's keyed state: which key
// group a key is in, which operator instance owns a key group, and the
// contiguous range of key groups each instance owns (Flink's
// KeyGroupRangeAssignment). Every key belongs to one of maxParallelism key
// groups; its formulas are part of the checkpoint format, since state files
// are named by key group.
package keygroup

import (
	"fmt"

	"github.com/cespare/xxhash/v2"
	"github.com/kordproject/kord/internal/layout"
)

// MaxParallelismLimit bounds maxParallelism: the bound the checkpoint
// format holds key groups to (internal/layout's MaxKeyGroups: five digits
// in a state file name). It is above Flink's 32768 because in the partitioned mode
// maxParallelism is a topic's partition count, which Kafka does not cap at
// 32768; every formula here is computed in 64 bits, so any bound up to
// 2^31 would be safe.
const MaxParallelismLimit = layout.MaxKeyGroups

// Of returns the key group of key in the keyBy mode:
// xxhash64(key) % maxParallelism. nil and empty keys are the same key
// (xxhash64 of no bytes). maxParallelism must be positive (see
// ValidateParallelism); Of panics otherwise.
func Of(key []byte, maxParallelism int) int {
	return int(xxhash.Sum64(key) % uint64(maxParallelism))
}

// OperatorIndex returns the index of the operator instance, out of
// parallelism, that owns keyGroup: keyGroup * parallelism / maxParallelism
// (Flink, KeyGroupRangeAssignment.computeOperatorIndexForKeyGroup). It is
// the instance whose RangeFor contains keyGroup.
func OperatorIndex(keyGroup, maxParallelism, parallelism int) int {
	return int(int64(keyGroup) * int64(parallelism) / int64(maxParallelism))
}

// Range is the inclusive range of key groups [Start, End]. It is
// empty when End < Start.
type Range struct {
	Start, End int
}

// RangeFor returns the key groups that operator instance operatorIndex, out
// of parallelism, owns: [ceil(i*maxP/p), floor(((i+1)*maxP-1)/p)] (Flink,
// KeyGroupRangeAssignment.computeKeyGroupRangeForOperatorIndex). For
// 1 <= p <= maxP the ranges of instances 0..p-1 are non-empty, contiguous,
// ascending, and partition [0, maxP).
func RangeFor(operatorIndex, maxParallelism, parallelism int) Range {
	i, maxP, p := int64(operatorIndex), int64(maxParallelism), int64(parallelism)
	return Range{Start: int((i*maxP + p - 1) / p), End: int(((i+1)*maxP - 1) / p)}
}

// Full is the range of every key group, [0, maxParallelism-1]: the
// range of a single instance.
func Full(maxParallelism int) Range {
	return Range{Start: 0, End: maxParallelism - 1}
}

// Contains reports whether keyGroup is in r.
func (r Range) Contains(keyGroup int) bool { return r.Start <= keyGroup && keyGroup <= r.End }

// Len is the number of key groups in r.
func (r Range) Len() int { return max(0, r.End-r.Start+1) }

// Empty reports whether r has no key groups.
func (r Range) Empty() bool { return r.End < r.Start }

func (r Range) String() string { return fmt.Sprintf("[%d, %d]", r.Start, r.End) }

// ValidateParallelism checks 1 <= parallelism <= maxParallelism <=
// MaxParallelismLimit. Every key group is owned by one instance and no
// instance is left without key groups exactly when it holds.
func ValidateParallelism(parallelism, maxParallelism int) error {
	if maxParallelism < 1 || maxParallelism > MaxParallelismLimit {
		return fmt.Errorf("keyed: max parallelism %d out of range [1, %d]", maxParallelism, MaxParallelismLimit)
	}
	if parallelism < 1 || parallelism > maxParallelism {
		return fmt.Errorf("keyed: parallelism %d out of range [1, %d] (max parallelism %d)", parallelism, maxParallelism, maxParallelism)
	}
	return nil
}

// ValidateRange checks that r is a non-empty range of key groups within
// [0, maxParallelism), and maxParallelism within [1, MaxParallelismLimit].
func ValidateRange(r Range, maxParallelism int) error {
	if maxParallelism < 1 || maxParallelism > MaxParallelismLimit {
		return fmt.Errorf("keyed: max parallelism %d out of range [1, %d]", maxParallelism, MaxParallelismLimit)
	}
	if r.Empty() || r.Start < 0 || r.End >= maxParallelism {
		return fmt.Errorf("keyed: key-group range %s is not a non-empty range within [0, %d)", r, maxParallelism)
	}
	return nil
}

// The partitioned mode ("keyed by the record key, already partitioned",
// DESIGN.md): the input topic was written keyed by the same key (by kord's
// producer, with Kafka's Java placement), so every key lives in exactly one
// partition and the partition is the key group. maxParallelism is the
// topic's partition count and instance i of p owns the partitions
// RangeFor(i, partitions, p), read directly by its own source: no shuffle,
// and per-key order is the partition's order. The key group is where the
// record was read, not a function the backend can recompute from the key
// bytes unless told how the topic was partitioned (see KeyGroupFunc).
//
// Adding partitions to the topic moves keys between partitions (Kafka's rule
// depends on the partition count), so it changes maxParallelism, and
// a restore refuses a checkpoint of another maxParallelism.

// PartitionedMaxParallelism returns the maxParallelism of the partitioned
// mode for a topic of partitions partitions: partitions itself, checked to
// be in [1, MaxParallelismLimit].
func PartitionedMaxParallelism(partitions int) (int, error) {
	if partitions < 1 || partitions > MaxParallelismLimit {
		return 0, fmt.Errorf("keyed: partitioned mode: %d partitions, want 1 to %d", partitions, MaxParallelismLimit)
	}
	return partitions, nil
}

// OfPartition returns the key group, in the partitioned mode, of a
// record read from partition: the partition itself.
func OfPartition(partition int32) int { return int(partition) }
