package kordtest_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kordproject/kord/kordtest"
	"github.com/kordproject/kord/producer"
	"github.com/kordproject/kord/serde"
)

// TestReadCommitted: the cluster starts with its topics, and
// ReadCommitted returns what a read_committed reader sees: a committed
// transaction's records, not an aborted one's, and nothing past the end it
// found, in partition order.
func TestReadCommitted(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := kordtest.NewCluster(kordtest.Topic("in", 2))
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.CreateTopic(ctx, "more", 1))
	p, err := producer.New(serde.String(), serde.String(), producer.Brokers(c.Brokers()...), producer.TransactionalID("t"))
	require.NoError(t, err)
	defer p.Close()
	require.NoError(t, p.InitTransactions(ctx))
	txn := func(commit bool, values ...string) {
		require.NoError(t, p.BeginTransaction())
		for _, v := range values {
			require.NoError(t, p.Produce(ctx, producer.Record[string, string]{Topic: "in", Key: v, Value: v}, nil))
		}
		if commit {
			require.NoError(t, p.CommitTransaction(ctx))
		} else {
			require.NoError(t, p.AbortTransaction(ctx))
		}
	}
	txn(true, "a", "b", "c", "d")
	txn(false, "x", "y")
	txn(true, "e")
	client, err := c.Client()
	require.NoError(t, err)
	recs, err := kordtest.ReadCommitted(ctx, client, "in")
	require.NoError(t, err)
	var got []string
	last := int32(-1)
	for _, r := range recs {
		require.GreaterOrEqual(t, r.Partition, last, "partitions in ascending order")
		last = r.Partition
		got = append(got, string(r.Value))
	}
	require.ElementsMatch(t, []string{"a", "b", "c", "d", "e"}, got)
	none, err := kordtest.ReadCommitted(ctx, client, "more")
	require.NoError(t, err)
	require.Empty(t, none)
	_, err = kordtest.NewCluster(kordtest.Brokers(0))
	require.Error(t, err)
}
