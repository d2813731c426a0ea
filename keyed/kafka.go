package keyed

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kordproject/kord/checkpoint"
	"github.com/kordproject/kord/consumer"
	"github.com/kordproject/kord/producer"
)

// KafkaSource reads a Kafka topic as a keyed.Source: each source task has
// its own assign-only consumer (consumer.Source), positions are concrete
// offsets kept in checkpoints, and nothing is ever committed by the
// consumer. A fresh start reads from StartFrom (default the log start). A record whose value
// cannot be decoded fails the job with topic, partition and offset, or,
// with OnDecodeError = DeadLetter, goes to the sink's dead-letter topic in
// the transaction that commits its offset, and is counted
// (Job.DeadLetters).
type KafkaSource[T any] struct {
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

// Policy says what a record that can never be processed does.
type Policy int

const (
	// Fail fails the job with an error naming the record.
	Fail Policy = iota
	// DeadLetter sends the record to the sink's dead-letter topic, exactly
	// once, and counts it.
	DeadLetter
)

func (k *KafkaSource[T]) sendsDeadLetters() bool { return k.OnDecodeError == DeadLetter }

// NewKafkaSource returns a source reading topic.
func NewKafkaSource[T any](brokers, topic string, decode func(rec consumer.Record) (T, error)) *KafkaSource[T] {
	return &KafkaSource[T]{Brokers: brokers, TopicName: topic, Decode: decode}
}

func (k *KafkaSource[T]) consumer() (*consumer.Source, error) {
	opts := []consumer.Opt{consumer.Brokers(k.Brokers)}
	if k.Logger != nil {
		opts = append(opts, consumer.Logger(k.Logger))
	}
	for key, v := range k.Settings {
		opts = append(opts, consumer.Set(key, v))
	}
	return consumer.New(opts...)
}

// Topic implements Source.
func (k *KafkaSource[T]) Topic() string { return k.TopicName }

// Partitions implements Source.
func (k *KafkaSource[T]) Partitions(ctx context.Context) ([]int32, error) {
	c, err := k.consumer()
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.Partitions(ctx, k.TopicName)
}

// Start implements Source: for a fresh start, each partition's offset by
// StartFrom (default consumer.Earliest), resolved to concrete offsets that
// checkpoint 0 records.
func (k *KafkaSource[T]) Start(ctx context.Context, partitions []int32) ([]Position, error) {
	c, err := k.consumer()
	if err != nil {
		return nil, err
	}
	defer c.Close()
	all, err := c.Resolve(ctx, k.TopicName, k.StartFrom)
	if err != nil {
		return nil, err
	}
	at := make(map[int32]int64, len(all))
	for _, p := range all {
		at[p.Partition] = p.Offset
	}
	out := make([]Position, len(partitions))
	for i, p := range partitions {
		off, ok := at[p]
		if !ok {
			return nil, fmt.Errorf("keyed: kafka source %s: partition %d not found when resolving %s", k.TopicName, p, k.StartFrom)
		}
		out[i] = Position{Partition: p, Offset: off}
	}
	return out, nil
}

// StartNew implements NewPartitionStarter: partitions created after the
// job started are read from their log start (as Flink's Kafka source
// reads newly discovered partitions from the earliest offset).
func (k *KafkaSource[T]) StartNew(ctx context.Context, partitions []int32) ([]Position, error) {
	k2 := *k
	k2.StartFrom = consumer.Earliest
	return k2.Start(ctx, partitions)
}

// Reader implements Source.
func (k *KafkaSource[T]) Reader(context.Context) (Reader[T], error) {
	c, err := k.consumer()
	if err != nil {
		return nil, err
	}
	return &kafkaReader[T]{k: k, c: c}, nil
}

type kafkaReader[T any] struct {
	k *KafkaSource[T]
	c *consumer.Source
}

func (r *kafkaReader[T]) Assign(ctx context.Context, ps []Position) error {
	pos := make([]consumer.Position, len(ps))
	for i, p := range ps {
		pos[i] = consumer.Position{Topic: r.k.TopicName, Partition: p.Partition, Offset: p.Offset}
	}
	return r.c.Assign(ctx, pos)
}

func (r *kafkaReader[T]) Poll(ctx context.Context, max int, wait time.Duration) ([]SourceRecord[T], bool, error) {
	recs, err := r.c.Poll(ctx, max, wait)
	if err != nil {
		return nil, false, err
	}
	out := make([]SourceRecord[T], len(recs))
	for i, rec := range recs {
		v, err := r.k.Decode(rec)
		if err != nil && r.k.OnDecodeError == DeadLetter {
			out[i] = SourceRecord[T]{Partition: rec.Partition, Offset: rec.Offset, Key: rec.Key, Bad: &BadRecord{
				Topic: rec.Topic, Partition: rec.Partition, Offset: rec.Offset, Key: rec.Key, Value: rec.Value, Timestamp: rec.Timestamp, Err: err}}
			continue
		}
		if err != nil {
			return nil, false, &consumer.OffsetError{Topic: rec.Topic, Partition: rec.Partition, Offset: rec.Offset, Err: fmt.Errorf("decode: %w", err)}
		}
		out[i] = SourceRecord[T]{Partition: rec.Partition, Offset: rec.Offset, Key: rec.Key, Value: v}
	}
	return out, false, nil
}

func (r *kafkaReader[T]) Close() error { return r.c.Close() }

// KafkaSink writes a job's output to a Kafka topic exactly once, with one
// transactional producer per job (DESIGN.md, "Exactly-once to Kafka with
// librdkafka"): records of the checkpoint in flight go into the open
// transaction; records after its barrier wait in a bounded epoch buffer;
// Commit sends the checkpoint's source offsets to the commit group with the
// commit record kord1;run=R;ckpt=n as offset metadata, commits, begins the
// next transaction and drains the buffer into it. Recorded reads that
// commit record back (with stable offsets), so recovery restores exactly the
// checkpoint Kafka committed. Reset replaces the producer: its
// InitTransactions fences every older one and completes or aborts what it
// left.
type KafkaSink[T any] struct {
	Brokers string
	Topic   string
	// Job names the transactional.id "kord.<Job>" and commit group
	// "kord.<Job>.commit".
	Job string
	// Inputs are the source topics whose offsets the commit group holds.
	Inputs []string
	// Encode turns a result into the record key and value.
	Encode func(v T) (key, value []byte, err error)
	// TopicOf, if set, routes a result to another topic (a side output:
	// alerts beside counts, say); "" means Topic. Every topic is written
	// by the same transactional producer, so side outputs commit with the
	// main output and the dead letters, exactly once. Name the topics in
	// SideTopics so that Reset checks they exist.
	TopicOf    func(v T) string
	SideTopics []string
	// EpochBuffer bounds the records held after a barrier until the commit;
	// Write blocks while it is full. Default 100,000.
	EpochBuffer int
	// ProducerSettings are librdkafka producer settings (e.g.
	// transaction.timeout.ms).
	ProducerSettings map[string]string
	Logger           *slog.Logger
	// DeadLetterTopic receives, in the same transactions as the output,
	// the input records a source could not decode (with OnDecodeError =
	// DeadLetter) and, with OnTooLarge = DeadLetter, a stand-in for each
	// output record too large to write. Each carries headers naming where
	// it came from and why (kord.dlq.*).
	DeadLetterTopic string
	// AtLeastOnce writes output at once with an idempotent, non
	// transactional producer instead of in transactions: Commit flushes
	// every record written so far, then commits the checkpoint's offsets
	// and commit record to the commit group. Output is never lost; after a
	// failure the output since the last commit is written again.
	AtLeastOnce bool
	// InitTimeout bounds Reset's wait for the brokers (metadata and
	// InitTransactions). Default 30 s.
	InitTimeout time.Duration
	// OnTooLarge says what an output record larger than the producer's
	// message.max.bytes does: Fail (default), or DeadLetter: a record
	// with its key, no value, and headers giving its size and the error
	// goes to DeadLetterTopic. Either way no transaction is aborted
	// over it again and again. (librdkafka refuses such a record when it
	// is produced; keep message.max.bytes at or below the output topic's
	// max.message.bytes, as the defaults are, so the broker never refuses
	// one later.)
	OnTooLarge Policy

	mu        sync.Mutex
	room      *sync.Cond
	p         *producer.Producer[[]byte, []byte]
	committed uint64
	buffer    []producer.Record[[]byte, []byte]
	bufEpochs []uint64
	err       error
	tooLarge  atomic.Int64
	commits   *consumer.Source // at-least-once: commits to the commit group
}

// NewKafkaSink returns a sink writing topic for job, whose input topics
// are inputs.
func NewKafkaSink[T any](brokers, topic, job string, inputs []string, encode func(T) ([]byte, []byte, error)) *KafkaSink[T] {
	return &KafkaSink[T]{Brokers: brokers, Topic: topic, Job: job, Inputs: inputs, Encode: encode}
}

func (s *KafkaSink[T]) group() string { return "kord." + s.Job + ".commit" }

// Reset implements Sink: a new producer, fenced in, with a transaction
// begun, after checking that the output and dead-letter topics exist (an
// idle job would otherwise learn it only at its first result). Bounded by
// ctx and InitTimeout.
func (s *KafkaSink[T]) Reset(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.room == nil {
		s.room = sync.NewCond(&s.mu)
	}
	if s.EpochBuffer <= 0 {
		s.EpochBuffer = 100_000
	}
	if s.p != nil {
		_ = s.p.Close()
		s.p = nil
	}
	if s.commits != nil {
		s.commits.Close()
		s.commits = nil
	}
	s.buffer, s.bufEpochs, s.err = nil, nil, nil
	opts := []producer.Opt{producer.Brokers(s.Brokers), producer.CloseTimeout(5 * time.Second)}
	if !s.AtLeastOnce {
		// Exactly-once: a failed record fails the transaction's commit,
		// so per-record delivery reports are not needed.
		opts = append(opts, producer.TransactionalID("kord."+s.Job), producer.CommitReports())
	}
	if s.Logger != nil {
		opts = append(opts, producer.Logger(s.Logger))
	}
	timeout := s.InitTimeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	ictx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	settings, err := s.sizedSettings(ictx)
	if err != nil {
		return err
	}
	for k, v := range settings {
		opts = append(opts, producer.Set(k, v))
	}
	p, err := producer.New(producer.Bytes(), producer.Bytes(), opts...)
	if err != nil {
		return err
	}
	for _, topic := range append([]string{s.Topic, s.DeadLetterTopic}, s.SideTopics...) {
		if topic == "" {
			continue
		}
		if _, err := p.Partition(ictx, producer.Record[[]byte, []byte]{Topic: topic}); err != nil {
			p.Close()
			return fmt.Errorf("keyed: kafka sink %s (brokers %s): %w", s.Topic, s.Brokers, err)
		}
	}
	if s.AtLeastOnce {
		c, err := consumer.New(consumer.Brokers(s.Brokers), consumer.Logger(s.logger()))
		if err != nil {
			p.Close()
			return err
		}
		s.p, s.commits = p, c
		s.room.Broadcast()
		return nil
	}
	if err := p.InitTransactions(ictx); err != nil {
		p.Close()
		if ctx.Err() == nil && ictx.Err() != nil {
			return fmt.Errorf("keyed: kafka sink %s: no transaction coordinator reached at %s within %v: %w", s.Topic, s.Brokers, timeout, err)
		}
		return fmt.Errorf("keyed: kafka sink %s (brokers %s): %w", s.Topic, s.Brokers, err)
	}
	if err := p.BeginTransaction(); err != nil {
		p.Close()
		return err
	}
	s.p = p
	s.room.Broadcast()
	return nil
}

// sizedSettings returns ProducerSettings with message.max.bytes (and
// batch.size) no larger than the smallest max.message.bytes of the topics
// the sink writes: librdkafka then refuses a record the broker would
// refuse, when it is produced, where OnTooLarge classifies it, instead of
// the broker failing every transaction that carries it.
func (s *KafkaSink[T]) sizedSettings(ctx context.Context) (map[string]string, error) {
	c, err := consumer.New(consumer.Brokers(s.Brokers), consumer.Logger(s.logger()))
	if err != nil {
		return nil, err
	}
	defer c.Close()
	limit := int64(-1)
	for _, topic := range append([]string{s.Topic, s.DeadLetterTopic}, s.SideTopics...) {
		if topic == "" {
			continue
		}
		if _, err := c.Partitions(ctx, topic); err != nil {
			if errors.Is(err, consumer.ErrUnknownTopic) {
				err = fmt.Errorf("%w: %w", producer.ErrUnknownTopic, err)
			}
			return nil, fmt.Errorf("keyed: kafka sink %s (brokers %s): %w", s.Topic, s.Brokers, err)
		}
		v, err := c.TopicConfig(ctx, topic, "max.message.bytes")
		if err != nil {
			return nil, fmt.Errorf("keyed: kafka sink %s (brokers %s): %w", s.Topic, s.Brokers, err)
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("keyed: kafka sink %s: topic %s: max.message.bytes %q: %w", s.Topic, topic, v, err)
		}
		if limit < 0 || n < limit {
			limit = n
		}
	}
	out := make(map[string]string, len(s.ProducerSettings)+2)
	for k, v := range s.ProducerSettings {
		out[k] = v
	}
	if limit <= 0 {
		return out, nil
	}
	own := int64(1_000_000) // librdkafka's default message.max.bytes
	if v, ok := out["message.max.bytes"]; ok {
		if own, err = strconv.ParseInt(v, 10, 64); err != nil {
			return nil, fmt.Errorf("keyed: kafka sink %s: message.max.bytes %q: %w", s.Topic, v, err)
		}
	}
	if limit < own {
		out["message.max.bytes"] = strconv.FormatInt(limit, 10)
		if _, ok := out["batch.size"]; !ok {
			out["batch.size"] = strconv.FormatInt(limit, 10)
		}
	}
	return out, nil
}

// Recorded implements Sink: the checkpoint Kafka's commit group records.
func (s *KafkaSink[T]) Recorded(ctx context.Context) (*checkpoint.CheckpointRef, error) {
	c, err := consumer.New(consumer.Brokers(s.Brokers))
	if err != nil {
		return nil, err
	}
	defer c.Close()
	var tps []consumer.TopicPartition
	for _, topic := range s.Inputs {
		parts, err := c.Partitions(ctx, topic)
		if err != nil {
			return nil, err
		}
		for _, p := range parts {
			tps = append(tps, consumer.TopicPartition{Topic: topic, Partition: p})
		}
	}
	offs, err := c.GroupOffsets(ctx, s.group(), tps)
	if err != nil {
		return nil, err
	}
	md := make([]string, len(offs))
	for i, o := range offs {
		md[i] = o.Metadata
	}
	rec, err := checkpoint.CommitRecordOf(md)
	if err != nil || rec == nil {
		return nil, err
	}
	s.mu.Lock()
	s.committed = rec.Checkpoint
	s.mu.Unlock()
	return &checkpoint.CheckpointRef{Run: rec.Run, ID: rec.Checkpoint}, nil
}

// Write implements Sink.
func (s *KafkaSink[T]) Write(epoch uint64, v T) error {
	key, val, err := s.Encode(v)
	if err != nil {
		return fmt.Errorf("keyed: kafka sink %s: encode: %w", s.Topic, err)
	}
	topic := s.Topic
	if s.TopicOf != nil {
		if t := s.TopicOf(v); t != "" {
			topic = t
		}
	}
	rec := producer.Record[[]byte, []byte]{Topic: topic, Key: key, Value: val}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return s.err
	}
	return s.write(epoch, rec)
}

// write sends rec into the open transaction if its epoch belongs there,
// or holds it in the epoch buffer; called with s.mu held.
func (s *KafkaSink[T]) write(epoch uint64, rec producer.Record[[]byte, []byte]) error {
	if s.AtLeastOnce || epoch <= s.committed+1 {
		return s.produce(context.Background(), rec)
	}
	for len(s.buffer) >= s.EpochBuffer && s.err == nil {
		s.room.Wait() // backpressure until the commit drains the buffer
	}
	s.buffer = append(s.buffer, rec)
	s.bufEpochs = append(s.bufEpochs, epoch)
	return s.err
}

// DeadLetter implements DeadLetterSink: b goes to DeadLetterTopic with
// epoch's output.
func (s *KafkaSink[T]) DeadLetter(epoch uint64, b BadRecord) error {
	if s.DeadLetterTopic == "" {
		return fmt.Errorf("keyed: kafka sink %s: %s/%d@%d cannot be decoded and the sink has no DeadLetterTopic: %w", s.Topic, b.Topic, b.Partition, b.Offset, b.Err)
	}
	rec := producer.Record[[]byte, []byte]{Topic: s.DeadLetterTopic, Key: b.Key, Value: b.Value, Timestamp: b.Timestamp, Headers: []producer.Header{
		{Key: "kord.dlq.topic", Value: []byte(b.Topic)},
		{Key: "kord.dlq.partition", Value: []byte(strconv.Itoa(int(b.Partition)))},
		{Key: "kord.dlq.offset", Value: []byte(strconv.FormatInt(b.Offset, 10))},
		{Key: "kord.dlq.error", Value: []byte(b.Err.Error())},
	}}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return s.err
	}
	return s.write(epoch, rec)
}

// produce writes rec into the open transaction. A record librdkafka
// refuses as too large follows OnTooLarge; called with s.mu held.
func (s *KafkaSink[T]) produce(ctx context.Context, rec producer.Record[[]byte, []byte]) error {
	err := s.p.Produce(ctx, rec, nil)
	if producer.RequiresAbort(err) && !s.AtLeastOnce {
		// The transaction failed under us (a newer copy of the job may have
		// fenced this one): abort it on this producer, so that a zombie
		// stops with ErrFenced instead of restarting and fencing the live
		// copy.
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		err = s.p.AbortIfRequired(actx, err)
		cancel()
		s.err = fmt.Errorf("keyed: kafka sink %s: %w", s.Topic, err)
		s.room.Broadcast()
		return s.err
	}
	if err == nil || !errors.Is(err, producer.ErrRecordTooLarge) {
		return err
	}
	if s.OnTooLarge != DeadLetter || s.DeadLetterTopic == "" || rec.Topic == s.DeadLetterTopic {
		return fmt.Errorf("keyed: kafka sink: output record for %s with key %q cannot be written (OnTooLarge is Fail, or no DeadLetterTopic): %w", rec.Topic, rec.Key, err)
	}
	s.tooLarge.Add(1)
	if s.Logger != nil {
		s.Logger.Warn("keyed: kafka sink: output record too large; a stand-in goes to the dead-letter topic", "topic", rec.Topic, "key", string(rec.Key), "bytes", len(rec.Key)+len(rec.Value), "dead_letter_topic", s.DeadLetterTopic)
	}
	return s.p.Produce(ctx, producer.Record[[]byte, []byte]{Topic: s.DeadLetterTopic, Key: rec.Key, Headers: []producer.Header{
		{Key: "kord.dlq.topic", Value: []byte(rec.Topic)},
		{Key: "kord.dlq.size", Value: []byte(strconv.Itoa(len(rec.Key) + len(rec.Value)))},
		{Key: "kord.dlq.error", Value: []byte(err.Error())},
	}}, nil)
}

// TooLarge returns how many output records were too large and went to the
// dead-letter topic as stand-ins (OnTooLarge = DeadLetter), counting again
// those written again after a restart.
func (s *KafkaSink[T]) TooLarge() int64 { return s.tooLarge.Load() }

// BufferLen returns how many records wait in the epoch buffer.
func (s *KafkaSink[T]) BufferLen() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.buffer)
}

// Commit implements Sink.
func (s *KafkaSink[T]) Commit(ctx context.Context, ref checkpoint.CheckpointRef, offsets []checkpoint.PartitionOffset) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.p == nil {
		return fmt.Errorf("keyed: kafka sink %s: not reset", s.Topic)
	}
	meta := checkpoint.CommitRecord{Run: ref.Run, Checkpoint: ref.ID, Job: s.Job}.String()
	offs := make([]producer.Offset, len(offsets))
	for i, o := range offsets {
		offs[i] = producer.Offset{Topic: o.Topic, Partition: o.Partition, Offset: o.Offset, Metadata: meta}
	}
	fail := func(err error) error {
		// The outcome may be unknown: this producer is done (Reset makes a
		// new one); nothing more is written through it. An abortable error
		// is aborted here first, so that a zombie copy of the job learns it
		// is fenced instead of fencing the live copy on restart.
		if !s.AtLeastOnce {
			actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			err = s.p.AbortIfRequired(actx, err)
			cancel()
		}
		s.err = fmt.Errorf("keyed: kafka sink %s: commit of checkpoint %s: %w", s.Topic, ref, err)
		s.room.Broadcast()
		return s.err
	}
	if s.AtLeastOnce {
		// Everything written so far (all output up to the checkpoint's
		// barrier, and perhaps some after it) is delivered before the
		// offsets that cover its input are committed.
		if err := s.p.Flush(ctx); err != nil {
			return fail(err)
		}
		cs := make([]consumer.Committed, len(offs))
		for i, o := range offs {
			cs[i] = consumer.Committed{Topic: o.Topic, Partition: o.Partition, Offset: o.Offset, Metadata: o.Metadata}
		}
		if err := s.commits.CommitGroupOffsets(ctx, s.group(), cs); err != nil {
			return fail(err)
		}
		s.committed = ref.ID
		return nil
	}
	// The transaction carries the output of every epoch ≤ ref.ID. After an
	// aborted checkpoint some of it still waits in the buffer (the epoch
	// after the aborted barrier): it goes in now, or it would commit only
	// with a later checkpoint than the offsets that cover its input.
	if err := s.drain(ctx, ref.ID); err != nil {
		return fail(err)
	}
	if err := s.p.SendOffsetsToTransaction(ctx, s.group(), offs); err != nil {
		return fail(err)
	}
	if err := s.p.CommitTransaction(ctx); err != nil {
		return fail(err)
	}
	s.committed = ref.ID
	if err := s.p.BeginTransaction(); err != nil {
		return fail(err)
	}
	// Drain what waited for this commit; records of later epochs (none with
	// one checkpoint in flight) would stay.
	if err := s.drain(ctx, s.committed+1); err != nil {
		return fail(err)
	}
	s.room.Broadcast()
	return nil
}

// drain produces the buffered records of epochs ≤ upTo into the open
// transaction, in the order they were written, and keeps the rest.
func (s *KafkaSink[T]) drain(ctx context.Context, upTo uint64) error {
	keep := s.buffer[:0]
	keepE := s.bufEpochs[:0]
	for i, rec := range s.buffer {
		if s.bufEpochs[i] <= upTo {
			if err := s.produce(ctx, rec); err != nil {
				return err
			}
		} else {
			keep, keepE = append(keep, rec), append(keepE, s.bufEpochs[i])
		}
	}
	clear(s.buffer[len(keep):])
	s.buffer, s.bufEpochs = keep, keepE
	return nil
}

// Close aborts the open transaction, if any record is in it, and closes
// the producer.
func (s *KafkaSink[T]) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.p == nil {
		return nil
	}
	if s.commits != nil {
		s.commits.Close()
		s.commits = nil
	}
	if !s.AtLeastOnce {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.p.AbortTransaction(ctx)
	}
	err := s.p.Close()
	s.p = nil
	return err
}

func (s *KafkaSink[T]) logger() *slog.Logger {
	if s.Logger == nil {
		return slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return s.Logger
}

// TransactionTimeout formats c.TransactionTimeout() for the sink's
// ProducerSettings "transaction.timeout.ms".
func TransactionTimeout(c checkpoint.Config) string {
	return strconv.FormatInt(c.TransactionTimeout().Milliseconds(), 10)
}
