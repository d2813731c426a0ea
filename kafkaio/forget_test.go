package kafkaio_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kordproject/kord/admin"
	"github.com/kordproject/kord/internal/rig/kafkatest"
	"github.com/kordproject/kord/kafkaio"
	"github.com/kordproject/kord/keyed/connector"
)

// TestKafkaForget: a job that ran has its commit record in its commit
// group; Job.Forget deletes the group (the sink's Forgetter) with the
// checkpoints, a second Forget finds no group and is no error, and the
// next run starts over as a job that never ran.
func TestKafkaForget(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		f := newFixture(t, c, 2, 20)
		f.fill(200)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		bounded := func(s *jobSpec) { s.srcOpts = []kafkaio.Opt{kafkaio.Bounded()} }
		j, _, _ := f.build(bounded)
		require.NoError(t, j.Run(ctx))

		a, err := admin.New(admin.Brokers(strings.Split(c.Brokers, ",")...))
		require.NoError(t, err)
		defer a.Close()
		tps := []admin.TopicPartition{{Topic: f.in, Partition: 0}, {Topic: f.in, Partition: 1}}
		group := kafkaio.CommitGroup(f.name)
		offs, err := a.GroupOffsets(ctx, group, tps)
		require.NoError(t, err)
		require.Len(t, offs, 2)
		for _, o := range offs {
			require.GreaterOrEqual(t, o.Offset, int64(0), "%+v", o)
			require.True(t, strings.HasPrefix(o.Metadata, "kord1;"), "the commit record: %+v", o)
		}

		j, _, _ = f.build(bounded)
		require.NoError(t, j.Forget(ctx))
		offs, err = a.GroupOffsets(ctx, group, tps)
		require.NoError(t, err)
		for _, o := range offs {
			require.Equal(t, int64(-1), o.Offset, "the commit group is gone: %+v", o)
		}
		j, _, _ = f.build(bounded)
		require.NoError(t, j.Forget(ctx), "a commit group that does not exist is no error")

		var _ connector.Forgetter = (*kafkaio.Sink[result])(nil)
		j, _, _ = f.build(bounded)
		require.NoError(t, j.Run(ctx), "the job starts over")
		offs, err = a.GroupOffsets(ctx, group, tps)
		require.NoError(t, err)
		for _, o := range offs {
			require.GreaterOrEqual(t, o.Offset, int64(0), "committed again: %+v", o)
		}
	})
}
