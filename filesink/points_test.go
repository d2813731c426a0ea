//go:build kordfailpoints

package filesink

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kordproject/kord/internal/failpoint"
)

// TestPointNames: the sink's points are the ones internal/failpoint names,
// which the crash tests arm.
func TestPointNames(t *testing.T) {
	require.Equal(t, failpoint.FileAfterClose, pointAfterClose)
	require.Equal(t, failpoint.FileMidPublish, pointMidPublish)
	require.Equal(t, failpoint.FileAfterMerge, pointAfterMerge)
	require.Equal(t, failpoint.FileBeforePartCommit, pointBeforePartitionCommit)
}
