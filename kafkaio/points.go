package kafkaio

// The sink's failure points and simulated faults, inside its commit. In a
// build with the kordfailpoints tag, tests arm them (internal/failpoint,
// which names them the same; a tagged test checks that the lists agree);
// in any other build they do nothing.
const (
	pointBeforeSendOffsets = "before-send-offsets"
	pointAfterSendOffsets  = "after-send-offsets"

	simSendOffsetsUnknown = "sim-send-offsets-unknown"
	simCommitUnknown      = "sim-commit-unknown"
	simAbortUnknown       = "sim-abort-unknown"
	simProduceUnknown     = "sim-produce-unknown"
	forceAbort            = "force-abort"
	simCommitStall        = "sim-commit-stall"

	simSendOffsetsNotMember = "sim-send-offsets-not-member"
)

// points is the failure hook of one commit: nil outside tagged builds.
type points func(name string) error

func (p points) point(name string) error {
	if p == nil {
		return nil
	}
	return p(name)
}
