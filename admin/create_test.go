package admin_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kordproject/kord/admin"
	"github.com/kordproject/kord/internal/rig/kafkatest"
)

// TestCreateTopic: a topic is created once; creating it again reports it
// was there. On kfake, CreateTopics answers are replaced: a transient error
// (no controller yet, as on a broker just started) is retried until the
// create succeeds; a refusal fails at once, naming the topic and the cause.
func TestCreateTopic(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		s, err := admin.New(admin.Brokers(c.Brokers))
		require.NoError(t, err)
		defer s.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		topic := "kord.test.create." + kafkatest.TopicName(t)
		created, err := s.CreateTopic(ctx, topic, 3, nil)
		require.NoError(t, err)
		require.True(t, created)
		created, err = s.CreateTopic(ctx, topic, 3, nil)
		require.NoError(t, err)
		require.False(t, created)
		parts, err := s.Partitions(ctx, topic)
		require.NoError(t, err)
		require.Len(t, parts, 3)
		if c.Real() {
			return
		}
		var mu sync.Mutex
		answers := map[string][]int16{ // per topic, the error codes to answer with first
			topic + ".transient": {kerr.NotController.Code, kerr.RequestTimedOut.Code},
			topic + ".refused":   {kerr.PolicyViolation.Code, kerr.PolicyViolation.Code},
		}
		c.Fake.ControlKey(int16(kmsg.CreateTopics), func(req kmsg.Request) (kmsg.Response, error, bool) {
			c.Fake.KeepControl()
			r := req.(*kmsg.CreateTopicsRequest)
			mu.Lock()
			defer mu.Unlock()
			codes := answers[r.Topics[0].Topic]
			if len(codes) == 0 {
				return nil, nil, false
			}
			answers[r.Topics[0].Topic] = codes[1:]
			resp := r.ResponseKind().(*kmsg.CreateTopicsResponse)
			rt := kmsg.NewCreateTopicsResponseTopic()
			rt.Topic, rt.ErrorCode = r.Topics[0].Topic, codes[0]
			resp.Topics = append(resp.Topics, rt)
			return resp, nil, true
		})
		created, err = s.CreateTopic(ctx, topic+".transient", 2, nil)
		require.NoError(t, err)
		require.True(t, created)
		_, err = s.CreateTopic(ctx, topic+".refused", 2, nil)
		require.ErrorContains(t, err, topic+".refused")
		require.ErrorContains(t, err, "olicy")
		mu.Lock()
		defer mu.Unlock()
		require.Empty(t, answers[topic+".transient"], "the transient errors were not all retried")
		require.Len(t, answers[topic+".refused"], 1, "a refusal was retried")
	})
}
