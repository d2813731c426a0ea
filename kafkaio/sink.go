package kafkaio

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
	"github.com/kordproject/kord/internal/failpoint"
	"github.com/kordproject/kord/keyed"
	"github.com/kordproject/kord/producer"
)

// Sink writes a job's output to a Kafka topic, exactly once in the job's
// exactly-once mode, with one transactional producer per job (see the
// package doc for the protocol), and at least once in its at-least-once
// mode: output written at once by an idempotent producer, flushed at each
// checkpoint before the checkpoint's offsets and commit record are
// committed to the commit group.
//
// The job gives the sink its name, its input topics, its mode and its
// transaction timeout (keyed.SinkInfo): transactional.id "kord.<job>",
// commit group "kord.<job>.commit", transaction.timeout.ms derived from the
// checkpoint settings.
type Sink[T any] struct {
	Brokers string
	Topic   string
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
	// Write blocks while it is full (backpressure). Default 100,000.
	EpochBuffer int
	// ProducerSettings are librdkafka producer settings. transactional.id
	// and transaction.timeout.ms are derived from the job (its name, its
	// checkpoint settings) and refused here; message.timeout.ms defaults to
	// the transaction timeout and may be set lower, not higher: a record
	// still being retried when its transaction times out would outlive it.
	ProducerSettings map[string]string
	// Logger receives the sink's and its producer's log. Default: the
	// job's logger.
	Logger *slog.Logger
	// DeadLetterTopic receives, in the same transactions as the output,
	// the input records a source could not decode (with OnDecodeError =
	// DeadLetter) and, with OnTooLarge = DeadLetter, a stand-in for each
	// output record too large to write. Each carries headers naming where
	// it came from and why (kord.dlq.*).
	DeadLetterTopic string
	// InitTimeout bounds Reset's wait for the brokers (metadata and
	// InitTransactions). Default 30 s.
	InitTimeout time.Duration
	// OnTooLarge says what an output record larger than the producer's
	// message.max.bytes does: Fail (default), or DeadLetter: a record
	// with its key, no value, and headers giving its size and the error
	// goes to DeadLetterTopic. Either way no transaction is aborted
	// over it again and again. (librdkafka refuses such a record when it
	// is produced; Reset lowers message.max.bytes to the smallest
	// max.message.bytes of the topics written, so the broker never refuses
	// one later.)
	OnTooLarge Policy

	mu        sync.Mutex
	room      chan struct{} // closed and replaced when Write may go on
	info      keyed.SinkInfo
	log       *slog.Logger
	p         *producer.Producer[[]byte, []byte]
	committed uint64
	buffer    []producer.Record[[]byte, []byte]
	bufEpochs []uint64
	err       error // set when the producer may no more be used
	unknown   bool  // err left the transaction's state unknown (or the producer fenced)
	// commitDeadline bounds every Commit: below librdkafka's request
	// timeout, so that librdkafka never sends a commit again by itself.
	commitDeadline time.Duration
	tooLarge       atomic.Int64
	commits        *consumer.Source // at-least-once: commits to the commit group
}

// Set by tests only.
var (
	// testHookBuffered sees the epoch buffer's length after each record
	// buffered.
	testHookBuffered func(n int)
	// testRetrySameProducer breaks the protocol on purpose, to show that
	// the network-fault tests catch it: a commit that failed is retried on
	// the same producer until it succeeds, and the sink goes on with it.
	testRetrySameProducer bool
	// testNoSocketGuard breaks the protocol on purpose: ProducerSettings'
	// socket.timeout.ms is taken as given, even below the commit deadline.
	testNoSocketGuard bool
)

// NewSink returns a sink writing topic.
func NewSink[T any](brokers, topic string, encode func(T) ([]byte, []byte, error)) *Sink[T] {
	return &Sink[T]{Brokers: brokers, Topic: topic, Encode: encode}
}

func (s *Sink[T]) exactlyOnce() bool { return s.info.Mode != checkpoint.AtLeastOnce }

// TransactionalID returns the transactional.id of job's sink.
func TransactionalID(job string) string { return "kord." + job }

// CommitGroup returns the commit group of job's sink, which never has
// members: only the sink's transactions (or, at least once, its offset
// commits) write it.
func CommitGroup(job string) string { return "kord." + job + ".commit" }

// wake lets every waiting Write look again; called with s.mu held.
func (s *Sink[T]) wake() {
	if s.room != nil {
		close(s.room)
	}
	s.room = make(chan struct{})
}

// Reset implements keyed.Sink: a new producer, fenced in, with a
// transaction begun, after checking that the output and dead-letter topics
// exist (an idle job would otherwise learn it only at its first result).
// Its InitTransactions fences every older producer of the job and completes
// a commit one had sent, or aborts what it left. Bounded by ctx and
// InitTimeout.
func (s *Sink[T]) Reset(ctx context.Context, info keyed.SinkInfo) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.info = info
	s.log = s.Logger
	if s.log == nil {
		s.log = info.Logger
	}
	if s.log == nil {
		s.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if s.EpochBuffer <= 0 {
		s.EpochBuffer = 100_000
	}
	s.closeClients(false) // the new producer's InitTransactions aborts what it left
	s.buffer, s.bufEpochs, s.err, s.unknown, s.commitDeadline = nil, nil, nil, false, 0
	s.wake()
	if info.Job == "" || len(info.Inputs) == 0 {
		return keyed.Permanent(fmt.Errorf("%w: kafkaio: sink %s: the job gave no name or no input topics", producer.ErrConfig, s.Topic))
	}
	settings, err := s.checkSettings()
	if err != nil {
		return keyed.Permanent(err)
	}
	opts := []producer.Opt{producer.Brokers(s.Brokers), producer.CloseTimeout(5 * time.Second), producer.Logger(s.log)}
	if s.exactlyOnce() {
		// A failed record fails the transaction's commit, so per-record
		// delivery reports are not needed.
		opts = append(opts, producer.TransactionalID(TransactionalID(info.Job)), producer.CommitReports())
	}
	timeout := s.InitTimeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	ictx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if settings, err = s.sizedSettings(ictx, settings); err != nil {
		return err
	}
	for k, v := range settings {
		opts = append(opts, producer.Set(k, v))
	}
	p, err := producer.New(producer.Bytes(), producer.Bytes(), opts...)
	if err != nil {
		return keyed.Permanent(err)
	}
	for _, topic := range s.topics() {
		if _, err := p.Partition(ictx, producer.Record[[]byte, []byte]{Topic: topic}); err != nil {
			p.Close()
			return fmt.Errorf("kafkaio: sink %s (brokers %s): %w", s.Topic, s.Brokers, err)
		}
	}
	if !s.exactlyOnce() {
		c, err := consumer.New(consumer.Brokers(s.Brokers), consumer.Logger(s.log))
		if err != nil {
			p.Close()
			return err
		}
		s.p, s.commits = p, c
		return nil
	}
	if err := p.InitTransactions(ictx); err != nil {
		p.Close()
		if errors.Is(err, producer.ErrConfig) || errors.Is(err, producer.ErrFenced) {
			return keyed.Permanent(fmt.Errorf("kafkaio: sink %s (brokers %s): %w", s.Topic, s.Brokers, err))
		}
		if ctx.Err() == nil && ictx.Err() != nil {
			return fmt.Errorf("kafkaio: sink %s: no transaction coordinator reached at %s within %v: %w", s.Topic, s.Brokers, timeout, err)
		}
		return fmt.Errorf("kafkaio: sink %s (brokers %s): %w", s.Topic, s.Brokers, err)
	}
	if err := p.BeginTransaction(); err != nil {
		p.Close()
		return err
	}
	s.p = p
	return nil
}

// topics lists every topic the sink writes.
func (s *Sink[T]) topics() []string {
	var out []string
	for _, t := range append([]string{s.Topic, s.DeadLetterTopic}, s.SideTopics...) {
		if t != "" {
			out = append(out, t)
		}
	}
	return out
}

// checkSettings checks ProducerSettings against what the job derives and
// returns them with the derived ones added (DESIGN.md, "Timeouts").
func (s *Sink[T]) checkSettings() (map[string]string, error) {
	out := make(map[string]string, len(s.ProducerSettings)+2)
	for k, v := range s.ProducerSettings {
		out[k] = v
	}
	txn := s.info.TransactionTimeout
	if _, ok := out["transactional.id"]; ok {
		return nil, fmt.Errorf("%w: kafkaio: sink %s: producer setting transactional.id is derived from the job name (%s); remove it",
			producer.ErrConfig, s.Topic, TransactionalID(s.info.Job))
	}
	if _, ok := out["transaction.timeout.ms"]; ok {
		return nil, fmt.Errorf("%w: kafkaio: sink %s: producer setting transaction.timeout.ms is derived from the checkpoint settings (%v now: interval, timeout, min pause and tolerable failures, capped at TransactionMaxTimeout); remove it and change those instead",
			producer.ErrConfig, s.Topic, txn)
	}
	if !s.exactlyOnce() {
		return out, nil
	}
	if txn <= 0 {
		return nil, fmt.Errorf("%w: kafkaio: sink %s: the job gave no transaction timeout", producer.ErrConfig, s.Topic)
	}
	// A shorter message timeout only fails a produce sooner (an abort and
	// a replay), so it is accepted.
	if v, ok := out["message.timeout.ms"]; ok {
		ms, err := strconv.ParseInt(v, 10, 64)
		switch {
		case err != nil || ms < 1:
			return nil, fmt.Errorf("%w: kafkaio: sink %s: producer setting message.timeout.ms %q: want a positive number of milliseconds", producer.ErrConfig, s.Topic, v)
		case time.Duration(ms)*time.Millisecond > txn:
			return nil, fmt.Errorf("%w: kafkaio: sink %s: producer setting message.timeout.ms %d exceeds the transaction timeout %d ms (transaction.timeout.ms, derived from the checkpoint settings); lower it or leave it unset (it defaults to the transaction timeout)",
				producer.ErrConfig, s.Topic, ms, txn.Milliseconds())
		}
	} else {
		out["message.timeout.ms"] = strconv.FormatInt(txn.Milliseconds(), 10)
	}
	out["transaction.timeout.ms"] = strconv.FormatInt(txn.Milliseconds(), 10)
	// librdkafka times out an unanswered request after socket.timeout.ms,
	// reconnects and sends an EndTxn again by itself
	// (rd_kafka_txn_handle_EndTxn retries on __TIMED_OUT and __TRANSPORT),
	// and CommitTransaction then succeeds. If the first EndTxn was only
	// delayed in the network, it can land later on the next transaction of
	// the same producer epoch and commit it half-written: the KIP-890
	// problem, which librdkafka does not solve. So the request timeout must
	// outlast every commit call: the sink gives up first, ends the producer,
	// and the next producer's epoch fences what is still in flight.
	// librdkafka requires socket.timeout.ms <= transaction.timeout.ms + 100.
	commit := s.info.CommitTimeout
	if commit <= 0 {
		return nil, fmt.Errorf("%w: kafkaio: sink %s: the job gave no commit timeout", producer.ErrConfig, s.Topic)
	}
	// librdkafka's maximum socket.timeout.ms is 300 s: a longer checkpoint
	// timeout gives the commit call a shorter deadline instead.
	const maxSocket = 300 * time.Second
	s.commitDeadline = min(commit, maxSocket-5*time.Second)
	if v, ok := out["socket.timeout.ms"]; ok && !testNoSocketGuard {
		ms, err := strconv.ParseInt(v, 10, 64)
		if err != nil || time.Duration(ms)*time.Millisecond <= s.commitDeadline {
			return nil, fmt.Errorf("%w: kafkaio: sink %s: producer setting socket.timeout.ms %q must exceed the commit timeout %d ms (the checkpoint timeout): librdkafka would otherwise send a timed-out commit again by itself while the sink still uses the producer (DESIGN.md, on KIP-890); leave it unset",
				producer.ErrConfig, s.Topic, v, s.commitDeadline.Milliseconds())
		}
	} else if !ok {
		socket := min(max(60*time.Second, s.commitDeadline+5*time.Second), txn, maxSocket)
		out["socket.timeout.ms"] = strconv.FormatInt(socket.Milliseconds(), 10)
		s.commitDeadline = min(s.commitDeadline, socket-5*time.Second)
	}
	return out, nil
}

// sizedSettings returns settings with message.max.bytes (and batch.size)
// no larger than the smallest max.message.bytes of the topics the sink
// writes: librdkafka then refuses a record the broker would refuse, when
// it is produced, where OnTooLarge classifies it, instead of the broker
// failing every transaction that carries it.
func (s *Sink[T]) sizedSettings(ctx context.Context, settings map[string]string) (map[string]string, error) {
	c, err := consumer.New(consumer.Brokers(s.Brokers), consumer.Logger(s.log))
	if err != nil {
		return nil, err
	}
	defer c.Close()
	limit := int64(-1)
	for _, topic := range s.topics() {
		if _, err := c.Partitions(ctx, topic); err != nil {
			if errors.Is(err, consumer.ErrUnknownTopic) {
				err = fmt.Errorf("%w: %w", producer.ErrUnknownTopic, err)
			}
			return nil, fmt.Errorf("kafkaio: sink %s (brokers %s): %w", s.Topic, s.Brokers, err)
		}
		v, err := c.TopicConfig(ctx, topic, "max.message.bytes")
		if err != nil {
			return nil, fmt.Errorf("kafkaio: sink %s (brokers %s): %w", s.Topic, s.Brokers, err)
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("kafkaio: sink %s: topic %s: max.message.bytes %q: %w", s.Topic, topic, v, err)
		}
		if limit < 0 || n < limit {
			limit = n
		}
	}
	if limit <= 0 {
		return settings, nil
	}
	own := int64(1_000_000) // librdkafka's default message.max.bytes
	if v, ok := settings["message.max.bytes"]; ok {
		if own, err = strconv.ParseInt(v, 10, 64); err != nil {
			return nil, keyed.Permanent(fmt.Errorf("%w: kafkaio: sink %s: message.max.bytes %q: %w", producer.ErrConfig, s.Topic, v, err))
		}
	}
	if limit < own {
		settings["message.max.bytes"] = strconv.FormatInt(limit, 10)
		if _, ok := settings["batch.size"]; !ok {
			settings["batch.size"] = strconv.FormatInt(limit, 10)
		}
	}
	return settings, nil
}

// Recorded implements keyed.Sink: the checkpoint Kafka's commit group
// records, read with stable offsets (a commit still pending is waited for),
// and the offsets committed with it.
func (s *Sink[T]) Recorded(ctx context.Context) (*keyed.Recorded, error) {
	s.mu.Lock()
	inputs, group := s.info.Inputs, CommitGroup(s.info.Job)
	s.mu.Unlock()
	if len(inputs) == 0 {
		return nil, fmt.Errorf("kafkaio: sink %s: Recorded before Reset", s.Topic)
	}
	c, err := consumer.New(consumer.Brokers(s.Brokers), consumer.Logger(s.log))
	if err != nil {
		return nil, err
	}
	defer c.Close()
	var tps []consumer.TopicPartition
	for _, topic := range inputs {
		parts, err := c.Partitions(ctx, topic)
		if err != nil {
			return nil, err
		}
		for _, p := range parts {
			tps = append(tps, consumer.TopicPartition{Topic: topic, Partition: p})
		}
	}
	offs, err := c.GroupOffsets(ctx, group, tps)
	if err != nil {
		return nil, err
	}
	md := make([]string, len(offs))
	var recorded []checkpoint.PartitionOffset
	for i, o := range offs {
		md[i] = o.Metadata
		if o.Offset >= 0 {
			recorded = append(recorded, checkpoint.PartitionOffset{Topic: o.Topic, Partition: o.Partition, Offset: o.Offset})
		}
	}
	rec, err := checkpoint.CommitRecordOf(md)
	if err != nil {
		return nil, fmt.Errorf("kafkaio: commit group %s: %w", group, err)
	}
	if rec == nil {
		return nil, nil
	}
	s.mu.Lock()
	s.committed = rec.Checkpoint
	s.mu.Unlock()
	return &keyed.Recorded{Ref: checkpoint.CheckpointRef{Run: rec.Run, ID: rec.Checkpoint}, Offsets: recorded, Where: "commit group " + group}, nil
}

// Write implements keyed.Sink. It blocks while the epoch buffer is full,
// until ctx is done.
func (s *Sink[T]) Write(ctx context.Context, epoch uint64, v T) error {
	key, val, err := s.Encode(v)
	if err != nil {
		return fmt.Errorf("kafkaio: sink %s: encode: %w", s.Topic, err)
	}
	topic := s.Topic
	if s.TopicOf != nil {
		if t := s.TopicOf(v); t != "" {
			topic = t
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.write(ctx, epoch, producer.Record[[]byte, []byte]{Topic: topic, Key: key, Value: val})
}

// write sends rec into the open transaction if its epoch belongs there,
// or holds it in the epoch buffer, waiting for room; called with s.mu
// held.
func (s *Sink[T]) write(ctx context.Context, epoch uint64, rec producer.Record[[]byte, []byte]) error {
	for {
		if s.err != nil {
			return s.err
		}
		if s.p == nil {
			return fmt.Errorf("kafkaio: sink %s: not reset", s.Topic)
		}
		if !s.exactlyOnce() || epoch <= s.committed+1 {
			return s.produce(ctx, rec)
		}
		if len(s.buffer) < s.EpochBuffer {
			s.buffer = append(s.buffer, rec)
			s.bufEpochs = append(s.bufEpochs, epoch)
			if testHookBuffered != nil {
				testHookBuffered(len(s.buffer))
			}
			return nil
		}
		// Backpressure until a commit drains the buffer.
		room := s.room
		s.mu.Unlock()
		select {
		case <-room:
		case <-ctx.Done():
		}
		s.mu.Lock()
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
	}
}

// TakesDeadLetters implements keyed.DeadLetterSink: with a DeadLetterTopic.
func (s *Sink[T]) TakesDeadLetters() bool { return s.DeadLetterTopic != "" }

// DeadLetter implements keyed.DeadLetterSink: b goes to DeadLetterTopic
// with epoch's output.
func (s *Sink[T]) DeadLetter(ctx context.Context, epoch uint64, b keyed.BadRecord) error {
	if s.DeadLetterTopic == "" {
		return fmt.Errorf("kafkaio: sink %s: %s[%d] offset %d cannot be decoded and the sink has no DeadLetterTopic: %w", s.Topic, b.Topic, b.Partition, b.Offset, b.Err)
	}
	rec := producer.Record[[]byte, []byte]{Topic: s.DeadLetterTopic, Key: b.Key, Value: b.Value, Timestamp: b.Timestamp, Headers: []producer.Header{
		{Key: "kord.dlq.topic", Value: []byte(b.Topic)},
		{Key: "kord.dlq.partition", Value: []byte(strconv.Itoa(int(b.Partition)))},
		{Key: "kord.dlq.offset", Value: []byte(strconv.FormatInt(b.Offset, 10))},
		{Key: "kord.dlq.error", Value: []byte(b.Err.Error())},
	}}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.write(ctx, epoch, rec)
}

// produce writes rec into the open transaction. A record librdkafka
// refuses as too large follows OnTooLarge. In exactly-once mode any other
// failure ends the producer's use (s.err): a transaction missing a record
// must never commit. Called with s.mu held.
func (s *Sink[T]) produce(ctx context.Context, rec producer.Record[[]byte, []byte]) error {
	if s.exactlyOnce() && failpoint.Active(failpoint.SimProduceUnknown) {
		// The record goes out, but the job is told its outcome is unknown.
		err := s.p.Produce(ctx, rec, nil)
		return s.failed(keyed.OutcomeUnknown(fmt.Errorf("produce to %s: simulated unknown outcome (produce returned %v)", rec.Topic, err)))
	}
	err := s.p.Produce(ctx, rec, nil)
	if errors.Is(err, producer.ErrRecordTooLarge) {
		if s.OnTooLarge != DeadLetter || s.DeadLetterTopic == "" || rec.Topic == s.DeadLetterTopic {
			err = fmt.Errorf("kafkaio: sink: output record for %s with key %q cannot be written (OnTooLarge is Fail, or no DeadLetterTopic): %w", rec.Topic, rec.Key, err)
		} else {
			s.tooLarge.Add(1)
			s.log.Warn("kafkaio: sink: output record too large; a stand-in goes to the dead-letter topic", "topic", rec.Topic, "key", string(rec.Key), "bytes", len(rec.Key)+len(rec.Value), "dead_letter_topic", s.DeadLetterTopic)
			err = s.p.Produce(ctx, producer.Record[[]byte, []byte]{Topic: s.DeadLetterTopic, Key: rec.Key, Headers: []producer.Header{
				{Key: "kord.dlq.topic", Value: []byte(rec.Topic)},
				{Key: "kord.dlq.size", Value: []byte(strconv.Itoa(len(rec.Key) + len(rec.Value)))},
				{Key: "kord.dlq.error", Value: []byte(err.Error())},
			}}, nil)
		}
	}
	if err == nil || !s.exactlyOnce() {
		return err
	}
	if producer.RequiresAbort(err) {
		// The transaction failed under us (a newer copy of the job may have
		// fenced this one): abort it on this producer, so that a zombie
		// stops with ErrFenced instead of fencing the live copy.
		return s.failed(s.abortIfRequired(ctx, fmt.Errorf("produce to %s: %w", rec.Topic, err)))
	}
	// Not queued (too large, or ctx done while librdkafka's queue was
	// full): the record is not in the transaction, which must not commit.
	// A restart replays it with a new producer.
	s.err = err
	s.wake()
	return err
}

// abortIfRequired aborts on this producer when err requires it (see
// producer.AbortIfRequired), bounded by ctx and 30 s.
func (s *Sink[T]) abortIfRequired(ctx context.Context, err error) error {
	actx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return s.p.AbortIfRequired(actx, err)
}

// failed ends the producer's use: err is classified (fenced or refused
// configuration: permanent; else an unknown outcome, unless already
// classified), kept for every later call, and returned. Called with s.mu
// held.
func (s *Sink[T]) failed(err error) error {
	if errors.Is(err, producer.ErrFenced) || errors.Is(err, producer.ErrConfig) {
		err = keyed.Permanent(err)
	} else {
		err = keyed.OutcomeUnknown(err)
	}
	s.err, s.unknown = fmt.Errorf("kafkaio: sink %s: %w", s.Topic, err), true
	s.wake()
	return s.err
}

// TooLarge returns how many output records were too large and went to the
// dead-letter topic as stand-ins (OnTooLarge = DeadLetter), counting again
// those written again after a restart.
func (s *Sink[T]) TooLarge() int64 { return s.tooLarge.Load() }

// BufferLen returns how many records wait in the epoch buffer.
func (s *Sink[T]) BufferLen() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.buffer)
}

// Commit implements keyed.Sink: the transaction gets every output of
// epochs ≤ ref.ID, then the source offsets with the commit record, and is
// committed; the next transaction begins and takes what waited in the
// epoch buffer. Any failure ends this producer (the engine's next run makes
// a new one): the outcome of a transactional call that failed is unknown,
// and it is never retried on the same producer.
func (s *Sink[T]) Commit(ctx context.Context, ref checkpoint.CheckpointRef, offsets []checkpoint.PartitionOffset) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.commitDeadline > 0 {
		// Below librdkafka's request timeout (see checkSettings).
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.commitDeadline)
		defer cancel()
	}
	if s.p == nil {
		return fmt.Errorf("kafkaio: sink %s: not reset", s.Topic)
	}
	if s.err != nil {
		return s.err
	}
	group := CommitGroup(s.info.Job)
	meta := checkpoint.CommitRecord{Run: ref.Run, Checkpoint: ref.ID, Job: s.info.Job}.String()
	offs := make([]producer.Offset, len(offsets))
	for i, o := range offsets {
		offs[i] = producer.Offset{Topic: o.Topic, Partition: o.Partition, Offset: o.Offset, Metadata: meta}
	}
	fail := func(step string, err error) error {
		return s.failed(fmt.Errorf("commit of checkpoint %s: %s: %w", ref, step, err))
	}
	if !s.exactlyOnce() {
		// Everything written so far (all output up to the checkpoint's
		// barrier, and perhaps some after it) is delivered before the
		// offsets that cover its input are committed.
		if err := s.p.Flush(ctx); err != nil {
			return fail("flush", err)
		}
		cs := make([]consumer.Committed, len(offs))
		for i, o := range offs {
			cs[i] = consumer.Committed{Topic: o.Topic, Partition: o.Partition, Offset: o.Offset, Metadata: o.Metadata}
		}
		if err := s.commits.CommitGroupOffsets(ctx, group, cs); err != nil {
			return fail("commit offsets", err)
		}
		s.committed = ref.ID
		return nil
	}
	fp := failpoint.HookOf(ctx)
	// The transaction carries the output of every epoch ≤ ref.ID. After an
	// aborted checkpoint some of it still waits in the buffer (the epoch
	// after the aborted barrier): it goes in now, or it would commit only
	// with a later checkpoint than the offsets that cover its input.
	if err := s.drain(ctx, ref.ID); err != nil {
		return err
	}
	if err := fp.Point(failpoint.BeforeSendOffsets); err != nil {
		return err
	}
	if failpoint.Active(failpoint.SimAbortUnknown) {
		// The abort path (as after an abortable error), its answer lost.
		sctx, cancel := context.WithTimeout(ctx, time.Millisecond)
		aerr := s.p.AbortTransaction(sctx)
		cancel()
		return fail("abort", fmt.Errorf("simulated unknown abort outcome (abort returned %v)", aerr))
	}
	if failpoint.Active(failpoint.ForceAbort) {
		aerr := s.p.AbortTransaction(ctx)
		return fail("abort", fmt.Errorf("forced abort path (abort returned %v)", aerr))
	}
	if failpoint.Active(failpoint.SimSendOffsetsUnknown) {
		sctx, cancel := context.WithTimeout(ctx, time.Millisecond)
		err := s.p.SendOffsetsToTransaction(sctx, group, offs)
		cancel()
		return fail("send offsets", fmt.Errorf("simulated unknown send-offsets outcome (send offsets returned %v)", err))
	}
	if err := s.p.SendOffsetsToTransaction(ctx, group, offs); err != nil {
		return fail("send offsets", s.abortIfRequired(ctx, err))
	}
	if err := fp.Point(failpoint.AfterSendOffsets); err != nil {
		return err
	}
	if failpoint.Active(failpoint.SimCommitStall) {
		<-ctx.Done()
		return fail("commit", fmt.Errorf("simulated stalled commit: %w", context.Cause(ctx)))
	}
	if failpoint.Active(failpoint.SimCommitUnknown) {
		sctx, cancel := context.WithTimeout(ctx, time.Millisecond)
		err := s.p.CommitTransaction(sctx)
		cancel()
		return fail("commit", fmt.Errorf("simulated unknown commit outcome (commit returned %v)", err))
	}
	if err := s.p.CommitTransaction(ctx); err != nil {
		if !testRetrySameProducer {
			return fail("commit", s.abortIfRequired(ctx, err))
		}
		// The broken protocol (tests only): retry on this producer.
		for err != nil {
			s.log.Warn("kafkaio: sink: TEST ONLY: retrying the commit on the same producer", "checkpoint", ref.String(), "err", err)
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.commitDeadline)
			err = s.p.CommitTransaction(rctx)
			cancel()
		}
	}
	s.committed = ref.ID
	if err := s.p.BeginTransaction(); err != nil {
		return fail("begin the next transaction", err)
	}
	// Drain what waited for this commit; records of later epochs (none with
	// one checkpoint in flight) would stay.
	if err := s.drain(ctx, s.committed+1); err != nil {
		return err
	}
	s.wake()
	return nil
}

// drain produces the buffered records of epochs ≤ upTo into the open
// transaction, in the order they were written, and keeps the rest.
func (s *Sink[T]) drain(ctx context.Context, upTo uint64) error {
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

// closeClients closes the producer and the commit consumer, with abort
// first aborting the open transaction, unless its state is unknown (an
// abort is never sent after a call whose outcome is unknown: the next
// producer's InitTransactions settles it); called with s.mu held.
func (s *Sink[T]) closeClients(abort bool) error {
	if s.commits != nil {
		s.commits.Close()
		s.commits = nil
	}
	if s.p == nil {
		return nil
	}
	if abort && s.exactlyOnce() && !s.unknown {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_ = s.p.AbortTransaction(ctx)
		cancel()
	}
	err := s.p.Close()
	s.p = nil
	return err
}

// Close aborts the open transaction, if any, and closes the producer. Call
// it once the job's Run has returned.
func (s *Sink[T]) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closeClients(true)
}
