package checkpoint

import "fmt"

// Mode is the checkpointing mode of a job (Flink CheckpointingMode). The
// zero Mode is invalid, so the mode is always chosen explicitly.
type Mode int

const (
	// ExactlyOnce aligns barriers: an input that delivered barrier n is
	// blocked until barrier n has arrived on every input that has not
	// finished (DESIGN.md invariant 4). Flink's aligned
	// SingleCheckpointBarrierHandler.
	ExactlyOnce Mode = iota + 1
	// AtLeastOnce never blocks: checkpoint n is snapshotted when barrier n
	// has arrived on every input that has not finished, so its state may
	// include records behind the barrier. Several checkpoints may be tracked
	// at once. Flink's CheckpointBarrierTracker.
	AtLeastOnce
)

var modeNames = [...]string{"", "exactly-once", "at-least-once"}

func (m Mode) String() string {
	if m > 0 && int(m) < len(modeNames) {
		return modeNames[m]
	}
	return fmt.Sprintf("mode(%d)", int(m))
}
