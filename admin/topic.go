package admin

import (
	"context"
	"fmt"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// TopicConfig returns the value of one configuration entry of topic, as
// the broker reports it (its own default when the topic sets none; Kafka's
// DescribeConfigs, kafka-configs --describe). A topic that does not exist
// fails with ErrUnknownTopic.
func (c *Client) TopicConfig(ctx context.Context, topic, name string) (string, error) {
	what := fmt.Sprintf("configuration of topic %q", topic)
	var res []kafka.ConfigResourceResult
	err := c.do(ctx, what, func(ctx context.Context, slice time.Duration) error {
		var err error
		res, err = c.a.DescribeConfigs(ctx, []kafka.ConfigResource{{Type: kafka.ResourceTopic, Name: topic}})
		return err
	})
	if err != nil {
		return "", err
	}
	for _, r := range res {
		if r.Error.Code() != kafka.ErrNoError {
			return "", fmt.Errorf("admin: %s: %w", what, c.conn.Classify(r.Error))
		}
		if e, ok := r.Config[name]; ok {
			return e.Value, nil
		}
	}
	return "", fmt.Errorf("admin: topic %q has no configuration entry %q", topic, name)
}

// Identity returns the id of the cluster and the id of topic there
// (Kafka's cluster id, from DescribeCluster, and its topic id, KIP-516,
// from DescribeTopics): offsets mean something only on the same cluster
// and the same incarnation of a topic, and a topic deleted and created
// again under its name gets a new id. Either is "" when the cluster does
// not give it. A topic that does not exist fails with ErrUnknownTopic.
func (c *Client) Identity(ctx context.Context, topic string) (cluster, topicID string, err error) {
	err = c.do(ctx, fmt.Sprintf("cluster id and topic id of topic %q", topic), func(ctx context.Context, slice time.Duration) error {
		cl, err := c.a.DescribeCluster(ctx)
		if err != nil {
			return err
		}
		res, err := c.a.DescribeTopics(ctx, kafka.NewTopicCollectionOfTopicNames([]string{topic}))
		if err != nil {
			return err
		}
		if len(res.TopicDescriptions) != 1 {
			return fmt.Errorf("%d descriptions of one topic", len(res.TopicDescriptions))
		}
		d := res.TopicDescriptions[0]
		switch d.Error.Code() {
		case kafka.ErrNoError:
		case kafka.ErrUnknownTopicOrPart, kafka.ErrUnknownTopic:
			return ErrUnknownTopic // do names the topic
		default:
			return d.Error
		}
		cluster, topicID = "", ""
		if cl.ClusterID != nil {
			cluster = *cl.ClusterID
		}
		if d.TopicID.GetMostSignificantBits() != 0 || d.TopicID.GetLeastSignificantBits() != 0 {
			topicID = d.TopicID.String()
		}
		return nil
	})
	if err != nil {
		return "", "", err
	}
	return cluster, topicID, nil
}
