package channel

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestOutboxPending: a flush would send records, a watermark or an
// idleness change; after it, nothing is pending.
func TestOutboxPending(t *testing.T) {
	stop := make(chan struct{})
	in := NewInbox[int](1, 8)
	o := NewOutbox(stop, []*Inbox[int]{in}, []int{0}, 4)
	require.False(t, o.Pending())
	require.NoError(t, o.Add(0, Element[int]{V: 1}))
	require.True(t, o.Pending(), "a partial batch")
	require.NoError(t, o.FlushAll())
	require.False(t, o.Pending())
	o.Advance(10)
	require.True(t, o.Pending(), "a watermark not sent")
	require.NoError(t, o.FlushAll())
	require.False(t, o.Pending())
	o.SetIdle(true)
	require.True(t, o.Pending(), "an idleness not sent")
	require.NoError(t, o.FlushAll())
	require.False(t, o.Pending())
	require.Len(t, in.C, 3)
}
