package main

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The example runs end to end on the embedded default and verifies its own
// output (placement and per-user order); run returns an error otherwise.
func TestRunEmbedded(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(t, run(ctx, options{events: 5_000, users: 300, partitions: 7, seed: 3}))
}

func TestRunRejectsBadFlags(t *testing.T) {
	require.Error(t, run(context.Background(), options{events: 0, users: 1, partitions: 1}))
}
