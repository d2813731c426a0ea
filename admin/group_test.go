package admin_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kordproject/kord/admin"
	"github.com/kordproject/kord/internal/rig/kafkatest"
)

// TestGroupOffsets: a group that never committed has no offsets; offsets
// committed from outside the group come back with their metadata, a
// partition never committed as -1; deleting the group
// deletes them, and a second delete finds no group.
func TestGroupOffsets(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		a, err := admin.New(admin.Brokers(strings.Split(c.Brokers, ",")...))
		require.NoError(t, err)
		defer a.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		topic := c.CreateTopic(t, 3, nil)
		group := kafkatest.TopicName(t) + ".group"
		tps := []admin.TopicPartition{{Topic: topic, Partition: 2}, {Topic: topic, Partition: 0}, {Topic: topic, Partition: 1}}
		none := []admin.Committed{{Topic: topic, Partition: 2, Offset: -1}, {Topic: topic, Partition: 0, Offset: -1}, {Topic: topic, Partition: 1, Offset: -1}}

		offs, err := a.GroupOffsets(ctx, group, tps)
		require.NoError(t, err)
		require.ElementsMatch(t, none, offs, "a group that never committed")

		require.NoError(t, a.CommitGroupOffsets(ctx, group, []admin.Committed{
			{Topic: topic, Partition: 0, Offset: 5, Metadata: "kord1;run=r;ckpt=1;job=j"},
			{Topic: topic, Partition: 2, Offset: 0},
		}))
		offs, err = a.GroupOffsets(ctx, group, tps)
		require.NoError(t, err)
		require.ElementsMatch(t, []admin.Committed{
			{Topic: topic, Partition: 2, Offset: 0},
			{Topic: topic, Partition: 0, Offset: 5, Metadata: "kord1;run=r;ckpt=1;job=j"},
			{Topic: topic, Partition: 1, Offset: -1},
		}, offs)

		// A later commit replaces the offset and its metadata.
		require.NoError(t, a.CommitGroupOffsets(ctx, group, []admin.Committed{{Topic: topic, Partition: 0, Offset: 9, Metadata: "at 9"}}))
		offs, err = a.GroupOffsets(ctx, group, tps[1:2])
		require.NoError(t, err)
		require.Equal(t, []admin.Committed{{Topic: topic, Partition: 0, Offset: 9, Metadata: "at 9"}}, offs)

		require.NoError(t, a.DeleteGroup(ctx, group))
		offs, err = a.GroupOffsets(ctx, group, tps)
		require.NoError(t, err)
		require.ElementsMatch(t, none, offs, "a deleted group's offsets go with it")
		err = a.DeleteGroup(ctx, group)
		require.ErrorIs(t, err, admin.ErrUnknownGroup)
		require.ErrorContains(t, err, group)

		require.NoError(t, a.Close())
		_, err = a.GroupOffsets(ctx, group, tps)
		require.ErrorIs(t, err, admin.ErrClosed)
		require.ErrorIs(t, a.CommitGroupOffsets(ctx, group, nil), admin.ErrClosed)
	})
}

// TestTopicConfig: a topic's own setting, the broker's default for one it
// does not set, and the classes of a missing topic or entry.
func TestTopicConfig(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		a, err := admin.New(admin.Brokers(strings.Split(c.Brokers, ",")...))
		require.NoError(t, err)
		defer a.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		topic := c.CreateTopic(t, 1, map[string]string{"max.message.bytes": "123456"})

		v, err := a.TopicConfig(ctx, topic, "max.message.bytes")
		require.NoError(t, err)
		require.Equal(t, "123456", v)
		v, err = a.TopicConfig(ctx, topic, "cleanup.policy")
		require.NoError(t, err)
		require.Equal(t, "delete", v, "the broker's default")

		_, err = a.TopicConfig(ctx, topic, "no.such.entry")
		require.ErrorContains(t, err, `no configuration entry "no.such.entry"`)
		_, err = a.TopicConfig(ctx, topic+".missing", "max.message.bytes")
		require.ErrorIs(t, err, admin.ErrUnknownTopic)
		require.ErrorContains(t, err, topic+".missing")
	})
}

// TestIdentity: the cluster id and the topic id; a topic deleted and
// created again under its name has a new id on the same cluster.
func TestIdentity(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		a, err := admin.New(admin.Brokers(strings.Split(c.Brokers, ",")...))
		require.NoError(t, err)
		defer a.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		topic := c.CreateTopic(t, 2, nil)

		cluster, id, err := a.Identity(ctx, topic)
		require.NoError(t, err)
		require.NotEmpty(t, cluster, "the cluster id")
		require.NotEmpty(t, id, "the topic id")
		cluster2, id2, err := a.Identity(ctx, topic)
		require.NoError(t, err)
		require.Equal(t, []string{cluster, id}, []string{cluster2, id2}, "asked again")

		c.RecreateTopic(t, topic, 2)
		cluster2, id2, err = a.Identity(ctx, topic)
		require.NoError(t, err)
		require.Equal(t, cluster, cluster2)
		require.NotEqual(t, id, id2, "a recreated topic has a new id")

		_, _, err = a.Identity(ctx, topic+".missing")
		require.ErrorIs(t, err, admin.ErrUnknownTopic)
		require.ErrorContains(t, err, topic+".missing")
	})
}
