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

// blocked is a Blocker over a set of inputs.
type blocked map[int]bool

func (b blocked) Blocked(input int) bool { return b[input] }

// TestStash: a blocked input's messages are kept in order and come back,
// in order, once it is unblocked; an unblocked input's are not kept.
func TestStash(t *testing.T) {
	s := NewStash[int](2)
	b := blocked{1: true}
	require.False(t, s.Keep(b, Message[int]{From: 0, Barrier: 1}))
	require.True(t, s.Keep(b, Message[int]{From: 1, Barrier: 2}))
	require.True(t, s.Keep(b, Message[int]{From: 1, Barrier: 3}))
	_, ok := s.Pop(b)
	require.False(t, ok, "input 1 is still blocked")
	b[1] = false
	for _, want := range []uint64{2, 3} {
		m, ok := s.Pop(b)
		require.True(t, ok)
		require.Equal(t, want, m.Barrier)
	}
	_, ok = s.Pop(b)
	require.False(t, ok)
}
