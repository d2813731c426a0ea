package kafkatest

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestClusters checks each cluster answers and that a required real broker
// is really there: with KORD_REQUIRE_KAFKA=1 this fails when the broker is
// missing or unreachable, so CI cannot pass on kfake alone.
func TestClusters(t *testing.T) {
	ran := 0
	Each(t, func(t *testing.T, c *Cluster) {
		ran++
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		resp, err := kmsg.NewPtrApiVersionsRequest().RequestWith(ctx, c.Client(t))
		require.NoError(t, err, "cluster %s at %s", c.Name, c.Brokers)
		require.Zero(t, resp.ErrorCode)
		topic := c.CreateTopic(t, 3, nil)
		require.Contains(t, topic, "TestClusters")
	})
	if os.Getenv(EnvRequire) == "1" {
		require.Equal(t, 2, ran, "the real broker's run did not happen")
	}
}

func TestTopicNamesAreUnique(t *testing.T) {
	require.NotEqual(t, TopicName(t), TopicName(t))
}
