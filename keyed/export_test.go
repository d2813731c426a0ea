package keyed

import "time"

// SetSweepAge makes retention of other runs (sweep) delete checkpoints
// older than d instead of the transaction timeout plus margins; the
// returned func restores it.
func SetSweepAge(d time.Duration) (restore func()) {
	testSweepAge.Store(int64(d))
	return func() { testSweepAge.Store(-1) }
}
