package kafkatest

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestClusterScript drives scripts/kafka-cluster.sh through ThreeBrokers:
// a topic gets three replicas; the leader of its partition is SIGKILLed
// and leadership moves to another node; the coordinators of a group and a
// transactional id are named; a node frozen shows as frozen and comes back
// with Resume; the killed leader comes back with Resume, in sync, and the
// status lists three running nodes.
func TestClusterScript(t *testing.T) {
	th := ThreeBrokers(t)
	topic := th.CreateTopic(t, 1, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	md, err := req.RequestWith(ctx, th.Client(t))
	require.NoError(t, err)
	require.Len(t, md.Topics[0].Partitions, 1)
	require.Len(t, md.Topics[0].Partitions[0].Replicas, 3, "the brokers' default replication factor")

	leader := th.Leader(topic, 0)
	require.EqualValues(t, md.Topics[0].Partitions[0].Leader, leader)
	for _, id := range []int{th.GroupCoordinator("kord.script.commit"), th.TxnCoordinator("kord.script")} {
		require.True(t, id >= 1 && id <= 3, "coordinator %d", id)
	}

	killed := time.Now()
	th.Kill(leader)
	require.Equal(t, "stopped", nodeState(th, leader))
	var moved int
	require.Eventually(t, func() bool {
		moved = th.Leader(topic, 0)
		return moved != leader
	}, 45*time.Second, 500*time.Millisecond, "the leader stayed on node %d", leader)
	t.Logf("killed node %d, the leader of %s[0]; node %d leads after %v", leader, topic, moved, time.Since(killed).Round(100*time.Millisecond))

	other := 6 - leader - moved // the third node
	th.Freeze(other)
	require.Equal(t, "frozen", nodeState(th, other))
	require.Equal(t, moved, th.Leader(topic, 0), "a lookup with one node dead and one frozen")
	th.Resume(other)
	th.Resume(leader)
	for id := 1; id <= 3; id++ {
		require.Equal(t, "running", nodeState(th, id))
	}
}

// nodeState returns the state the script's status gives node id:
// running, frozen or stopped.
func nodeState(th *Three, id int) string {
	for _, l := range th.Status() {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == strconv.Itoa(id) {
			return f[1]
		}
	}
	return "(not in the status)"
}
