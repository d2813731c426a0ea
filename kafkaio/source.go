package kafkaio

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/kordproject/kord/consumer"
	"github.com/kordproject/kord/keyed"
)

// Policy says what a record that can never be processed does.
type Policy int

const (
	// Fail fails the job with an error naming the record.
	Fail Policy = iota
	// DeadLetter sends the record to the sink's dead-letter topic, exactly
	// once, and counts it.
	DeadLetter
)

// Source reads a Kafka topic as a keyed.Source: each source task has its
// own assign-only consumer (consumer.Source), positions are concrete
// offsets kept in checkpoints, and nothing is ever committed by the
// consumer. A fresh start reads from StartFrom (default the log start). A
// record whose value cannot be decoded fails the job with topic, partition
// and offset, or, with OnDecodeError = DeadLetter, goes to the sink's
// dead-letter topic in the transaction that commits its offset, and is
// counted (keyed.Job.DeadLetters).
type Source[T any] struct {
	Brokers   string
	TopicName string // the topic
	// Decode turns a record into a T: consumer.JSONValue, AvroValue,
	// StringValue, BytesValue, or a function of the user's.
	Decode func(rec consumer.Record) (T, error)
	// OnDecodeError says what an undecodable record does: Fail (default)
	// or DeadLetter.
	OnDecodeError Policy
	// StartFrom is where a fresh start (no checkpoint) reads each
	// partition from: consumer.Earliest (default), consumer.Latest,
	// consumer.AtTime, consumer.AtOffsets or consumer.FromGroup. It is
	// resolved once, to the concrete offsets of checkpoint 0; a restore
	// always reads on from the checkpoint's offsets.
	StartFrom consumer.Start
	// Settings are librdkafka consumer settings.
	Settings map[string]string
	Logger   *slog.Logger
}

var (
	_ keyed.Source[int]          = (*Source[int])(nil)
	_ keyed.NewPartitionStarter  = (*Source[int])(nil)
	_ keyed.DeadLetterSource     = (*Source[int])(nil)
	_ keyed.Reader[int]          = (*reader[int])(nil)
	_ keyed.DeadLetterSink       = (*Sink[int])(nil)
	_ keyed.Sink[int]            = (*Sink[int])(nil)
	_ interface{ Close() error } = (*Sink[int])(nil)
)

// NewSource returns a source reading topic.
func NewSource[T any](brokers, topic string, decode func(rec consumer.Record) (T, error)) *Source[T] {
	return &Source[T]{Brokers: brokers, TopicName: topic, Decode: decode}
}

// SendsDeadLetters implements keyed.DeadLetterSource.
func (k *Source[T]) SendsDeadLetters() bool { return k.OnDecodeError == DeadLetter }

func (k *Source[T]) consumer() (*consumer.Source, error) {
	opts := []consumer.Opt{consumer.Brokers(k.Brokers)}
	if k.Logger != nil {
		opts = append(opts, consumer.Logger(k.Logger))
	}
	for key, v := range k.Settings {
		opts = append(opts, consumer.Set(key, v))
	}
	return consumer.New(opts...)
}

// Topic implements keyed.Source.
func (k *Source[T]) Topic() string { return k.TopicName }

// Partitions implements keyed.Source.
func (k *Source[T]) Partitions(ctx context.Context) ([]int32, error) {
	c, err := k.consumer()
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.Partitions(ctx, k.TopicName)
}

// Start implements keyed.Source: for a fresh start, each partition's
// offset by StartFrom (default consumer.Earliest), resolved to concrete
// offsets that checkpoint 0 records.
func (k *Source[T]) Start(ctx context.Context, partitions []int32) ([]keyed.Position, error) {
	return k.start(ctx, partitions, k.StartFrom)
}

func (k *Source[T]) start(ctx context.Context, partitions []int32, from consumer.Start) ([]keyed.Position, error) {
	c, err := k.consumer()
	if err != nil {
		return nil, err
	}
	defer c.Close()
	all, err := c.Resolve(ctx, k.TopicName, from)
	if err != nil {
		return nil, err
	}
	at := make(map[int32]int64, len(all))
	for _, p := range all {
		at[p.Partition] = p.Offset
	}
	out := make([]keyed.Position, len(partitions))
	for i, p := range partitions {
		off, ok := at[p]
		if !ok {
			return nil, fmt.Errorf("kafkaio: source %s: partition %d not found when resolving %s", k.TopicName, p, from)
		}
		out[i] = keyed.Position{Partition: p, Offset: off}
	}
	return out, nil
}

// StartNew implements keyed.NewPartitionStarter: partitions created after
// the job started are read from their log start (as Flink's Kafka source
// reads newly discovered partitions from the earliest offset).
func (k *Source[T]) StartNew(ctx context.Context, partitions []int32) ([]keyed.Position, error) {
	return k.start(ctx, partitions, consumer.Earliest)
}

// Reader implements keyed.Source.
func (k *Source[T]) Reader(context.Context) (keyed.Reader[T], error) {
	c, err := k.consumer()
	if err != nil {
		return nil, err
	}
	return &reader[T]{k: k, c: c}, nil
}

type reader[T any] struct {
	k *Source[T]
	c *consumer.Source
}

func (r *reader[T]) Assign(ctx context.Context, ps []keyed.Position) error {
	pos := make([]consumer.Position, len(ps))
	for i, p := range ps {
		pos[i] = consumer.Position{Topic: r.k.TopicName, Partition: p.Partition, Offset: p.Offset}
	}
	return r.c.Assign(ctx, pos)
}

func (r *reader[T]) Poll(ctx context.Context, max int, wait time.Duration) ([]keyed.SourceRecord[T], bool, error) {
	recs, err := r.c.Poll(ctx, max, wait)
	if err != nil {
		return nil, false, err
	}
	out := make([]keyed.SourceRecord[T], len(recs))
	for i, rec := range recs {
		v, err := r.k.Decode(rec)
		if err != nil && r.k.OnDecodeError == DeadLetter {
			out[i] = keyed.SourceRecord[T]{Partition: rec.Partition, Offset: rec.Offset, Key: rec.Key, Bad: &keyed.BadRecord{
				Topic: rec.Topic, Partition: rec.Partition, Offset: rec.Offset, Key: rec.Key, Value: rec.Value, Timestamp: rec.Timestamp, Err: err}}
			continue
		}
		if err != nil {
			return nil, false, &consumer.OffsetError{Topic: rec.Topic, Partition: rec.Partition, Offset: rec.Offset, Err: fmt.Errorf("decode: %w", err)}
		}
		out[i] = keyed.SourceRecord[T]{Partition: rec.Partition, Offset: rec.Offset, Key: rec.Key, Value: v}
	}
	return out, false, nil
}

func (r *reader[T]) Close() error { return r.c.Close() }
