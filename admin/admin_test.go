package admin_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kordproject/kord/admin"
	"github.com/kordproject/kord/cluster"
	"github.com/kordproject/kord/internal/rig/kafkatest"
	"github.com/kordproject/kord/internal/rig/syncbuf"
)

// TestAdmin: create a topic, read its partitions and offsets, delete it;
// a missing topic or group is its own class; the client's librdkafka
// handles are counted open (cluster.OpenHandles) until Close.
func TestAdmin(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		before := cluster.OpenHandles()
		a, err := admin.New(admin.Brokers(strings.Split(c.Brokers, ",")...))
		require.NoError(t, err)
		require.Equal(t, before+1, cluster.OpenHandles())
		defer a.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		topic := kafkatest.TopicName(t)

		_, err = a.Partitions(ctx, topic)
		require.ErrorIs(t, err, admin.ErrUnknownTopic)
		require.ErrorContains(t, err, topic)

		created, err := a.CreateTopic(ctx, topic, 3, map[string]string{"retention.ms": "3600000"})
		require.NoError(t, err)
		require.True(t, created)
		created, err = a.CreateTopic(ctx, topic, 3, nil)
		require.NoError(t, err)
		require.False(t, created, "the second create finds it there")
		ids, err := a.Partitions(ctx, topic)
		require.NoError(t, err)
		require.Equal(t, []int32{0, 1, 2}, ids)
		offs, err := a.ListOffsets(ctx, topic)
		require.NoError(t, err)
		require.Equal(t, []admin.Offsets{{Partition: 0}, {Partition: 1}, {Partition: 2}}, offs)

		require.NoError(t, a.DeleteTopics(ctx, topic))
		err = a.DeleteTopics(ctx, topic+".missing")
		require.ErrorIs(t, err, admin.ErrUnknownTopic)
		err = a.DeleteGroup(ctx, "kord.no-such-group."+topic)
		require.ErrorIs(t, err, admin.ErrUnknownGroup)

		require.NoError(t, a.Close())
		require.Equal(t, before, cluster.OpenHandles(), "handles left open after Close")
		_, err = a.Partitions(ctx, topic)
		require.ErrorIs(t, err, admin.ErrClosed)
	})
}

// TestUnreachable: a cluster no broker of which answers fails every call
// at the request timeout, naming the brokers and the cause.
func TestUnreachable(t *testing.T) {
	var logs syncbuf.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	a, err := admin.New(admin.Brokers("127.0.0.1:1"), admin.RequestTimeout(3*time.Second), admin.Logger(log))
	require.NoError(t, err)
	defer a.Close()
	start := time.Now()
	_, err = a.CreateTopic(context.Background(), "kord.unreachable", 1, nil)
	took := time.Since(start)
	t.Logf("after %v: %v", took.Round(time.Millisecond), err)
	require.ErrorIs(t, err, admin.ErrUnreachable)
	require.ErrorContains(t, err, "127.0.0.1:1")
	require.ErrorContains(t, err, "connection refused")
	require.Less(t, took, 6*time.Second)
	require.GreaterOrEqual(t, took, 3*time.Second)
	require.NoError(t, a.Close())
	require.Contains(t, logs.String(), "librdkafka: ", "librdkafka's log goes to the logger")
	require.Contains(t, logs.String(), "level=ERROR", "at its level")
}

func TestConfig(t *testing.T) {
	_, err := admin.New()
	require.ErrorIs(t, err, admin.ErrConfig)
	_, err = admin.New(admin.Brokers("127.0.0.1:1"), admin.Set("go.logs.channel.enable", "false"))
	require.ErrorIs(t, err, admin.ErrConfig)
	_, err = admin.New(admin.Brokers("127.0.0.1:1"), admin.RequestTimeout(0))
	require.ErrorIs(t, err, admin.ErrConfig)
}
