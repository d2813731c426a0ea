//go:build kordfailpoints

package kafkaio

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kordproject/kord/internal/failpoint"
)

// TestPointNames: the sink's failure points and simulated faults are the
// ones the crash and fault tests arm by name.
func TestPointNames(t *testing.T) {
	require.Equal(t, []string{failpoint.BeforeSendOffsets, failpoint.AfterSendOffsets}, []string{pointBeforeSendOffsets, pointAfterSendOffsets})
	require.Equal(t,
		[]string{failpoint.SimSendOffsetsUnknown, failpoint.SimCommitUnknown, failpoint.SimAbortUnknown, failpoint.SimProduceUnknown, failpoint.ForceAbort, failpoint.SimCommitStall, failpoint.SimSendOffsetsNotMember},
		[]string{simSendOffsetsUnknown, simCommitUnknown, simAbortUnknown, simProduceUnknown, forceAbort, simCommitStall, simSendOffsetsNotMember})
}
