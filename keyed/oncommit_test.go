package keyed_test

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kordproject/kord/keyed"
	"github.com/kordproject/kord/vfs"
)

// TestOnCommit: OnCommit sees every committed checkpoint, the fresh
// start's checkpoint 0 first, in order; an error from it fails the run
// after the commit, and the restart strategy restarts the job from that
// checkpoint: the output is still each event once.
func TestOnCommit(t *testing.T) {
	src, want := input(5, 4, 50, 5_000)
	sink := keyed.NewMemorySink[result]()
	var seen []uint64
	var failed atomic.Bool
	j := provenanceJob(t, vfs.NewMem(), src, sink,
		keyed.RestartStrategy(keyed.FixedDelay(1, time.Millisecond)),
		keyed.OnCommit(func(id uint64) error {
			seen = append(seen, id)
			if id == 1 && failed.CompareAndSwap(false, true) {
				return errors.New("on purpose")
			}
			return nil
		}))
	require.NoError(t, runJob(t, j))
	checkOutput(t, sink.Committed(), want)
	require.True(t, failed.Load())
	require.Equal(t, uint64(0), seen[0], "the fresh start's checkpoint 0 comes first")
	require.Equal(t, uint64(1), seen[1])
	// After the failure the job restored checkpoint 1 and went on from it.
	for i := 2; i < len(seen); i++ {
		require.Equal(t, seen[i-1]+1, seen[i], "commits in order: %v", seen)
	}

	// Without a restart strategy the error is Run's, naming the
	// checkpoint.
	sink2 := keyed.NewMemorySink[result]()
	src2, _ := input(6, 4, 50, 5_000)
	j = provenanceJob(t, vfs.NewMem(), src2, sink2, keyed.OnCommit(func(id uint64) error {
		if id == 1 {
			return errors.New("on purpose")
		}
		return nil
	}))
	err := runJob(t, j)
	require.ErrorContains(t, err, "OnCommit after checkpoint 1: on purpose")
}
