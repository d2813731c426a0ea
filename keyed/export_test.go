package keyed

import (
	"time"

	"github.com/kordproject/kord/checkpoint"
	"github.com/kordproject/kord/keyed/internal/keygroup"
)

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
	FullRange  = keygroup.Full
	KeyGroup   = keygroup.Of
)

type KeyGroupRange = keygroup.Range

// The runtime's calls on a Backend, for the external tests and benchmarks.
func SetCurrentKey(b *Backend, key []byte, keyGroup int) { b.setCurrentKey(key, keyGroup) }

func Snapshot(b *Backend) *snapshot { return b.takeSnapshot() }

func Restore(b *Backend, m *checkpoint.Metadata, files map[string][]byte) error {
	return b.restore(m, files)
}

// SetNumCPU makes parallelism 0's default see n CPUs; the returned func
// restores runtime.NumCPU.
func SetNumCPU(n int) (restore func()) {
	old := numCPU
	numCPU = func() int { return n }
	return func() { numCPU = old }
}

// WatchEmpty watches the backends of operator's tasks that j's runs build
// from now on (j's alone; one job at a time per test binary); the
// returned func says whether every state of the last run's tasks is
// empty, to call once Run returned.
func WatchEmpty(j *Job, operator string) func() bool {
	var last []*Backend
	var run *Job
	testBackendBuilt = func(bj *Job, op string, b *Backend) {
		if bj != j || op != operator {
			return
		}
		if run != bj || len(last) > 0 && b.r.Start == 0 {
			last = nil // a new run's first task
		}
		run = bj
		last = append(last, b)
	}
	return func() bool {
		testBackendBuilt = nil
		for _, b := range last {
			for _, s := range b.states {
				if !s.empty() {
					return false
				}
			}
		}
		return len(last) > 0
	}
}
