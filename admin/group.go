package admin

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// TopicPartition names a partition.
type TopicPartition struct {
	Topic     string
	Partition int32
}

// Committed is a group's committed offset of one partition and the
// metadata committed with it.
type Committed struct {
	Topic     string
	Partition int32
	Offset    int64 // -1 when the group has no offset for the partition
	Metadata  string
}

// GroupOffsets returns group's committed offsets of partitions, one for
// each, in no set order (Kafka's OffsetFetch; kafka-consumer-groups
// --describe), requiring
// stable offsets: while a transaction that commits offsets for the group
// is pending, the broker answers UNSTABLE_OFFSET_COMMIT and GroupOffsets
// waits (until ctx is done) rather than return an offset that may yet
// change. A group that never committed, or does not exist, has no offsets
// (every Offset -1), as has a partition it never committed. Each request
// is bounded by the request timeout. With partitions nil, every
// partition the group holds an offset for.
func (c *Client) GroupOffsets(ctx context.Context, group string, partitions []TopicPartition) ([]Committed, error) {
	var req []kafka.TopicPartition // nil: every partition
	if partitions != nil {
		req = make([]kafka.TopicPartition, len(partitions))
	}
	for i, tp := range partitions {
		topic := tp.Topic
		req[i] = kafka.TopicPartition{Topic: &topic, Partition: tp.Partition}
	}
	what := fmt.Sprintf("offsets of group %q", group)
	began := time.Now()
	for {
		var res kafka.ListConsumerGroupOffsetsResult
		var answer error // the broker's answer for the group as a whole
		if err := c.do(ctx, what, func(ctx context.Context, slice time.Duration) error {
			var err error
			ga, err := c.groupAdmin()
			if err != nil {
				return err
			}
			res, err = ga.ListConsumerGroupOffsets(ctx, []kafka.ConsumerGroupTopicPartitions{{Group: group, Partitions: req}},
				kafka.SetAdminRequireStableOffsets(true))
			var kerr kafka.Error
			if errors.As(err, &kerr) && (kerr.Code() == kafka.ErrUnstableOffsetCommit || kerr.Code() == kafka.ErrGroupIDNotFound) {
				answer, err = err, nil
			}
			return err
		}); err != nil {
			return nil, err
		}
		err := answer
		if err == nil && len(res.ConsumerGroupsTopicPartitions) != 1 {
			err = fmt.Errorf("%d results", len(res.ConsumerGroupsTopicPartitions))
		}
		var out []Committed
		unstable := false
		if err == nil {
			for _, tp := range res.ConsumerGroupsTopicPartitions[0].Partitions {
				if tp.Error != nil {
					var kerr kafka.Error
					if errors.As(tp.Error, &kerr) && kerr.Code() == kafka.ErrUnstableOffsetCommit {
						unstable = true
						break
					}
					err = fmt.Errorf("%s[%d]: %w", *tp.Topic, tp.Partition, tp.Error)
					break
				}
				o := Committed{Topic: *tp.Topic, Partition: tp.Partition, Offset: int64(tp.Offset)}
				if tp.Offset < 0 {
					o.Offset = -1
				}
				if tp.Metadata != nil {
					o.Metadata = *tp.Metadata
				}
				out = append(out, o)
			}
		}
		var kerr kafka.Error
		if err != nil && errors.As(err, &kerr) && kerr.Code() == kafka.ErrUnstableOffsetCommit {
			unstable, err = true, nil
		}
		if err != nil && errors.As(err, &kerr) && kerr.Code() == kafka.ErrGroupIDNotFound {
			// A group that never committed: Apache Kafka answers with no
			// offsets, kfake with GROUP_ID_NOT_FOUND. Same meaning.
			out = out[:0]
			for _, tp := range partitions {
				out = append(out, Committed{Topic: tp.Topic, Partition: tp.Partition, Offset: -1})
			}
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("admin: %s: %w", what, err)
		}
		if !unstable {
			return out, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("admin: %s: still unstable after %v (a transaction is pending; if that lasts past the transaction timeout, the broker holds a hanging transaction, which kafka-transactions.sh find-hanging finds and abort ends): %w",
				what, time.Since(began).Round(time.Second), context.Cause(ctx))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// CommitGroupOffsets commits offsets, with their metadata, to group
// outside any transaction (Kafka's OffsetCommit from outside the group, as
// kafka-consumer-groups --reset-offsets does; librdkafka's
// AlterConsumerGroupOffsets). The group must have no active members: the
// coordinator refuses a commit that names no member of a group that has
// some (UNKNOWN_MEMBER_ID, on Kafka 4.4.0 and kfake). A transactional
// producer commits inside its transaction instead
// (producer.Producer.SendOffsetsToTransaction).
func (c *Client) CommitGroupOffsets(ctx context.Context, group string, offsets []Committed) error {
	tps := make([]kafka.TopicPartition, len(offsets))
	for i, o := range offsets {
		topic, md := o.Topic, o.Metadata
		tps[i] = kafka.TopicPartition{Topic: &topic, Partition: o.Partition, Offset: kafka.Offset(o.Offset), Metadata: &md}
	}
	what := fmt.Sprintf("commit offsets to group %q", group)
	var res kafka.AlterConsumerGroupOffsetsResult
	err := c.do(ctx, what, func(ctx context.Context, slice time.Duration) error {
		var err error
		ga, err := c.groupAdmin()
		if err != nil {
			return err
		}
		res, err = ga.AlterConsumerGroupOffsets(ctx, []kafka.ConsumerGroupTopicPartitions{{Group: group, Partitions: tps}})
		return err
	})
	if err != nil {
		return err
	}
	for _, g := range res.ConsumerGroupsTopicPartitions {
		for _, tp := range g.Partitions {
			if tp.Error != nil {
				return fmt.Errorf("admin: %s: %s[%d] offset %d: %w", what, *tp.Topic, tp.Partition, tp.Offset, tp.Error)
			}
		}
	}
	return nil
}

// Member is one member of a consumer group, as DescribeGroups lists it.
type Member struct {
	ClientID   string
	MemberID   string
	InstanceID string // group.instance.id: "" unless a static member
}

// GroupMembers lists group's members now (Kafka's DescribeGroups;
// kafka-consumer-groups --describe --members). A group that does not
// exist, or has no members, has none. A static member stays listed until
// its session times out, whether or not its process lives.
func (c *Client) GroupMembers(ctx context.Context, group string) ([]Member, error) {
	what := fmt.Sprintf("members of group %q", group)
	var res kafka.DescribeConsumerGroupsResult
	if err := c.do(ctx, what, func(ctx context.Context, slice time.Duration) error {
		ga, err := c.groupAdmin()
		if err != nil {
			return err
		}
		res, err = ga.DescribeConsumerGroups(ctx, []string{group})
		return err
	}); err != nil {
		return nil, err
	}
	if len(res.ConsumerGroupDescriptions) != 1 {
		return nil, fmt.Errorf("admin: %s: %d results", what, len(res.ConsumerGroupDescriptions))
	}
	d := res.ConsumerGroupDescriptions[0]
	if code := d.Error.Code(); code == kafka.ErrGroupIDNotFound {
		return nil, nil
	} else if code != kafka.ErrNoError {
		return nil, fmt.Errorf("admin: %s: %w", what, d.Error)
	}
	out := make([]Member, len(d.Members))
	for i, m := range d.Members {
		out[i] = Member{ClientID: m.ClientID, MemberID: m.ConsumerID, InstanceID: m.GroupInstanceID}
	}
	return out, nil
}
