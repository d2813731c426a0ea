//go:build !cgo || kordnobatch

package rdkbatch_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kordproject/kord/internal/rdkbatch"
)

// TestNoBatch: with the kordnobatch tag the batch path is out: New fails
// with ErrUnsupported, and a caller reads with Consumer.Poll.
func TestNoBatch(t *testing.T) {
	require.False(t, rdkbatch.Enabled)
	r, err := rdkbatch.New(nil, 100)
	require.ErrorIs(t, err, rdkbatch.ErrUnsupported)
	require.Nil(t, r)
	var b rdkbatch.Batch
	require.ErrorIs(t, r.Read(&b, 0), rdkbatch.ErrUnsupported)
}
