package keyed

import "time"

// SetSweepAge makes retention of other runs (sweep) delete checkpoints
// older than d instead of the transaction timeout plus margins; the
// returned func restores it.
func SetSweepAge(d time.Duration) (restore func()) {
	testSweepAge.Store(int64(d))
	return func() { testSweepAge.Store(-1) }
}

// The runtime's backend and key-group math, for the external tests
// (package keyed_test) that exercise state without a job.
var (
	NewBackend = newBackend
	FullRange  = fullRange
	KeyGroup   = keyGroupOf
)

type KeyGroupRange = keyGroupRange
