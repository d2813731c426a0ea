package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// Client settings. Everything not named here is librdkafka's default; the
// ones that matter for the figures are spelled out even when they are the
// default, so RESULTS.md can cite them.

// overrides are librdkafka settings from -producer-conf and
// -consumer-conf, applied over the ones below.
type overrides struct {
	producer, consumer map[string]string
}

var extra overrides

// parseConf parses "key=value,key=value".
func parseConf(s string) (map[string]string, error) {
	m := map[string]string{}
	for kv := range strings.SplitSeq(s, ",") {
		if kv = strings.TrimSpace(kv); kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("%q: want key=value", kv)
		}
		m[k] = v
	}
	return m, nil
}

func apply(c *kafka.ConfigMap, m map[string]string) *kafka.ConfigMap {
	for k, v := range m {
		(*c)[k] = v
	}
	return c
}

// producerConfig is the plain (non-transactional) producer of the input.
func producerConfig(brokers string) *kafka.ConfigMap {
	return apply(&kafka.ConfigMap{
		"bootstrap.servers":  brokers,
		"enable.idempotence": true,  // implies max.in.flight <= 5, retries
		"acks":               "all", // implied by idempotence; explicit
		"linger.ms":          5,     // librdkafka default
		"batch.size":         1000000,
		"batch.num.messages": 10000,  // librdkafka default
		"compression.type":   "none", // librdkafka default
		// Java's keyed placement (murmur2), as kord's producer uses,
		// instead of librdkafka's default CRC32 "consistent_random".
		"partitioner": "murmur2_random",
		// Delivery reports carry only topic/partition/offset/error: the
		// benchmark needs no key or value copied back into Go.
		"go.delivery.report.fields": "none",
	}, extra.producer)
}

// txProducerConfig is the transactional producer of the output.
func txProducerConfig(brokers, txnID string) *kafka.ConfigMap {
	c := producerConfig(brokers)
	_ = c.SetKey("transactional.id", txnID)
	_ = c.SetKey("transaction.timeout.ms", 60000) // librdkafka default
	// No per-record delivery reports: CommitTransaction fails if any
	// record of the transaction failed, which is all the loop needs.
	_ = c.SetKey("go.delivery.reports", false)
	return apply(c, extra.producer)
}

// consumerConfig is a read_committed consumer that is only ever assigned
// partitions: group.id is required by confluent-kafka-go but no group is
// joined and nothing is committed by the consumer.
func consumerConfig(brokers, group string) *kafka.ConfigMap {
	return apply(&kafka.ConfigMap{
		"bootstrap.servers":        brokers,
		"group.id":                 group,
		"isolation.level":          "read_committed",
		"enable.auto.commit":       false,
		"enable.auto.offset.store": false,
		"auto.offset.reset":        "earliest",
		"enable.partition.eof":     true,
		// librdkafka postpones a partition's next fetch by this much once its
		// local queue is past queued.min.messages / queued.max.messages.kbytes;
		// the default, 1000 ms, idles a fast reader (RESULTS.md: about 3x
		// slower reads of the whole input).
		"fetch.queue.backoff.ms": 10,
	}, extra.consumer)
}

// assignAll assigns every partition of topic, from the beginning.
func assignAll(c *kafka.Consumer, topic string, partitions int) error {
	tps := make([]kafka.TopicPartition, partitions)
	for i := range tps {
		tps[i] = kafka.TopicPartition{Topic: &topic, Partition: int32(i), Offset: kafka.OffsetBeginning}
	}
	if err := c.Assign(tps); err != nil {
		return fmt.Errorf("assign %d partitions of %s: %w", partitions, topic, err)
	}
	return nil
}

// createTopics creates fresh topics of the given partition count
// (replication factor 1) and waits until every partition has a leader.
func createTopics(ctx context.Context, brokers string, partitions int, topics ...string) error {
	ad, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": brokers})
	if err != nil {
		return fmt.Errorf("admin client: %w", err)
	}
	defer ad.Close()
	specs := make([]kafka.TopicSpecification, len(topics))
	for i, t := range topics {
		specs[i] = kafka.TopicSpecification{Topic: t, NumPartitions: partitions, ReplicationFactor: 1}
	}
	res, err := ad.CreateTopics(ctx, specs, kafka.SetAdminOperationTimeout(30*time.Second))
	if err != nil {
		return fmt.Errorf("create topics %v: %w", topics, err)
	}
	for _, r := range res {
		if r.Error.Code() != kafka.ErrNoError {
			return fmt.Errorf("create topic %s: %w", r.Topic, r.Error)
		}
	}
	for _, t := range topics {
		if err := waitLeaders(ctx, ad, t, partitions); err != nil {
			return err
		}
	}
	return nil
}

func waitLeaders(ctx context.Context, ad *kafka.AdminClient, topic string, partitions int) error {
	var last error
	for {
		md, err := ad.GetMetadata(&topic, false, 5000)
		if err == nil {
			tm, ok := md.Topics[topic]
			switch {
			case !ok:
				err = errors.New("not in metadata")
			case tm.Error.Code() != kafka.ErrNoError:
				err = tm.Error
			case len(tm.Partitions) != partitions:
				err = fmt.Errorf("%d of %d partitions in metadata", len(tm.Partitions), partitions)
			default:
				for _, p := range tm.Partitions {
					if p.Error.Code() != kafka.ErrNoError || p.Leader < 0 {
						err = fmt.Errorf("partition %d has no leader", p.ID)
						break
					}
				}
			}
			if err == nil {
				return nil
			}
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("topic %s not ready: %v (%w)", topic, last, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// deleteTopics deletes topics, best effort: the figures are already taken.
func deleteTopics(ctx context.Context, brokers string, topics ...string) error {
	ad, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": brokers})
	if err != nil {
		return fmt.Errorf("admin client: %w", err)
	}
	defer ad.Close()
	res, err := ad.DeleteTopics(ctx, topics, kafka.SetAdminOperationTimeout(30*time.Second))
	if err != nil {
		return fmt.Errorf("delete topics %v: %w", topics, err)
	}
	for _, r := range res {
		if r.Error.Code() != kafka.ErrNoError {
			return fmt.Errorf("delete topic %s: %w", r.Topic, r.Error)
		}
	}
	return nil
}

// produceRetry enqueues m, waiting while librdkafka's queue is full
// (queue.buffering.max.messages, default 100,000).
func produceRetry(ctx context.Context, p *kafka.Producer, m *kafka.Message) error {
	for {
		err := p.Produce(m, nil)
		if err == nil {
			return nil
		}
		var ke kafka.Error
		if !errors.As(err, &ke) || ke.Code() != kafka.ErrQueueFull {
			return fmt.Errorf("produce to %s: %w", *m.TopicPartition.Topic, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Microsecond):
		}
	}
}

// consumerError turns a consumer error event into an error when it is
// fatal. librdkafka reports transient conditions (a broker connection
// dropped and retried) as error events too; those are only counted.
func consumerError(e kafka.Error) error {
	if e.IsFatal() {
		return fmt.Errorf("consumer: fatal: %w", e)
	}
	return nil
}
