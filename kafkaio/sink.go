package kafkaio

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kordproject/kord/admin"
	"github.com/kordproject/kord/checkpoint"
	"github.com/kordproject/kord/consumer"
	"github.com/kordproject/kord/keyed"
	"github.com/kordproject/kord/keyed/connector"
	"github.com/kordproject/kord/partitioner"
	"github.com/kordproject/kord/producer"
	"github.com/kordproject/kord/serde"
)

// sink writes a job's output to a Kafka topic, exactly once in the job's
// exactly-once mode (Flink KafkaSink with DeliveryGuarantee.EXACTLY_ONCE;
// Kafka Streams exactly_once_v2), with one transactional producer per job
// (see the package doc for the protocol), and at least once in its
// at-least-once mode: output written at once by an idempotent producer,
// flushed at each checkpoint before the checkpoint's offsets and commit
// record are committed to the commit group.
//
// The job gives the sink its name, its input topics, its mode and its
// transaction timeout (connector.SinkInfo): transactional.id "kord.<job>",
// commit group "kord.<job>.commit", transaction.timeout.ms derived from the
// checkpoint settings. Run closes the sink when it returns.
type sink[T any] struct {
	c      *Client
	topic  string
	key    func(v T) ([]byte, error)
	values serde.Serde[T]
	cfg    options
	// outputs are the topics of the Outputs that write through this sink.
	outputs []string
	// recs is WriteBatch's batch of encoded records, reused; the sink
	// task, its one caller, alone uses it.
	recs []producer.Record[[]byte, []byte]

	mu        sync.Mutex
	room      chan struct{} // closed and replaced when Write may go on
	info      connector.SinkInfo
	log       *slog.Logger
	p         *producer.Producer[[]byte, []byte]
	committed uint64
	// committing: Commit is in its network calls (SendOffsetsToTransaction,
	// CommitTransaction) without s.mu; Write meanwhile holds every record
	// in the epoch buffer, so that nothing enters the committing
	// transaction.
	committing bool
	buffer     []producer.Record[[]byte, []byte]
	bufEpochs  []uint64
	bufBytes   int   // of buffer's records, recordBytes each
	err        error // set when the producer may no more be used
	unknown    bool  // err left the transaction's state unknown (or the producer fenced)
	// commitDeadline bounds every Commit: below librdkafka's request
	// timeout, so that librdkafka never sends a commit again by itself.
	commitDeadline time.Duration
	tooLarge       atomic.Int64
	// Counted for Collect, across runs.
	fenced, fencedOthers        atomic.Int64
	assignedParts, revokedParts atomic.Int64
	commits                     *admin.Client // at-least-once: commits to the commit group
	// Instance: the group member, from the first Reset to Close, and its
	// assignment.
	member   *consumer.Member
	ms       *membership
	fencings []time.Time // when members fell out of the group (join)
	// settings are the producer's, kept from Reset for the producers
	// that fence departed instances (fenceDeparted).
	settings map[string]string
	// departed are the instances this sink fenced while they were out of
	// the group, so that each departure is fenced once; an instance seen
	// in the group again is taken out.
	departed map[string]bool
	// The job's hops (connector.Hops) and their purging.
	hopState
}

// Set by tests only.
var (
	// testHookBuffered sees the epoch buffer's length and bytes after each record
	// buffered.
	testHookBuffered func(n, bytes int)
	// testRetrySameProducer breaks the protocol on purpose, to show that
	// the network-fault tests catch it: a commit that failed is retried on
	// the same producer until it succeeds, and the sink goes on with it.
	testRetrySameProducer bool
	// testNoSocketGuard breaks the protocol on purpose: ProducerSettings'
	// socket.timeout.ms is taken as given, even below the commit deadline.
	testNoSocketGuard bool
)

// NewSink returns a sink writing topic through c, each result's value
// encoded by values (serde.JSON, serde.Avro, a serde of the user's), its key
// by the Key option (null without it). Options: [Key], [DeadLetterTopic],
// [SideOutput], [Placement], [PartitionMetrics], [EpochBuffer],
// [InitTimeout], [SessionTimeout], [Set] (its producer's settings),
// [Logger].
func NewSink[T any](c *Client, topic string, values serde.Serde[T], opts ...Opt) connector.Sink[T] {
	return newSink(c, topic, values, apply(toSink, opts))
}

func newSink[T any](c *Client, topic string, values serde.Serde[T], o options) *sink[T] {
	s := &sink[T]{c: c, topic: topic, values: values, cfg: o}
	s.key, _ = o.key.(func(T) ([]byte, error))
	if o.key == nil {
		s.key = func(T) ([]byte, error) { return nil, nil }
	}
	return s
}

// route returns the SideOutput route, nil when none or of another type.
func (s *sink[T]) route() func(T) string {
	r, _ := s.cfg.topicOf.(func(T) string)
	return r
}

// ValidateSink implements keyed's check of a sink before the job runs:
// what the sink needs, and the producer settings the job derives.
func (s *sink[T]) ValidateSink(info connector.SinkInfo) error {
	var errs []error
	if s.c == nil || s.c.BrokerList() == "" {
		errs = append(errs, sinkErrorf(s.topic, "no brokers (kafkaio.Brokers, or bootstrap.servers, in its Client)"))
	}
	if s.topic == "" {
		errs = append(errs, errors.New("kafkaio: sink: no topic"))
	}
	if s.values == nil {
		errs = append(errs, sinkErrorf(s.topic, "no serde for its values"))
	}
	if s.key == nil {
		var zero T
		errs = append(errs, sinkErrorf(s.topic, "its Key takes another type than the sink's %T", zero))
	}
	errs = append(errs, s.cfg.misplaced(fmt.Sprintf("sink to topic %q", s.topic)))
	if s.cfg.topicOf != nil && s.route() == nil {
		var zero T
		errs = append(errs, sinkErrorf(s.topic, "SideOutput's route is a %T, want a func(%T) string", s.cfg.topicOf, zero))
	}
	if s.cfg.deadLetters != "" && s.cfg.deadLetters == s.topic {
		errs = append(errs, sinkErrorf(s.topic, "DeadLetterTopic is the output topic"))
	}
	for _, in := range info.Inputs {
		for _, out := range s.topics() {
			if in == out {
				errs = append(errs, sinkErrorf(s.topic, "topic %s is also an input of the job", out))
			}
		}
	}
	if info.Instance != "" && !validInstance(info.Instance) {
		errs = append(errs, sinkConfigErrorf(s.topic, "instance id %q (keyed.Instance): Kafka's group.instance.id takes 1 to 249 of a-z, A-Z, 0-9, '.', '_' and '-'", info.Instance))
	}
	if _, _, err := s.checkSettings(info); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Cluster implements connector.Clustered: the brokers the sink writes to.
func (s *sink[T]) Cluster() string {
	if s.c == nil {
		return ""
	}
	return s.c.BrokerList()
}

func (s *sink[T]) exactlyOnce() bool { return s.info.Mode != checkpoint.AtLeastOnce }

// TransactionalID returns the transactional.id of job's sink.
func TransactionalID(job string) string { return "kord." + job }

// CommitGroup returns the commit group of job's sink, which never has
// members: only the sink's transactions (or, at least once, its offset
// commits) write it.
func CommitGroup(job string) string { return "kord." + job + ".commit" }

// wake lets every waiting Write look again; called with s.mu held.
func (s *sink[T]) wake() {
	if s.room != nil {
		close(s.room)
	}
	s.room = make(chan struct{})
}

// Reset implements connector.Sink: a new producer, fenced in, with a
// transaction begun, after checking that the output and dead-letter topics
// exist (an idle job would otherwise learn it only at its first result).
// Its InitTransactions fences every older producer of the job and completes
// a commit one had sent, or aborts what it left. Bounded by ctx and
// InitTimeout.
func (s *sink[T]) Reset(ctx context.Context, info connector.SinkInfo) (err error) {
	defer func() { err = classify(err) }()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.info = info
	s.log = s.cfg.log
	if s.log == nil && s.c != nil {
		s.log = s.c.logger(info.Logger)
	}
	if s.log == nil {
		s.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	s.closeClients(false) // the new producer's InitTransactions aborts what it left
	s.buffer, s.bufEpochs, s.bufBytes, s.err, s.unknown = nil, nil, 0, nil, false
	s.committed = 0 // until Resume says what the run restored
	s.wake()
	if err := s.ValidateSink(info); err != nil {
		return keyed.Permanent(err)
	}
	if info.Job == "" || len(info.Inputs) == 0 {
		return keyed.Permanent(sinkConfigErrorf(s.topic, "the job gave no name or no input topics"))
	}
	settings, deadline, err := s.checkSettings(info)
	if err != nil {
		return keyed.Permanent(err)
	}
	s.commitDeadline = deadline
	timeout := s.cfg.initTimeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	ictx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if settings, err = s.sizedSettings(ictx, settings); err != nil {
		return err
	}
	s.settings = settings
	if s.scaled() {
		if err := s.join(ictx, info); err != nil {
			return err
		}
	}
	opts := append(s.c.producerOpts(s.log, settings), producer.CloseTimeout(5*time.Second), producer.Logger(s.log))
	if s.exactlyOnce() {
		// A failed record fails the transaction's commit, so per-record
		// delivery reports are not needed.
		tid := TransactionalID(info.Job)
		if s.scaled() {
			tid = InstanceTransactionalID(info.Job, s.info.Instance)
		}
		opts = append(opts, producer.TransactionalID(tid), producer.CommitReports())
	}
	if s.cfg.placement != nil {
		opts = append(opts, producer.Partitioner(partitioner.ByRule{Rule: *s.cfg.placement}))
	}
	p, err := producer.New[[]byte, []byte](nil, nil, opts...)
	if err != nil {
		return keyed.Permanent(err)
	}
	for _, topic := range s.topics() {
		if _, err := p.Partition(ictx, producer.Record[[]byte, []byte]{Topic: topic}); err != nil {
			p.Close()
			return classify(sinkErrorf(s.topic, "on brokers %s: %w", s.c.BrokerList(), err))
		}
	}
	if !s.exactlyOnce() {
		a, err := s.c.admin(s.log)
		if err != nil {
			p.Close()
			return err
		}
		s.p, s.commits = p, a
		return nil
	}
	if err := p.InitTransactions(ictx); err != nil {
		p.Close()
		if s.scaled() && errors.Is(err, producer.ErrFenced) {
			return sinkErrorf(s.topic, "on brokers %s: %w", s.c.BrokerList(), s.producerFenced(err))
		}
		if errors.Is(err, producer.ErrConfig) || errors.Is(err, producer.ErrFenced) || errors.Is(err, producer.ErrAuth) {
			return keyed.Permanent(sinkErrorf(s.topic, "on brokers %s: %w", s.c.BrokerList(), err))
		}
		if ctx.Err() == nil && ictx.Err() != nil {
			return sinkErrorf(s.topic, "no transaction coordinator reached at %s within %v (InitTimeout): %w", s.c.BrokerList(), timeout, err)
		}
		return sinkErrorf(s.topic, "on brokers %s: %w", s.c.BrokerList(), err)
	}
	if err := p.BeginTransaction(); err != nil {
		p.Close()
		return err
	}
	s.p = p
	return nil
}

// role names what topic is to the sink, for errors.
func (s *sink[T]) role(topic string) string {
	switch topic {
	case s.topic:
		return "its topic"
	case s.cfg.deadLetters:
		return "its dead-letter topic"
	}
	if slices.Contains(s.outputs, topic) {
		return "an Output's topic"
	}
	return "its side output"
}

// topics lists every topic the sink writes.
func (s *sink[T]) topics() []string {
	var out []string
	for _, t := range slices.Concat([]string{s.topic, s.cfg.deadLetters}, s.cfg.sideTopics, s.outputs) {
		if t != "" {
			out = append(out, t)
		}
	}
	return out
}

// produceQueueKBytes is the sink's bound on librdkafka's own queue under
// its producer (queue.buffering.max.kbytes), unless the user sets one: the
// records handed to librdkafka and not yet acknowledged by the brokers,
// each copied, with librdkafka's bookkeeping beside it. librdkafka bounds
// the queue at 100,000 records (queue.buffering.max.messages, kept) and
// 1 GiB (Java's buffer.memory is 32 MiB): a gigabyte of 10 KiB records.
// While the queue is full, records wait in the epoch buffer, so the sink
// bounds it at the epoch buffer's default, 4 MiB of keys and values: about
// 40,000 of the benchmark's records, where at the batch path's rates the
// queue filled to 100,000 (bench/RESULTS.md, "librdkafka's produce
// queue"). It is raised to hold one record of maxRecord bytes (the
// message.max.bytes setting, "" for librdkafka's 1,000,000): librdkafka
// refuses a larger record as queue full however empty the queue is.
func produceQueueKBytes(maxRecord string) int64 {
	kb := int64(4096)
	if n, err := strconv.ParseInt(maxRecord, 10, 64); err == nil && (n+1023)/1024 > kb {
		kb = (n + 1023) / 1024
	}
	return kb
}

// checkSettings checks the producer settings (the Client's, then
// ProducerSet's) against what the job derives, and returns the sink's own
// with the derived ones added, and the deadline of every commit (DESIGN.md,
// "Timeouts" and "Unknown outcomes").
func (s *sink[T]) checkSettings(info connector.SinkInfo) (map[string]string, time.Duration, error) {
	all := map[string]string{}
	if s.c != nil {
		for k, v := range s.c.settings {
			all[k] = v
		}
	}
	out := make(map[string]string, len(s.cfg.settings)+3)
	for k, v := range s.cfg.settings {
		all[k], out[k] = v, v
	}
	txn := info.TransactionTimeout
	if _, ok := all["transactional.id"]; ok {
		return nil, 0, sinkConfigErrorf(s.topic, "producer setting transactional.id is derived from the job name (%s); remove it",
			TransactionalID(info.Job))
	}
	if _, ok := all["transaction.timeout.ms"]; ok {
		return nil, 0, sinkConfigErrorf(s.topic, "producer setting transaction.timeout.ms is derived from the checkpoint settings (%v now: interval, timeout, min pause and tolerable failures, capped at keyed.TransactionMaxTimeout); remove it and change those instead",
			txn)
	}
	if _, ok := all["queue.buffering.max.kbytes"]; !ok {
		out["queue.buffering.max.kbytes"] = strconv.FormatInt(produceQueueKBytes(all["message.max.bytes"]), 10)
	}
	if info.Mode == checkpoint.AtLeastOnce {
		return out, info.CommitTimeout, nil
	}
	if txn <= 0 {
		return nil, 0, sinkConfigErrorf(s.topic, "the job gave no transaction timeout")
	}
	// A shorter message timeout only fails a produce sooner (an abort and
	// a replay), so it is accepted.
	if v, ok := all["message.timeout.ms"]; ok {
		ms, err := strconv.ParseInt(v, 10, 64)
		switch {
		case err != nil || ms < 1:
			return nil, 0, sinkConfigErrorf(s.topic, "producer setting message.timeout.ms %q: want a positive number of milliseconds", v)
		case time.Duration(ms)*time.Millisecond > txn:
			return nil, 0, sinkConfigErrorf(s.topic, "producer setting message.timeout.ms %d exceeds the transaction timeout %d ms (transaction.timeout.ms, derived from the checkpoint settings); lower it or leave it unset (it defaults to the transaction timeout)",
				ms, txn.Milliseconds())
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
	// librdkafka requires socket.timeout.ms <= transaction.timeout.ms + 100
	// and at most 300 s: a longer checkpoint timeout gives the commit call a
	// shorter deadline instead.
	commit := info.CommitTimeout
	if commit <= 0 {
		return nil, 0, sinkConfigErrorf(s.topic, "the job gave no commit timeout")
	}
	const maxSocket = 300 * time.Second
	deadline := min(commit, maxSocket-5*time.Second)
	if v, ok := all["socket.timeout.ms"]; ok && !testNoSocketGuard {
		ms, err := strconv.ParseInt(v, 10, 64)
		if err != nil || time.Duration(ms)*time.Millisecond <= deadline {
			return nil, 0, sinkConfigErrorf(s.topic, "producer setting socket.timeout.ms %q must exceed the commit timeout %d ms (keyed.CheckpointTimeout): librdkafka would otherwise send a timed-out commit again by itself while the sink still uses the producer (DESIGN.md, on KIP-890); leave it unset",
				v, deadline.Milliseconds())
		}
	} else if !ok {
		socket := min(max(60*time.Second, deadline+5*time.Second), txn, maxSocket)
		out["socket.timeout.ms"] = strconv.FormatInt(socket.Milliseconds(), 10)
		deadline = min(deadline, socket-5*time.Second)
	}
	return out, deadline, nil
}

// sizedSettings returns settings with message.max.bytes (and batch.size)
// no larger than the smallest max.message.bytes of the topics the sink
// writes: librdkafka then refuses a record the broker would refuse, when
// it is produced, where the sink sends it to its dead letters or fails, instead of the broker
// failing every transaction that carries it.
func (s *sink[T]) sizedSettings(ctx context.Context, settings map[string]string) (map[string]string, error) {
	c, err := s.c.admin(s.log)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	limit := int64(-1)
	for _, topic := range s.topics() {
		if _, err := c.Partitions(ctx, topic); err != nil {
			// An unknown topic is producer.ErrUnknownTopic too: the same
			// value as admin.ErrUnknownTopic (internal/kafkaconf).
			return nil, sinkErrorf(s.topic, "%s (brokers %s): %w", s.role(topic), s.c.BrokerList(), err)
		}
		v, err := c.TopicConfig(ctx, topic, "max.message.bytes")
		if err != nil {
			return nil, sinkErrorf(s.topic, "%s (brokers %s): %w", s.role(topic), s.c.BrokerList(), err)
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return nil, sinkErrorf(s.topic, "topic %s: max.message.bytes %q: %w", topic, v, err)
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
			return nil, keyed.Permanent(sinkConfigErrorf(s.topic, "message.max.bytes %q: %w", v, err))
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

// Recorded implements connector.Sink: the checkpoint Kafka's commit group
// records, read with stable offsets (a commit still pending is waited for),
// and the offsets committed with it.
func (s *sink[T]) Recorded(ctx context.Context) (*connector.Recorded, error) {
	s.mu.Lock()
	inputs, group := s.info.Inputs, CommitGroup(s.info.Job)
	s.mu.Unlock()
	if len(inputs) == 0 {
		return nil, sinkErrorf(s.topic, "Recorded before Reset")
	}
	c, err := s.c.admin(s.log)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	var tps []admin.TopicPartition
	for _, topic := range inputs {
		parts, err := c.Partitions(ctx, topic)
		if err != nil {
			return nil, err
		}
		for _, p := range parts {
			tps = append(tps, admin.TopicPartition{Topic: topic, Partition: p})
		}
	}
	offs, err := c.GroupOffsets(ctx, group, tps)
	if err != nil {
		return nil, err
	}
	if s.scaled() {
		return s.recordedParts(ctx, group, offs)
	}
	md := make([]string, len(offs))
	var recorded []checkpoint.PartitionOffset
	for i, o := range offs {
		md[i] = o.Metadata
		if o.Offset >= 0 {
			recorded = append(recorded, checkpoint.PartitionOffset{Topic: o.Topic, Partition: o.Partition, Offset: o.Offset})
		}
	}
	rec, err := commitRecordOf(md)
	if err != nil {
		return nil, fmt.Errorf("kafkaio: commit group %s: %w", group, err)
	}
	if rec == nil {
		return nil, nil
	}
	return &connector.Recorded{Ref: checkpoint.Ref{Run: rec.Run, ID: rec.Checkpoint}, Offsets: recorded, Where: "commit group " + group}, nil
}

// Resume implements connector.Resumer: the open transaction takes epoch
// after+1; later epochs wait in the epoch buffer for its commit. The
// engine calls it after Reset, once the run has restored (in a run of one
// of several processes, after is 0: its checkpoints are numbered from 1
// again, and a number kept from the run before would let the next epoch's
// output into the first transaction, committed with the offsets before it).
func (s *sink[T]) Resume(after uint64) {
	s.mu.Lock()
	s.committed = after
	s.mu.Unlock()
}

var _ connector.Resumer = (*sink[int])(nil)

// Forget implements connector.Forgetter (Job.Forget): it deletes the job's
// commit group, and with it the record of which checkpoint committed, and
// every record of the job's hop topics. A commit group or topic that does
// not exist is not an error.
func (s *sink[T]) Forget(ctx context.Context, info connector.SinkInfo) error {
	if s.c == nil || s.c.BrokerList() == "" {
		return sinkErrorf(s.topic, "no brokers")
	}
	c, err := s.c.admin(info.Logger)
	if err != nil {
		return err
	}
	defer c.Close()
	if err := c.DeleteGroup(ctx, CommitGroup(info.Job)); err != nil && !errors.Is(err, admin.ErrUnknownGroup) {
		return err
	}
	return s.forgetHops(ctx, c)
}

// Write implements connector.Sink. It blocks while the epoch buffer is full,
// until ctx is done.
func (s *sink[T]) Write(ctx context.Context, epoch uint64, v T) error {
	rec, err := s.record(v, s.route())
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.write(ctx, epoch, rec)
}

// record is v encoded, to the sink's topic or the one route names.
func (s *sink[T]) record(v T, route func(T) string) (producer.Record[[]byte, []byte], error) {
	key, val, hs, err := encodeRecord(s.topic, s.key, s.values, v)
	if err != nil {
		return producer.Record[[]byte, []byte]{}, err
	}
	topic := s.topic
	if route != nil {
		if t := route(v); t != "" {
			topic = t
		}
	}
	return producer.Record[[]byte, []byte]{Topic: topic, Key: key, Value: val, Headers: hs}, nil
}

// write sends rec into the open transaction if its epoch belongs there,
// or holds it in the epoch buffer, waiting for room; called with s.mu
// held.
func (s *sink[T]) write(ctx context.Context, epoch uint64, rec producer.Record[[]byte, []byte]) error {
	for {
		if s.err != nil {
			return s.err
		}
		if s.p == nil {
			return sinkErrorf(s.topic, "not reset")
		}
		open := epoch <= s.committed+1 // the open transaction's epoch, or one before
		if !s.exactlyOnce() || (open && !s.committing) {
			return s.produce(ctx, rec)
		}
		if n := recordBytes(rec); !open && s.bufferTakes(n) {
			s.buffer = append(s.buffer, rec)
			s.bufEpochs = append(s.bufEpochs, epoch)
			s.bufBytes += n
			if testHookBuffered != nil {
				testHookBuffered(len(s.buffer), s.bufBytes)
			}
			return nil
		}
		// Backpressure until a commit drains the buffer; or (never, when
		// the engine keeps its protocol) a record of the committing
		// transaction's epochs, arriving after its commit began: it waits
		// for the next transaction, as it would for the lock.
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

// WriteBatch implements connector.BatchWriter: Write for each of vs in
// turn, with the records queued in one call into librdkafka where the open
// transaction takes them (producer.Producer.ProduceBatch). A value that does not
// encode fails the batch after the values before it were written, as the
// Writes would.
func (s *sink[T]) WriteBatch(ctx context.Context, epoch uint64, vs []T) error {
	recs := s.recs[:0] // the sink task's alone: it is the one caller
	var encErr error
	route := s.route()
	for _, v := range vs {
		rec, err := s.record(v, route)
		if err != nil {
			encErr = err
			break
		}
		recs = append(recs, rec)
	}
	s.mu.Lock()
	err := s.writeBatch(ctx, epoch, recs)
	s.mu.Unlock()
	clear(recs) // the records' bytes go
	s.recs = recs[:0]
	if err != nil {
		return err
	}
	return encErr
}

var _ connector.BatchWriter[int] = (*sink[int])(nil)

// writeBatch is write for each of recs in turn: those the open
// transaction takes now go in one ProduceBatch; otherwise each goes
// through write (the epoch buffer, or backpressure). Called with s.mu
// held.
func (s *sink[T]) writeBatch(ctx context.Context, epoch uint64, recs []producer.Record[[]byte, []byte]) error {
	for len(recs) > 0 {
		if s.err != nil {
			return s.err
		}
		if s.p == nil {
			return sinkErrorf(s.topic, "not reset")
		}
		if open := epoch <= s.committed+1; !s.exactlyOnce() || (open && !s.committing) {
			return s.produceBatch(ctx, recs)
		}
		if err := s.write(ctx, epoch, recs[0]); err != nil {
			return err
		}
		recs = recs[1:]
	}
	return nil
}

// produceBatch is produce for each of recs in turn, queued in one
// ProduceBatch; a record it refuses is taken as produce takes it (a stand-in
// for one too large, and the rest go on), and the first failure ends the
// batch. Called with s.mu held.
func (s *sink[T]) produceBatch(ctx context.Context, recs []producer.Record[[]byte, []byte]) error {
	if s.exactlyOnce() {
		// The failure point counts records, as produce's does (in a
		// build without failure points simulated is false: a pass over
		// the batch that does nothing).
		for k := range recs {
			if simulated(simProduceUnknown) {
				// The records up to k go out, but the job is told
				// their outcome is unknown.
				_, err := s.p.ProduceBatch(ctx, recs[:k+1])
				return s.failed(keyed.OutcomeUnknown(fmt.Errorf("produce to %s: simulated unknown outcome (produce returned %v)", recs[k].Topic, err)))
			}
		}
	}
	for len(recs) > 0 {
		n, err := s.p.ProduceBatch(ctx, recs)
		if err == nil {
			return nil
		}
		if err := s.produced(ctx, recs[n], err); err != nil {
			return err
		}
		recs = recs[n+1:]
	}
	return nil
}

// TakesDeadLetters implements connector.DeadLetterSink: with a DeadLetterTopic.
func (s *sink[T]) TakesDeadLetters() bool { return s.cfg.deadLetters != "" }

// epochBuffer is EpochBuffer's bound, 100,000 by default.
func (s *sink[T]) epochBuffer() int {
	if s.cfg.epochBuffer > 0 {
		return s.cfg.epochBuffer
	}
	return 100_000
}

// epochBufferBytes is EpochBufferBytes's bound, 4 MiB by default.
func (s *sink[T]) epochBufferBytes() int {
	if s.cfg.epochBytes > 0 {
		return s.cfg.epochBytes
	}
	return 4 << 20
}

// bufferTakes reports whether the epoch buffer has room for a record of n
// bytes: below both bounds after it, or empty (a record larger than the
// byte bound is held alone rather than never).
func (s *sink[T]) bufferTakes(n int) bool {
	if len(s.buffer) == 0 {
		return true
	}
	return len(s.buffer) < s.epochBuffer() && s.bufBytes+n <= s.epochBufferBytes()
}

// recordBytes is what EpochBufferBytes counts of rec: its key, value and
// headers.
func recordBytes(rec producer.Record[[]byte, []byte]) int {
	n := len(rec.Key) + len(rec.Value)
	for _, h := range rec.Headers {
		n += len(h.Key) + len(h.Value)
	}
	return n
}

// DeadLetter implements connector.DeadLetterSink: b goes to DeadLetterTopic
// with epoch's output.
func (s *sink[T]) DeadLetter(ctx context.Context, epoch uint64, b connector.BadRecord) error {
	if s.cfg.deadLetters == "" {
		return sinkErrorf(s.topic, "%s[%d] offset %d cannot be decoded and the sink has no DeadLetterTopic: %w", b.Topic, b.Partition, b.Offset, b.Err)
	}
	rec := producer.Record[[]byte, []byte]{Topic: s.cfg.deadLetters, Key: b.Key, Value: b.Value, Timestamp: b.Timestamp, Headers: []producer.Header{
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
// refuses as too large goes to the dead letters, as a stand-in, or fails.
// In exactly-once mode any other failure ends the producer's use (s.err):
// a transaction missing a record must never commit. Called with s.mu held.
func (s *sink[T]) produce(ctx context.Context, rec producer.Record[[]byte, []byte]) error {
	if s.exactlyOnce() && simulated(simProduceUnknown) {
		// The record goes out, but the job is told its outcome is unknown.
		err := s.p.Produce(ctx, rec, nil)
		return s.failed(keyed.OutcomeUnknown(fmt.Errorf("produce to %s: simulated unknown outcome (produce returned %v)", rec.Topic, err)))
	}
	return s.produced(ctx, rec, s.p.Produce(ctx, rec, nil))
}

// produced takes the outcome of queueing rec, err: nil, or a record too
// large replaced by its stand-in, is success; any other failure, in
// exactly-once mode, ends the producer's use (produce). Called with s.mu
// held.
func (s *sink[T]) produced(ctx context.Context, rec producer.Record[[]byte, []byte], err error) error {
	if errors.Is(err, producer.ErrRecordTooLarge) {
		if s.cfg.deadLetters == "" || rec.Topic == s.cfg.deadLetters {
			err = sinkErrorf(s.topic, "output record for %s with key %q cannot be written, and there is no DeadLetterTopic for a stand-in: %w", rec.Topic, rec.Key, err)
		} else {
			s.tooLarge.Add(1)
			s.log.Warn("kafkaio: sink: output record too large; a stand-in goes to the dead-letter topic", "topic", rec.Topic, "key", string(rec.Key), "bytes", len(rec.Key)+len(rec.Value), "dead_letter_topic", s.cfg.deadLetters)
			err = s.p.Produce(ctx, producer.Record[[]byte, []byte]{Topic: s.cfg.deadLetters, Key: rec.Key, Headers: []producer.Header{
				{Key: "kord.dlq.topic", Value: []byte(rec.Topic)},
				{Key: "kord.dlq.size", Value: []byte(strconv.Itoa(len(rec.Key) + len(rec.Value)))},
				{Key: "kord.dlq.error", Value: []byte(err.Error())},
			}}, nil)
		}
	}
	if err == nil || !s.exactlyOnce() {
		return err
	}
	if errors.Is(err, producer.ErrFenced) {
		// A newer producer of this transactional id took over (a restarted
		// copy of the job, or a survivor fencing this instance after its
		// session expired): nothing of this producer may commit.
		return s.failed(fmt.Errorf("produce to %s: %w", rec.Topic, err))
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
// producer.Producer.AbortIfRequired), bounded by ctx and 30 s.
func (s *sink[T]) abortIfRequired(ctx context.Context, err error) error {
	actx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return s.p.AbortIfRequired(actx, err)
}

// failed ends the producer's use: err is classified (fenced or refused
// configuration: permanent; else an unknown outcome, unless already
// classified), kept for every later call, and returned. Called with s.mu
// held.
func (s *sink[T]) failed(err error) error {
	if errors.Is(err, producer.ErrFenced) {
		s.fenced.Add(1)
	}
	if s.scaled() && errors.Is(err, producer.ErrFenced) {
		err = s.producerFenced(err)
	} else if errors.Is(err, producer.ErrFenced) || errors.Is(err, producer.ErrConfig) || errors.Is(err, producer.ErrAuth) {
		err = keyed.Permanent(err)
	} else {
		err = keyed.OutcomeUnknown(err)
	}
	s.err, s.unknown = sinkErrorf(s.topic, "%w", err), true
	s.wake()
	return s.err
}

// TooLarge returns how many output records were too large and went to the
// dead-letter topic as stand-ins (DeadLetterTopic), counting again
// those written again after a restart.
func (s *sink[T]) TooLarge() int64 { return s.tooLarge.Load() }

// BufferLen returns how many records wait in the epoch buffer.
func (s *sink[T]) BufferLen() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.buffer)
}

// Commit implements connector.Sink: the transaction gets every output of
// epochs ≤ ref.ID, then the source offsets with the commit record, and is
// committed; the next transaction begins and takes what waited in the
// epoch buffer. Any failure ends this producer (the engine's next run makes
// a new one): the outcome of a transactional call that failed is unknown,
// and it is never retried on the same producer.
func (s *sink[T]) Commit(ctx context.Context, ref checkpoint.Ref, offsets []checkpoint.PartitionOffset) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.commitDeadline > 0 {
		// Below librdkafka's request timeout (see checkSettings).
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.commitDeadline)
		defer cancel()
	}
	if s.p == nil {
		return sinkErrorf(s.topic, "not reset")
	}
	if s.err != nil {
		return s.err
	}
	group := CommitGroup(s.info.Job)
	meta := commitRecord{Run: ref.Run, Checkpoint: ref.ID, Job: s.info.Job, Instance: s.info.Instance}.String()
	offs := make([]producer.Offset, len(offsets))
	for i, o := range offsets {
		offs[i] = producer.Offset{Topic: o.Topic, Partition: o.Partition, Offset: o.Offset, Metadata: meta}
	}
	fail := func(step string, err error) error {
		return s.failed(fmt.Errorf("%s: %w", step, err))
	}
	if !s.exactlyOnce() {
		// Everything written so far (all output up to the checkpoint's
		// barrier, and perhaps some after it) is delivered before the
		// offsets that cover its input are committed.
		if err := s.p.Flush(ctx); err != nil {
			return fail("flush", err)
		}
		cs := make([]admin.Committed, len(offs))
		for i, o := range offs {
			cs[i] = admin.Committed{Topic: o.Topic, Partition: o.Partition, Offset: o.Offset, Metadata: o.Metadata}
		}
		if err := s.commits.CommitGroupOffsets(ctx, group, cs); err != nil {
			return fail("commit offsets", err)
		}
		s.committed = ref.ID
		return nil
	}
	if err := s.memberErr(); err != nil {
		// The group may have given the partitions to another member: this
		// transaction must not commit; the next producer aborts it.
		s.err, s.unknown = sinkErrorf(s.topic, "checkpoint %s not committed: instance %q: %w", ref, s.info.Instance, outOfGroup(err)), true
		s.wake()
		return s.err
	}
	fp := pointsOf(ctx)
	// The transaction carries the output of every epoch ≤ ref.ID. After an
	// aborted checkpoint some of it still waits in the buffer (the epoch
	// after the aborted barrier): it goes in now, or it would commit only
	// with a later checkpoint than the offsets that cover its input.
	if err := s.drain(ctx, ref.ID); err != nil {
		return err
	}
	if err := fp.point(pointBeforeSendOffsets); err != nil {
		return err
	}
	if simulated(simAbortUnknown) {
		// The abort path (as after an abortable error), its answer lost.
		sctx, cancel := context.WithTimeout(ctx, time.Millisecond)
		aerr := s.p.AbortTransaction(sctx)
		cancel()
		return fail("abort", fmt.Errorf("simulated unknown abort outcome (abort returned %v)", aerr))
	}
	if simulated(forceAbort) {
		aerr := s.p.AbortTransaction(ctx)
		return fail("abort", fmt.Errorf("forced abort path (abort returned %v)", aerr))
	}
	if simulated(simSendOffsetsUnknown) {
		sctx, cancel := context.WithTimeout(ctx, time.Millisecond)
		err := s.sendOffsets(sctx, group, offs)
		cancel()
		return fail("send offsets", fmt.Errorf("simulated unknown send-offsets outcome (send offsets returned %v)", err))
	}
	if err := s.unlocked(func() error { return s.sendOffsets(ctx, group, offs) }); err != nil {
		if errors.Is(err, producer.ErrNotMember) && s.ms != nil {
			// The coordinator no longer knows this member, though the
			// member was not told (its session expired unnoticed, say):
			// the next Reset joins a new one (join), as Kafka Streams
			// rejoins on a CommitFailedException from sendOffsets.
			s.ms.fail(err)
		}
		return fail("send offsets", s.abortIfRequired(ctx, err))
	}
	if err := s.unlocked(func() error { return fp.point(pointAfterSendOffsets) }); err != nil {
		return err
	}
	if simulated(simCommitStall) {
		<-ctx.Done()
		return fail("commit", fmt.Errorf("simulated stalled commit: %w", context.Cause(ctx)))
	}
	if simulated(simCommitUnknown) {
		sctx, cancel := context.WithTimeout(ctx, time.Millisecond)
		err := s.p.CommitTransaction(sctx)
		cancel()
		return fail("commit", fmt.Errorf("simulated unknown commit outcome (commit returned %v)", err))
	}
	if err := s.unlocked(func() error { return s.p.CommitTransaction(ctx) }); err != nil {
		if !testRetrySameProducer {
			return fail("commit", s.abortIfRequired(ctx, err))
		}
		// The broken protocol (tests only): retry on this producer while
		// the error lets a retry succeed. A fatal or abort-requiring error
		// ends the loop: retrying those answers at once, forever (a CI run
		// logged itself out of memory that way).
		for attempt := 1; err != nil; attempt++ {
			var te *producer.TxnError
			if attempt > 20 || (errors.As(err, &te) && (te.Fatal || te.Abortable)) {
				return fail("commit", err)
			}
			s.log.Warn("kafkaio: sink: TEST ONLY: retrying the commit on the same producer", "checkpoint", ref.String(), "attempt", attempt, "err", err)
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.commitDeadline)
			err = s.p.CommitTransaction(rctx)
			cancel()
		}
	}
	s.committed = ref.ID
	s.purge(offsets)
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

// unlocked runs f, a network call of Commit on the producer, without s.mu:
// the sink's tasks go on writing meanwhile, their records (all of later
// epochs) held in the epoch buffer until the next transaction begins.
// Holding the lock instead stalled every Write for the commit's round
// trips, 5 to 53 ms of each checkpoint on the benchmark job (issue #15).
// Only Commit uses the producer meanwhile: the engine calls Commit from
// one goroutine, and Reset and Close never during a Commit. Called with
// s.mu held; returns with it held.
func (s *sink[T]) unlocked(f func() error) error {
	s.committing = true
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.committing = false
	}()
	return f()
}

// drain produces the buffered records of epochs ≤ upTo into the open
// transaction, in the order they were written, and keeps the rest.
func (s *sink[T]) drain(ctx context.Context, upTo uint64) error {
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
	s.buffer, s.bufEpochs, s.bufBytes = keep, keepE, 0
	for _, rec := range keep {
		s.bufBytes += recordBytes(rec)
	}
	return nil
}

// closeClients closes the producer and the commit client, with abort
// first aborting the open transaction, unless its state is unknown (an
// abort is never sent after a call whose outcome is unknown: the next
// producer's InitTransactions settles it); called with s.mu held.
func (s *sink[T]) closeClients(abort bool) error {
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
func (s *sink[T]) Close() error {
	s.bg.Wait() // a purge of hop records: bounded by its timeout
	s.mu.Lock()
	defer s.mu.Unlock()
	err := s.closeClients(true)
	if s.member != nil {
		if merr := s.member.Close(); merr != nil && err == nil {
			err = merr
		}
		s.member = nil
	}
	return err
}
