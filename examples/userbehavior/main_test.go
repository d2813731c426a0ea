package main

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kordproject/kord/internal/kafkatest"
)

// The main job runs end to end, crash and recovery included, and verifies
// its own output with an independent read_committed reader (run returns an
// error on any duplicate, loss, reorder or wrong count), in both keying
// modes, on kfake and on the real broker.
func TestRunEndToEnd(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		for _, keyBy := range []bool{false, true} {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			o := options{brokers: c.Brokers, topic: kafkatest.TopicName(t), events: 5_000, users: 300, partitions: 6, seed: 3,
				phase: "all", crash: true, keyBy: keyBy, interval: 200 * time.Millisecond, quiet: true}
			require.NoError(t, run(ctx, o))
		}
	})
}

func TestRunRejectsBadFlags(t *testing.T) {
	require.Error(t, run(context.Background(), options{events: 0, users: 1, partitions: 1, phase: "all"}))
	require.Error(t, run(context.Background(), options{events: 1, users: 1, partitions: 1, phase: "nope"}))
}
