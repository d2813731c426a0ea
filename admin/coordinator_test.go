package admin_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kordproject/kord/admin"
	"github.com/kordproject/kord/internal/rig/kafkatest"
)

// TestGroupOffsetsCoordinatorLoading: the broker answers the first two
// OffsetFetch requests with NOT_COORDINATOR, as a broker just started
// (or whose group coordinator moved) does. librdkafka handles that answer
// by asking the handle's consumer group to look the coordinator up again;
// on a handle without one (a producer's) it dereferenced NULL and killed
// the process (SIGSEGV in librdkafka's main thread: TestBrokerRestart, in
// three CI runs). Run on the producer handle, this test dies the same way
// (checked). GroupOffsets answers once the coordinator is found.
func TestGroupOffsetsCoordinatorLoading(t *testing.T) {
	c := kafkatest.Fake(t)
	var loading atomic.Int32
	c.Fake.ControlKey(int16(kmsg.OffsetFetch), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		if loading.Add(1) > 2 {
			return nil, nil, false
		}
		c.Fake.KeepControl()
		req := kreq.(*kmsg.OffsetFetchRequest)
		resp := req.ResponseKind().(*kmsg.OffsetFetchResponse)
		resp.ErrorCode = kerr.NotCoordinator.Code
		for _, g := range req.Groups {
			resp.Groups = append(resp.Groups, kmsg.OffsetFetchResponseGroup{Group: g.Group, ErrorCode: kerr.NotCoordinator.Code})
		}
		return resp, nil, true
	})
	a, err := admin.New(admin.Brokers(strings.Split(c.Brokers, ",")...))
	require.NoError(t, err)
	defer a.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	topic := c.CreateTopic(t, 1, nil)
	offs, err := a.GroupOffsets(ctx, "kord.loading", []admin.TopicPartition{{Topic: topic, Partition: 0}})
	require.NoError(t, err)
	require.Equal(t, []admin.Committed{{Topic: topic, Partition: 0, Offset: -1}}, offs)
	require.GreaterOrEqual(t, loading.Load(), int32(2), "the broker answered NOT_COORDINATOR first")
}
