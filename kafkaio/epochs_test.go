package kafkaio_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kordproject/kord/checkpoint"
	"github.com/kordproject/kord/internal/rig/kafkatest"
	"github.com/kordproject/kord/kafkaio"
	"github.com/kordproject/kord/keyed/connector"
	"github.com/kordproject/kord/serde"
)

// TestSinkResume: a sink incarnation writes into its open transaction
// only the epoch after the checkpoint the run resumed after (Resume);
// later epochs wait for that transaction's commit. The second incarnation
// here resumes after 0, as every run of one of several processes does,
// after the first committed checkpoints 1 and 2: its epoch 2 must not
// commit with checkpoint 1 (a number kept from the run before let it in,
// and a SIGKILL after that commit replayed epoch 2's input into
// duplicates: CI, TestRunProcesses/kfake).
func TestSinkResume(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		in, out := c.CreateTopic(t, 1, nil), c.CreateTopic(t, 1, nil)
		sink := kafkaio.NewSink(client(c), out, serde.String()).(*kafkaio.Sink[string])
		defer sink.Close()
		info := connector.SinkInfo{Job: strings.ReplaceAll(kafkatest.TopicName(t), "/", "."), Inputs: []string{in}, Mode: checkpoint.ExactlyOnce,
			TransactionTimeout: time.Minute, CommitTimeout: 30 * time.Second}
		commit := func(run string, id uint64) {
			t.Helper()
			require.NoError(t, sink.Commit(ctx, checkpoint.Ref{Run: run, ID: id}, []checkpoint.PartitionOffset{{Topic: in, Partition: 0, Offset: int64(id)}}))
		}
		require.NoError(t, sink.Reset(ctx, info))
		sink.Resume(0)
		require.NoError(t, sink.Write(ctx, 1, "a"))
		commit("r1", 1)
		require.NoError(t, sink.Write(ctx, 2, "b"))
		commit("r1", 2)

		require.NoError(t, sink.Reset(ctx, info))
		sink.Resume(0)
		require.NoError(t, sink.Write(ctx, 1, "c"))
		require.NoError(t, sink.Write(ctx, 2, "d"))
		commit("r2", 1)
		values := func(want int) []string {
			var vs []string
			for _, r := range c.ReadAll(t, out, want, true, 3*time.Second) {
				vs = append(vs, string(r.Value))
			}
			return vs
		}
		require.Equal(t, []string{"a", "b", "c"}, values(4), "checkpoint 1 of the second run commits its epoch 1 only")
		commit("r2", 2)
		require.Equal(t, []string{"a", "b", "c", "d"}, values(4))
	})
}
