package keyed

// DefaultMaxParallelism is the number of key groups of a keyBy stream whose
// maxParallelism is not set (Flink's lower bound for its default, 128).
const DefaultMaxParallelism = 128
