//go:build kordfailpoints

package keyed

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kordproject/kord/internal/failpoint"
)

// TestPointNames: the engine's failure points are the ones the crash
// tests arm by name.
func TestPointNames(t *testing.T) {
	mine := []string{pointAfterBarrier, pointDuringSnapshotWrite, pointAfterSnapshots, pointAfterMetadata, pointBeforeCommit,
		pointAfterCommit, pointAfterMarker, pointDuringRestore, pointAfterFreshCommitted}
	var theirs []string
	for _, p := range failpoint.Crashes {
		if p != failpoint.BeforeSendOffsets && p != failpoint.AfterSendOffsets { // the Kafka sink's
			theirs = append(theirs, p)
		}
	}
	require.Equal(t, theirs, mine)
}
