package kafkaio

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/kordproject/kord/checkpoint"
	"github.com/kordproject/kord/consumer"
	"github.com/kordproject/kord/keyed"
	"github.com/kordproject/kord/keyed/connector"
	"github.com/kordproject/kord/serde"
)

// source reads a Kafka topic as a connector.Source (Flink's KafkaSource, read
// committed): each source task has its own assign-only consumer, positions
// are concrete offsets kept in the job's checkpoints, and nothing is ever
// committed by the consumer. A fresh start reads from StartFrom (default
// the log start). A record whose value cannot be decoded goes to the sink's
// dead letters (option DeadLetterTopic) in the transaction that commits its
// offset, and is counted (keyed.Job.DeadLetters); with no dead-letter topic
// it fails the job, naming its topic, partition and offset.
type source[T any] struct {
	c      *Client
	topic  string
	values serde.Serde[T]
	cfg    options
	// hop: the source of a hop topic (connector.Hops), of
	// connector.HopRecords, marks included; values is nil.
	hop bool

	once    sync.Once
	ends    map[int32]int64 // Bounded: the end of each partition, resolved once
	endsErr error

	hdr serde.HeaderSerde[T] // values, when they read headers

	// live are the readers open now, whose lag Collect reports.
	mu   sync.Mutex
	live map[*reader[T]]struct{}
}

var (
	_ connector.Source[int]         = (*source[int])(nil)
	_ connector.NewPartitionStarter = (*source[int])(nil)
	_ connector.Reader[int]         = (*reader[int])(nil)
	_ connector.DeadLetterSink      = (*sink[int])(nil)
	_ connector.Sink[int]           = (*sink[int])(nil)
	_ connector.Forgetter           = (*sink[int])(nil)
	_ interface{ Close() error }    = (*sink[int])(nil)
)

// NewSource returns a source reading topic through c, decoding each
// record's value with values (serde.JSON, serde.Avro, a serde of the
// user's). A null value is decoded as values decides: serde.Bytes gives
// nil, the other serdes of package serde refuse it (the record goes to the
// dead letters, or fails the job). Options: [StartFrom], [Bounded],
// [CheckPlacement], [PartitionMetrics], [Set] (its consumers' settings),
// [Logger].
func NewSource[T any](c *Client, topic string, values serde.Serde[T], opts ...Opt) connector.Source[T] {
	k := &source[T]{c: c, topic: topic, values: values, cfg: apply(toSource, opts)}
	k.hdr, _ = values.(serde.HeaderSerde[T])
	return k
}

// Validate implements keyed's check of a source before the job runs.
func (k *source[T]) Validate() error {
	var errs []error
	if k.c == nil || k.c.BrokerList() == "" {
		errs = append(errs, sourceErrorf(k.topic, "no brokers (kafkaio.Brokers, or bootstrap.servers, in its Client)"))
	}
	if k.topic == "" {
		errs = append(errs, errors.New("kafkaio: source: no topic"))
	}
	if k.values == nil && !k.hop {
		errs = append(errs, sourceErrorf(k.topic, "no serde for its values"))
	}
	errs = append(errs, k.cfg.misplaced(fmt.Sprintf("source of topic %q", k.topic)))
	return errors.Join(errs...)
}

// decode decodes rec's value, with its headers when the values' serde
// reads them (serde.HeaderSerde).
func (k *source[T]) decode(rec *consumer.Record) (T, error) {
	h := k.hdr
	if h == nil {
		return k.values.Decode(rec.Value)
	}
	hs := make([]serde.Header, len(rec.Headers))
	for i, x := range rec.Headers {
		hs[i] = serde.Header{Key: x.Key, Value: x.Value}
	}
	return h.DecodeHeaders(hs, rec.Value)
}

func (k *source[T]) consumer() (*consumer.Source, error) {
	c, err := k.c.consumer(k.cfg.log, k.cfg.settings)
	return c, classify(err)
}

// Topic implements connector.Source.
func (k *source[T]) Topic() string { return k.topic }

// Partitions implements connector.Source.
func (k *source[T]) Partitions(ctx context.Context) ([]int32, error) {
	c, err := k.consumer()
	if err != nil {
		return nil, err
	}
	defer c.Close()
	ps, err := c.Partitions(ctx, k.topic)
	return ps, classify(err)
}

// Provenance implements connector.Identified: the cluster id of the brokers
// the source reads and the topic's id there (KIP-516). Checkpoints record
// them, and a restore onto another cluster or a recreated topic is refused
// (checkpoint.ErrProvenance).
func (k *source[T]) Provenance(ctx context.Context) (checkpoint.SourceRef, error) {
	c, err := k.c.admin(k.cfg.log)
	if err != nil {
		return checkpoint.SourceRef{}, err
	}
	defer c.Close()
	cluster, id, err := c.Identity(ctx, k.topic)
	if err != nil {
		return checkpoint.SourceRef{}, classify(err)
	}
	return checkpoint.SourceRef{Topic: k.topic, Cluster: cluster, TopicID: id}, nil
}

// Start implements connector.Source: for a fresh start, each partition's
// offset by StartFrom (default consumer.Earliest), resolved to concrete
// offsets that checkpoint 0 records.
func (k *source[T]) Start(ctx context.Context, partitions []int32) ([]connector.Position, error) {
	return k.start(ctx, partitions, k.cfg.start)
}

func (k *source[T]) start(ctx context.Context, partitions []int32, from consumer.Start) ([]connector.Position, error) {
	c, err := k.consumer()
	if err != nil {
		return nil, err
	}
	defer c.Close()
	all, err := c.Resolve(ctx, k.topic, from)
	if err != nil {
		return nil, classify(err)
	}
	at := make(map[int32]int64, len(all))
	for _, p := range all {
		at[p.Partition] = p.Offset
	}
	out := make([]connector.Position, len(partitions))
	for i, p := range partitions {
		off, ok := at[p]
		if !ok {
			return nil, sourceErrorf(k.topic, "partition %d not found when resolving %s", p, from)
		}
		out[i] = connector.Position{Partition: p, Offset: off}
	}
	return out, nil
}

// StartNew implements connector.NewPartitionStarter: partitions created after
// the job started are read from their log start (as Flink's Kafka source
// reads newly discovered partitions from the earliest offset).
func (k *source[T]) StartNew(ctx context.Context, partitions []int32) ([]connector.Position, error) {
	return k.start(ctx, partitions, consumer.Earliest)
}

// bounds resolves, once, the end of every partition of a Bounded source.
func (k *source[T]) bounds(ctx context.Context) (map[int32]int64, error) {
	k.once.Do(func() {
		c, err := k.consumer()
		if err != nil {
			k.endsErr = err
			return
		}
		defer c.Close()
		ends, err := c.Resolve(ctx, k.topic, consumer.Latest)
		if err != nil {
			k.endsErr = classify(sourceErrorf(k.topic, "resolving its end (Bounded): %w", err))
			return
		}
		k.ends = map[int32]int64{}
		for _, e := range ends {
			k.ends[e.Partition] = e.Offset
		}
	})
	return k.ends, k.endsErr
}

// Reader implements connector.Source.
func (k *source[T]) Reader(ctx context.Context) (connector.Reader[T], error) {
	var ends map[int32]int64
	if k.cfg.bounded {
		var err error
		if ends, err = k.bounds(ctx); err != nil {
			return nil, err
		}
	}
	c, err := k.consumer()
	if err != nil {
		return nil, err
	}
	r := &reader[T]{k: k, c: c, bounds: ends}
	k.mu.Lock()
	if k.live == nil {
		k.live = map[*reader[T]]struct{}{}
	}
	k.live[r] = struct{}{}
	k.mu.Unlock()
	return r, nil
}

type reader[T any] struct {
	k      *source[T]
	c      *consumer.Source
	bounds map[int32]int64     // Bounded: every partition's end
	parts  int                 // CheckPlacement: the topic's partition count at Assign
	ends   []consumer.Position // the assigned partitions' ends
	buf    []consumer.Record   // Poll's, reused
	out    []connector.SourceRecord[T]
}

func (r *reader[T]) Assign(ctx context.Context, ps []connector.Position) error {
	pos := make([]consumer.Position, len(ps))
	r.ends = r.ends[:0]
	for i, p := range ps {
		pos[i] = consumer.Position{Topic: r.k.topic, Partition: p.Partition, Offset: p.Offset}
		if r.bounds != nil {
			// A partition that appeared later has no recorded end: its
			// end is where it starts, so nothing of it is read.
			end, ok := r.bounds[p.Partition]
			if !ok {
				end = p.Offset
			}
			r.ends = append(r.ends, consumer.Position{Topic: r.k.topic, Partition: p.Partition, Offset: end})
		}
	}
	if r.k.cfg.check != nil && !r.k.hop {
		ps, err := r.c.Partitions(ctx, r.k.topic)
		if err != nil {
			return classify(err)
		}
		r.parts = len(ps)
	}
	return classify(r.c.Assign(ctx, pos))
}

func (r *reader[T]) Poll(ctx context.Context, max int, wait time.Duration) ([]connector.SourceRecord[T], bool, error) {
	if r.bounds != nil && r.c.Reached(r.ends) {
		return nil, true, nil
	}
	recs, err := r.c.PollAppend(ctx, r.buf[:0], max, wait)
	// Drop the records' references once they are decoded, and keep the
	// slice for the next Poll.
	defer func() { clear(recs); r.buf = recs[:0] }()
	if err != nil {
		return nil, false, classify(err)
	}
	// The engine is done with the last Poll's records (connector.Reader).
	clear(r.out)
	out := r.out[:0]
	defer func() { r.out = out }()
	for i := range recs {
		rec := &recs[i]
		if r.bounds != nil && rec.Offset >= r.end(rec.Partition) {
			continue // past the bound: never read (its position stays put)
		}
		if r.parts > 0 {
			if err := r.k.cfg.check.check(r.k.c.logger(r.k.cfg.log), r.parts, rec); err != nil {
				return nil, false, err
			}
		}
		if r.k.hop {
			hr, err := hopRecord(*rec)
			if err != nil {
				return nil, false, keyed.Permanent(fmt.Errorf("kafkaio: %s[%d] offset %d: %w", rec.Topic, rec.Partition, rec.Offset, err))
			}
			out = append(out, any(hr).(connector.SourceRecord[T]))
			continue
		}
		v, err := r.k.decode(rec)
		if err != nil {
			out = append(out, connector.SourceRecord[T]{Partition: rec.Partition, Offset: rec.Offset, Key: rec.Key, Bad: &connector.BadRecord{
				Topic: rec.Topic, Partition: rec.Partition, Offset: rec.Offset, Key: rec.Key, Value: rec.Value, Timestamp: rec.Timestamp,
				Err: &consumer.OffsetError{Topic: rec.Topic, Partition: rec.Partition, Offset: rec.Offset, Err: fmt.Errorf("decode: %w", err)}}})
			continue
		}
		out = append(out, connector.SourceRecord[T]{Partition: rec.Partition, Offset: rec.Offset, Key: rec.Key, Value: v, Timestamp: rec.Timestamp})
	}
	return out, r.bounds != nil && r.c.Reached(r.ends), nil
}

// Behind implements connector.BacklogReader (consumer.Source.Behind): records
// wait past the reader's position, not fetched yet or behind a transaction
// still open, so Stream.Idleness does not count the partition idle. A
// bounded reader at its partition's bound has nothing more to deliver.
func (r *reader[T]) Behind(ctx context.Context, p int32) (bool, error) {
	if r.bounds != nil {
		for _, pos := range r.c.Positions() {
			if pos.Partition == p && pos.Offset >= r.end(p) {
				return false, nil
			}
		}
	}
	b, err := r.c.Behind(ctx, consumer.TopicPartition{Topic: r.k.topic, Partition: p})
	return b, classify(err)
}

var _ connector.BacklogReader = (*reader[int])(nil)

// Position implements connector.PositionReader: past the transaction
// markers the consumer read over (consumer.Source.Progress). A bounded
// reader stops at its bound and knows no further.
func (r *reader[T]) Position(p int32) int64 {
	if r.bounds != nil {
		return -1
	}
	return r.c.Progress(consumer.TopicPartition{Topic: r.k.topic, Partition: p})
}

var _ connector.PositionReader = (*reader[int])(nil)

func (r *reader[T]) end(p int32) int64 {
	for _, e := range r.ends {
		if e.Partition == p {
			return e.Offset
		}
	}
	return -1
}

func (r *reader[T]) Close() error {
	r.k.mu.Lock()
	delete(r.k.live, r)
	r.k.mu.Unlock()
	return r.c.Close()
}
