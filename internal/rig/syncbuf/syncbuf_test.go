package syncbuf

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestKeepsAllBelowLimit(t *testing.T) {
	var b Buffer
	for i := 0; i < 1000; i++ {
		_, _ = b.Write([]byte("line\n"))
	}
	require.Equal(t, strings.Repeat("line\n", 1000), b.String())
}

// TestBounded: far more than Limit written keeps the head and the newest
// bytes, says how much was left out, and holds at most about 3×Limit.
func TestBounded(t *testing.T) {
	var b Buffer
	chunk := bytes.Repeat([]byte("x"), 1<<20)
	_, _ = b.Write([]byte("FIRST"))
	for i := 0; i < 10*Limit>>20; i++ {
		n, err := b.Write(chunk)
		require.NoError(t, err)
		require.Equal(t, len(chunk), n)
	}
	_, _ = b.Write([]byte("LAST"))
	s := b.String()
	require.True(t, strings.HasPrefix(s, "FIRST"))
	require.True(t, strings.HasSuffix(s, "LAST"))
	require.Contains(t, s, "bytes left out]")
	require.LessOrEqual(t, len(s), 3*Limit+100)
	require.GreaterOrEqual(t, len(s), 2*Limit)
}
