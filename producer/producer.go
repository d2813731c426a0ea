// Package producer is a typed Kafka producer on confluent-kafka-go that
// places every record with kord's partitioner package (Java-identical
// placement) and keeps each key's records in order.
//
// # Placement
//
// Every record's partition is chosen by a [partitioner.Partitioner] from
// live topic metadata (partition count; available = has a leader, ascending
// ids) and set explicitly on the message, so librdkafka's own partitioner
// (CRC32 by default) never decides. Metadata is fetched when a topic is
// first used, refreshed every [MetadataMaxAge], and at once after a
// delivery error that says a partition or topic is unknown (see
// MetadataMaxAge). Adding partitions to a topic moves keys, as it does in
// Java.
//
// # Order
//
// The producer is idempotent (enable.idempotence=true, acks=all) and runs
// librdkafka with enable.gapless.guarantee=true: if a failure could leave a
// gap in a partition's sequence (a batch failed while later ones of the
// same partition could still succeed), librdkafka raises a fatal error and
// fails every queued record instead of writing past the gap. On top of
// that, in ordered mode (the default) the first failed delivery stops this
// producer: records still queued in librdkafka are purged (they fail,
// through their callbacks or Flush), and later Produce calls return
// [ErrFailed] wrapping it. One window remains, as librdkafka documents: a
// record that fails by message.timeout.ms is not covered by the gapless
// guarantee, so records already in flight behind it may still be written.
// [Set] message.timeout.ms to 0 (never time out) where no gap is
// acceptable. So a key's records are written in Produce order, with no
// record written after one of its predecessors failed. Records of one key
// must be produced from one goroutine (or otherwise in a fixed order) for
// that order to mean anything.
//
// # Delivery results
//
// A failed delivery is never dropped: it reaches the record's callback, or,
// for records produced without a callback, the next Flush or Close returns
// it.
//
// # Failures to reach the cluster
//
// A metadata request (a topic's first use) succeeds or fails within
// [MetadataTimeout] (10 s by default), with an error that names its cause in
// the classes the consumer and package admin share: [ErrAuth] (credentials
// or TLS refused, within about a second), [ErrUnreachable], [ErrDenied],
// [ErrUnknownTopic]. InitTransactions is bounded by its context's deadline
// alone, and its timeout is classified the same way (DESIGN.md,
// "Errors"). librdkafka's log goes to [Logger], never raw to stderr.
package producer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kordproject/kord/internal/kafkaconf"
	"github.com/kordproject/kord/internal/rdkproduce"
	"github.com/kordproject/kord/runlog"
	"github.com/kordproject/kord/serde"
)

// Record is one record to produce.
type Record[K, V any] struct {
	Topic   string
	Key     K
	Value   V
	Headers []Header
	// Timestamp is the record's timestamp; zero means the time of Produce.
	Timestamp time.Time
	// Partition, when set, is the partition to write to, and the
	// partitioner is not asked (Java's ProducerRecord with a partition).
	// One the topic does not have fails Produce, naming both.
	Partition *int32
}

// Header is a record header.
type Header struct {
	Key   string
	Value []byte
}

// Delivery is where a record was written.
type Delivery struct {
	Topic     string
	Partition int32
	Offset    int64
}

// Producer writes typed records to Kafka. It is safe for concurrent use.
//
// New starts three goroutines (delivery reports, librdkafka's log, metadata
// refresh); Close ends them and waits for them.
type Producer[K, V any] struct {
	c    *client
	keys func(K) ([]byte, error)
	vals func(V) ([]byte, error)
}

// New returns a producer that encodes keys and values with the given
// serdes (package serde). A nil serde writes []byte keys or values as they
// are (nil is a null), and a null for every other type: a producer whose
// records have no key needs no key serde.
func New[K, V any](keys serde.Serde[K], values serde.Serde[V], opts ...Opt) (*Producer[K, V], error) {
	c, err := newClient(opts)
	if err != nil {
		return nil, err
	}
	return &Producer[K, V]{c: c, keys: encoder(keys), vals: encoder(values)}, nil
}

// encoder is how a producer writes a T: with s, or as the bytes they are,
// or as a null.
func encoder[T any](s serde.Serde[T]) func(T) ([]byte, error) {
	if s != nil {
		return func(v T) ([]byte, error) { return s.Encode(nil, v) }
	}
	if raw, ok := any(func(v []byte) ([]byte, error) { return v, nil }).(func(T) ([]byte, error)); ok {
		return raw
	}
	return func(T) ([]byte, error) { return nil, nil }
}

// Produce encodes r, chooses its partition and queues it. done, if not nil,
// is called once with the outcome, on the producer's delivery goroutine, in
// the order the broker acknowledged the records of each partition; it must
// not block for long. Produce blocks while librdkafka's queue is full, until
// ctx is done.
func (p *Producer[K, V]) Produce(ctx context.Context, r Record[K, V], done func(Delivery, error)) error {
	key, err := p.keys(r.Key)
	if err != nil {
		return &Error{Op: "encode key", Topic: r.Topic, Partition: -1, Offset: -1, Err: err}
	}
	val, err := p.vals(r.Value)
	if err != nil {
		return &Error{Op: "encode value", Topic: r.Topic, Partition: -1, Offset: -1, Err: err}
	}
	return p.c.produce(ctx, r.Topic, r.Partition, key, val, r.Headers, r.Timestamp, done)
}

// ProduceBatch encodes recs, chooses their partitions and queues them in
// order, as Produce would one after another, with one call into
// librdkafka for the whole batch where it can (internal/rdkproduce: a
// loop over the function Produce calls, so order, idempotence and
// transactions are Produce's) on a producer without delivery reports
// (CommitReports); with reports, or under the kordnobatch tag, it calls
// Produce for each, without a callback. It blocks while librdkafka's queue is full, until ctx is
// done, and returns how many records it queued: on an error, recs[n] is
// the record that failed and none after it was queued (a caller that
// handles that record's error, ErrRecordTooLarge say, goes on with
// recs[n+1:]).
func (p *Producer[K, V]) ProduceBatch(ctx context.Context, recs []Record[K, V]) (int, error) {
	return p.c.produceBatch(ctx, len(recs), func(i int) (string, *int32, []byte, []byte, []Header, time.Time, error) {
		r := &recs[i]
		key, err := p.keys(r.Key)
		if err != nil {
			return "", nil, nil, nil, nil, time.Time{}, &Error{Op: "encode key", Topic: r.Topic, Partition: -1, Offset: -1, Err: err}
		}
		val, err := p.vals(r.Value)
		if err != nil {
			return "", nil, nil, nil, nil, time.Time{}, &Error{Op: "encode value", Topic: r.Topic, Partition: -1, Offset: -1, Err: err}
		}
		return r.Topic, r.Partition, key, val, r.Headers, r.Timestamp, nil
	})
}

// ProduceSync produces r and waits for its delivery.
func (p *Producer[K, V]) ProduceSync(ctx context.Context, r Record[K, V]) (Delivery, error) {
	type result struct {
		d   Delivery
		err error
	}
	ch := make(chan result, 1)
	if err := p.Produce(ctx, r, func(d Delivery, err error) { ch <- result{d, err} }); err != nil {
		return Delivery{}, err
	}
	select {
	case res := <-ch:
		return res.d, res.err
	case <-ctx.Done():
		return Delivery{}, fmt.Errorf("producer: waiting for delivery to topic %q: %w (the record may still be written)", r.Topic, context.Cause(ctx))
	}
}

// Flush waits until every record produced so far has a delivery result, or
// ctx is done. It returns the failures of records produced without a
// callback since the last Flush, and ErrFailed if the producer stopped.
func (p *Producer[K, V]) Flush(ctx context.Context) error { return p.c.flush(ctx) }

// Close flushes (bounded by CloseTimeout), purges what is still undelivered
// (those records fail), closes the librdkafka handle and waits for the
// producer's goroutines. It returns undelivered records' failures not
// reported to a callback. Calls after the first return nil. After a
// transactional call was given up (librdkafka still in it past its
// deadline: see SendOffsetsToTransaction), Close returns an error at once,
// and the handle is closed, and the goroutines end, when that call returns.
func (p *Producer[K, V]) Close() error { return p.c.close() }

// Partition returns the partition r would be written to now, without
// producing it.
func (p *Producer[K, V]) Partition(ctx context.Context, r Record[K, V]) (int32, error) {
	key, err := p.keys(r.Key)
	if err != nil {
		return -1, &Error{Op: "encode key", Topic: r.Topic, Partition: -1, Offset: -1, Err: err}
	}
	return p.c.partition(ctx, r.Topic, key)
}

// topicMeta is what placement needs of a topic.
type topicMeta struct {
	name       string // the topic: every record to it points at this one string
	partitions int
	available  []int32 // ascending
}

type client struct {
	cfg cfg
	kp  *kafka.Producer
	log *slog.Logger
	// w queues ProduceBatch's records in one call into librdkafka
	// (internal/rdkproduce), without delivery reports only; nil when the
	// batch path is not built in (kordnobatch) or not usable, and then
	// ProduceBatch queues them one at a time. batches holds its
	// []rdkproduce.Record buffers.
	w       *rdkproduce.Writer
	batches sync.Pool

	// closeMu guards kp against use after Close: producers hold it shared
	// while they call into librdkafka.
	closeMu sync.RWMutex
	closed  bool
	// abandoned counts transactional calls still in librdkafka after
	// txnCall stopped waiting for them; each holds closeMu shared. Close
	// meanwhile sets closeLater and leaves the handle to the last of them.
	abandoned  atomic.Int32
	closeLater atomic.Bool

	metaMu  sync.RWMutex
	topics  map[string]*topicMeta
	fetchMu sync.Mutex // one metadata fetch at a time

	inflight atomic.Int64
	progMu   sync.Mutex
	progCh   chan struct{} // closed on the next delivery; nil when nobody waits

	failed atomic.Pointer[error] // ordered mode: the first delivery failure; or ErrAuth
	// conn follows the connection: the cluster answered (metadata, a
	// delivery, a transactional call), ErrAuth, the last client-level
	// error, which explains a later timeout.
	conn       *kafkaconf.Conn
	unrepMu    sync.Mutex
	unreported []error // failures of records without a callback, not yet returned

	refresh chan struct{}
	stop    chan struct{}
	wg      sync.WaitGroup
}

// pending is the opaque carried by each message through librdkafka.
type pending struct {
	done func(Delivery, error)
}

func newClient(opts []Opt) (*client, error) {
	c := &client{cfg: defaultCfg(), topics: map[string]*topicMeta{}, refresh: make(chan struct{}, 1), stop: make(chan struct{})}
	for _, o := range opts {
		o.apply(&c.cfg)
	}
	settings, err := c.cfg.build()
	if err != nil {
		return nil, err
	}
	c.log = c.cfg.log
	if err := kafkaconf.CheckBeyond(settings, c.cfg.checked); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	c.conn = kafkaconf.NewConn(settings)
	cm := kafka.ConfigMap{
		"go.logs.channel.enable":    true,
		"go.delivery.reports":       !c.cfg.noReports,
		"go.delivery.report.fields": "none",
		// confluent-kafka-go sizes both channels for 1,000,000 by default
		// (kafka/producer.go): 24 MB of buffers holding pointers, which
		// the garbage collector scans in full on every cycle. kord never
		// uses ProduceChannel, and its events goroutine drains Events as
		// they come; a full channel only holds librdkafka's reports back
		// in C, where queue.buffering.max.messages bounds them already.
		"go.events.channel.size":  eventsChannelSize,
		"go.produce.channel.size": 1,
	}
	for k, v := range settings {
		cm[k] = v
	}
	kp, err := kafka.NewProducer(&cm)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	kafkaconf.HandleOpened()
	c.kp = kp
	c.batches.New = func() any { return new([]rdkproduce.Record) }
	if c.cfg.noReports {
		if c.w, err = rdkproduce.New(kp); err != nil {
			if !errors.Is(err, rdkproduce.ErrUnsupported) || rdkproduce.Enabled {
				c.log.Warn("kord producer: queueing batches record by record", "err", err)
			}
			c.w = nil
		}
	}
	c.log.Info("kord producer started", "config", kafkaconf.Redacted(settings), "partitioner", fmt.Sprintf("%T", c.cfg.part))
	c.wg.Add(3)
	go c.events()
	go c.logs()
	go c.refresher()
	return c, nil
}

func (c *client) produce(ctx context.Context, topic string, to *int32, key, val []byte, hdrs []Header, ts time.Time, done func(Delivery, error)) error {
	if err := c.failure(); err != nil {
		return err
	}
	if done != nil && c.cfg.noReports {
		return fmt.Errorf("%w: a done callback needs delivery reports, which producer.CommitReports turns off", ErrConfig)
	}
	tm, part, err := c.target(ctx, topic, to, key)
	if err != nil {
		return err
	}
	// Without a delivery report the message is only read by Produce:
	// confluent-kafka-go copies key, value and headers into librdkafka
	// (RD_KAFKA_MSG_F_COPY) and keeps no reference to a message that has
	// no Opaque and no delivery channel (confluent-kafka-go,
	// kafka/producer.go, produce). It is reused, which saves two
	// allocations per record on the exactly-once sink's path.
	var m *kafka.Message
	if c.cfg.noReports {
		m = msgPool.Get().(*kafka.Message)
		defer func() { *m = kafka.Message{}; msgPool.Put(m) }()
	} else {
		m = &kafka.Message{Opaque: &pending{done: done}}
	}
	m.TopicPartition = kafka.TopicPartition{Topic: &tm.name, Partition: part}
	m.Key, m.Value, m.Timestamp = key, val, ts
	if len(hdrs) > 0 {
		m.Headers = make([]kafka.Header, len(hdrs))
		for i, h := range hdrs {
			m.Headers[i] = kafka.Header{Key: h.Key, Value: h.Value}
		}
	}
	for {
		err := c.enqueue(m)
		if err == nil {
			return nil
		}
		var kerr kafka.Error
		if !errors.As(err, &kerr) || kerr.Code() != kafka.ErrQueueFull {
			return err
		}
		// librdkafka's queue is full: wait for deliveries to make room.
		if err := c.waitProgress(ctx, 10*time.Millisecond); err != nil {
			return &Error{Op: "produce", Topic: topic, Partition: part, Offset: -1, Err: fmt.Errorf("queue full: %w", err)}
		}
		if err := c.failure(); err != nil {
			return err
		}
	}
}

// target is the topic's metadata and the partition a record goes to: to,
// when it is set and the topic has it, else the partitioner's choice.
func (c *client) target(ctx context.Context, topic string, to *int32, key []byte) (*topicMeta, int32, error) {
	tm, err := c.topic(ctx, topic)
	if err != nil {
		return nil, -1, err
	}
	if to != nil {
		if part := *to; part < 0 || int(part) >= tm.partitions {
			return nil, -1, &Error{Op: "produce", Topic: tm.name, Partition: part, Offset: -1, Err: fmt.Errorf("partition %d of a topic of %d partitions", part, tm.partitions)}
		}
		return tm, *to, nil
	}
	part, err := c.place(tm, key)
	return tm, part, err
}

// batchRecord gives record i of a batch, encoded: its topic, partition
// (nil: the partitioner's), key, value, headers and timestamp.
type batchRecord func(i int) (topic string, to *int32, key, val []byte, hdrs []Header, ts time.Time, err error)

// produceBatch queues n records, given by rec, in order: through
// rdkproduce's one call per batch when there are no delivery reports and
// the batch path is built in, else one enqueue each.
func (c *client) produceBatch(ctx context.Context, n int, rec batchRecord) (int, error) {
	if err := c.failure(); err != nil {
		return 0, err
	}
	if !c.cfg.noReports || c.w == nil {
		for i := range n {
			topic, to, key, val, hdrs, ts, err := rec(i)
			if err == nil {
				err = c.produce(ctx, topic, to, key, val, hdrs, ts, nil)
			}
			if err != nil {
				return i, err
			}
		}
		return n, nil
	}
	b := c.batches.Get().(*[]rdkproduce.Record)
	defer func() { clear(*b); c.batches.Put(b) }()
	rs := (*b)[:0]
	var failed error // the error of record len(rs), which stops the batch
	for i := range n {
		topic, to, key, val, hdrs, ts, err := rec(i)
		var tm *topicMeta
		var part int32
		if err == nil {
			tm, part, err = c.target(ctx, topic, to, key)
		}
		if err != nil {
			failed = err
			break
		}
		r := rdkproduce.Record{Topic: tm.name, Partition: part, Key: key, Value: val, Timestamp: ts}
		if len(hdrs) > 0 {
			r.Headers = make([]kafka.Header, len(hdrs))
			for j, h := range hdrs {
				r.Headers[j] = kafka.Header{Key: h.Key, Value: h.Value}
			}
		}
		rs = append(rs, r)
	}
	*b = rs
	done := 0
	for done < len(rs) {
		k, err := c.writeBatch(rs[done:])
		done += k
		if err == nil {
			continue
		}
		var kerr kafka.Error
		if !errors.As(err, &kerr) || kerr.Code() != kafka.ErrQueueFull {
			return done, err
		}
		// librdkafka's queue is full: wait for deliveries to make room,
		// then queue the rest, in order.
		r := &rs[done]
		if err := c.waitProgress(ctx, 10*time.Millisecond); err != nil {
			return done, &Error{Op: "produce", Topic: r.Topic, Partition: r.Partition, Offset: -1, Err: fmt.Errorf("queue full: %w", err)}
		}
		if err := c.failure(); err != nil {
			return done, err
		}
	}
	return done, failed
}

// writeBatch hands rs to librdkafka under the close guard, in one call,
// and returns how many it queued and the error of the next, as enqueue
// returns it (kafka.ErrQueueFull as it is).
func (c *client) writeBatch(rs []rdkproduce.Record) (int, error) {
	c.closeMu.RLock()
	defer c.closeMu.RUnlock()
	if c.closed {
		return 0, ErrClosed
	}
	n, err := c.w.Write(rs)
	if err == nil {
		return n, nil
	}
	if errors.Is(err, rdkproduce.ErrClosed) {
		return n, ErrClosed
	}
	r := &rs[n]
	return n, c.enqueueError(r.Topic, r.Partition, len(r.Key)+len(r.Value), err)
}

// enqueue hands m to librdkafka under the close guard.
func (c *client) enqueue(m *kafka.Message) error {
	c.closeMu.RLock()
	defer c.closeMu.RUnlock()
	if c.closed {
		return ErrClosed
	}
	// Without delivery reports (CommitReports) nothing would ever count a
	// record back out: only reported records are in flight.
	counted := !c.cfg.noReports
	if counted {
		c.inflight.Add(1)
	}
	err := c.kp.Produce(m, nil)
	if err == nil {
		return nil
	}
	if counted {
		c.inflight.Add(-1)
	}
	return c.enqueueError(*m.TopicPartition.Topic, m.TopicPartition.Partition, len(m.Key)+len(m.Value), err)
}

// enqueueError is librdkafka's refusal of a record of size bytes (key and
// value) to topic's partition, as Produce returns it: kafka.ErrQueueFull
// as it is (the caller waits and tries again), a too large record as
// ErrRecordTooLarge, a fatal error with its cause.
func (c *client) enqueueError(topic string, partition int32, size int, err error) error {
	var kerr kafka.Error
	if errors.As(err, &kerr) && kerr.Code() == kafka.ErrQueueFull {
		return err
	}
	if errors.As(err, &kerr) && kerr.Code() == kafka.ErrMsgSizeTooLarge {
		err = fmt.Errorf("%w (%d bytes of key and value): %w", ErrRecordTooLarge, size, err)
	}
	if errors.As(err, &kerr) && kerr.Code() == kafka.ErrFatal {
		// librdkafka refuses every record once the producer has a fatal
		// error, with only "Local: Fatal error": say which (a fenced
		// transactional producer is ErrFenced, as its other calls are).
		if fatal := c.kp.GetFatalError(); fencedCode(fatal) {
			err = fmt.Errorf("%w: %w: %w", ErrFenced, fatal, err)
		} else if fatal != nil {
			err = fmt.Errorf("%w: %w", fatal, err)
		}
	}
	return &Error{Op: "produce", Topic: topic, Partition: partition, Offset: -1, Err: err}
}

func (c *client) partition(ctx context.Context, topic string, key []byte) (int32, error) {
	tm, err := c.topic(ctx, topic)
	if err != nil {
		return -1, err
	}
	return c.place(tm, key)
}

// place returns the partition of a record with key to tm's topic.
func (c *client) place(tm *topicMeta, key []byte) (int32, error) {
	p := c.cfg.part.Partition(tm.name, key, tm.partitions, tm.available)
	if p < 0 || int(p) >= tm.partitions {
		return -1, &Error{Op: "partition", Topic: tm.name, Partition: -1, Offset: -1,
			Err: fmt.Errorf("partitioner %T returned %d for a topic of %d partitions", c.cfg.part, p, tm.partitions)}
	}
	return p, nil
}

// eventsChannelSize is the producer's go.events.channel.size.
const eventsChannelSize = 16_384

// msgPool holds the messages of records produced without a delivery
// report (produce).
var msgPool = sync.Pool{New: func() any { return new(kafka.Message) }}

func (c *client) failure() error {
	if c.isClosed() {
		return ErrClosed
	}
	if f := c.failed.Load(); f != nil {
		if errors.Is(*f, ErrAuth) {
			return *f
		}
		return fmt.Errorf("%w: %w", ErrFailed, *f)
	}
	return nil
}

func (c *client) isClosed() bool {
	c.closeMu.RLock()
	defer c.closeMu.RUnlock()
	return c.closed
}

// events serves delivery reports and client-level errors until librdkafka's
// event channel closes (in close).
func (c *client) events() {
	defer c.wg.Done()
	for ev := range c.kp.Events() {
		switch e := ev.(type) {
		case *kafka.Message:
			c.delivered(e)
		case kafka.Error:
			if e.IsFatal() {
				err := fmt.Errorf("producer: fatal librdkafka error: %w", e)
				if fencedCode(c.kp.GetFatalError()) || fencedCode(e) {
					err = fmt.Errorf("%w: %w", ErrFenced, err)
				}
				c.fail(err)
				c.log.Error("kord producer: fatal error", "err", e)
			} else if err := c.conn.Event(e); err != nil {
				if c.fail(fmt.Errorf("producer: %w", err)) {
					c.log.Error("kord producer: the cluster refused the producer", "err", err)
				}
			} else {
				c.log.Warn("kord producer: client error", "err", e)
			}
		default:
			c.log.Debug("kord producer: event", "event", ev.String())
		}
	}
}

func (c *client) delivered(m *kafka.Message) {
	p, _ := m.Opaque.(*pending)
	tp := m.TopicPartition
	topic := ""
	if tp.Topic != nil {
		topic = *tp.Topic
	}
	d := Delivery{Topic: topic, Partition: tp.Partition, Offset: int64(tp.Offset)}
	var err error
	if tp.Error == nil {
		c.conn.Served()
	} else {
		err = &Error{Op: "deliver", Topic: topic, Partition: tp.Partition, Offset: -1, Err: tp.Error}
		txn := c.cfg.transactionalID != ""
		// In a transaction a failed record makes the transaction fail to
		// commit (librdkafka requires an abort), which is the gap guard
		// there; outside one, ordered mode stops the producer.
		if !c.cfg.allowReordering && !txn {
			if c.fail(err) {
				// Records still queued behind the failed one would be
				// written after the gap: fail them instead. (Records
				// already in flight cannot be recalled; librdkafka's
				// gapless guarantee raises a fatal error for a failed
				// batch, but not for records failing by message.timeout.ms.)
				if perr := c.kp.Purge(kafka.PurgeQueue | kafka.PurgeNonBlocking); perr != nil {
					c.log.Error("kord producer: purge after delivery failure", "err", perr)
				}
			}
		}
		if stale(tp.Error) {
			c.triggerRefresh()
		}
		if (p == nil || p.done == nil) && !(txn && purged(tp.Error)) {
			c.unrepMu.Lock()
			c.unreported = append(c.unreported, err)
			c.unrepMu.Unlock()
		}
	}
	if p != nil && p.done != nil {
		p.done(d, err)
	}
	c.inflight.Add(-1)
	c.progMu.Lock()
	if c.progCh != nil {
		close(c.progCh)
		c.progCh = nil
	}
	c.progMu.Unlock()
}

// purged reports whether err is librdkafka's report for a record it dropped
// on purpose: on AbortTransaction, or on Close after the timeout.
func purged(err error) bool {
	var kerr kafka.Error
	return errors.As(err, &kerr) && (kerr.Code() == kafka.ErrPurgeQueue || kerr.Code() == kafka.ErrPurgeInflight)
}

// stale reports whether err suggests the producer's metadata is out of date.
func stale(err error) bool {
	var kerr kafka.Error
	if !errors.As(err, &kerr) {
		return false
	}
	switch kerr.Code() {
	case kafka.ErrUnknownTopicOrPart, kafka.ErrUnknownPartition, kafka.ErrLeaderNotAvailable,
		kafka.ErrNotLeaderForPartition, kafka.ErrUnknownTopic:
		return true
	}
	return false
}

// fail records the producer's first failure and reports whether this was it.
func (c *client) fail(err error) bool {
	return c.failed.CompareAndSwap(nil, &err)
}

// waitProgress waits for the next delivery, at most d, or until ctx is done.
func (c *client) waitProgress(ctx context.Context, d time.Duration) error {
	c.progMu.Lock()
	if c.progCh == nil {
		c.progCh = make(chan struct{})
	}
	ch := c.progCh
	c.progMu.Unlock()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ch:
	case <-t.C:
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	return nil
}

func (c *client) flush(ctx context.Context) error { return c.flushing(ctx, false) }

// kick asks librdkafka to send what it holds now, ignoring linger.ms, for
// up to 50 ms (rd_kafka_flush through kafka.Producer.Flush). closing: the
// caller is close, which alone may use the handle once closed is set.
func (c *client) kick(closing bool) {
	if !closing {
		c.closeMu.RLock()
		defer c.closeMu.RUnlock()
		if c.closed {
			return
		}
	}
	c.kp.Flush(50)
}

func (c *client) flushing(ctx context.Context, closing bool) error {
	if c.cfg.noReports {
		// No reports: wait for librdkafka's queues to drain; failures show
		// at CommitTransaction.
		for c.kp.Len() > 0 {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("producer: flush: %d records undelivered: %w", c.kp.Len(), context.Cause(ctx))
			}
			c.kick(closing)
		}
		return nil
	}
	for c.inflight.Load() > 0 {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("producer: flush: %d records undelivered: %w", c.inflight.Load(), context.Cause(ctx))
		}
		c.kick(closing)
		if err := c.waitProgress(ctx, time.Millisecond); err != nil {
			return fmt.Errorf("producer: flush: %d records undelivered: %w", c.inflight.Load(), err)
		}
	}
	c.unrepMu.Lock()
	errs := c.unreported
	c.unreported = nil
	c.unrepMu.Unlock()
	if f := c.failed.Load(); f != nil && len(errs) == 0 {
		errs = append(errs, fmt.Errorf("%w: %w", ErrFailed, *f))
	}
	return errors.Join(errs...)
}

// errLeftOpen is Close's error while an abandoned transactional call holds
// the handle (txnCall).
var errLeftOpen = errors.New("producer: close: a transactional call is still in librdkafka past its deadline (librdkafka issues #5456 and #5511); the handle is closed when it returns")

func (c *client) close() error {
	if c.abandoned.Load() > 0 {
		c.closeLater.Store(true)
		// Checked again: the last abandoned call closes only if it sees
		// closeLater, which it may have looked at just before.
		if c.abandoned.Load() > 0 {
			c.log.Warn("kord producer: close left to a transactional call still in librdkafka", "transactional_id", c.cfg.transactionalID)
			return errLeftOpen
		}
	}
	c.closeMu.Lock()
	if c.closed {
		c.closeMu.Unlock()
		return nil
	}
	c.closed = true
	c.closeMu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.closeTimeout)
	ferr := c.flushing(ctx, true)
	cancel()
	n := c.inflight.Load()
	if c.cfg.noReports {
		n = int64(c.kp.Len())
	}
	if n > 0 {
		// Purge what is still queued or in flight; librdkafka reports each
		// purged record as failed, through the events goroutine.
		c.log.Warn("kord producer: close timeout, purging undelivered records", "records", n, "timeout", c.cfg.closeTimeout)
		if err := c.kp.Purge(kafka.PurgeQueue | kafka.PurgeInFlight | kafka.PurgeNonBlocking); err != nil {
			c.log.Error("kord producer: purge", "err", err)
		}
		pctx, pcancel := context.WithTimeout(context.Background(), 5*time.Second)
		perr := c.flushing(pctx, true)
		pcancel()
		ferr = errors.Join(ferr, perr)
	}
	close(c.stop)
	if c.w != nil {
		c.w.Close() // its topic handles, before the producer's
	}
	c.kp.Close() // closes the events and logs channels after librdkafka's poller stops
	kafkaconf.HandleClosed()
	c.wg.Wait()
	return ferr
}

// logs forwards librdkafka's log to slog until the log channel closes.
func (c *client) logs() {
	defer c.wg.Done()
	for l := range c.kp.Logs() {
		c.conn.Log(l.Tag, l.Message)
		c.log.Log(context.Background(), syslogLevel(l.Level), "librdkafka: "+l.Message, "tag", l.Tag, "client", l.Name)
	}
}

// syslogLevel maps librdkafka's syslog levels (0 emergency .. 7 debug).
func syslogLevel(l int) slog.Level { return runlog.SyslogLevel(l) }

// topic returns the cached metadata of topic, fetching it on first use.
func (c *client) topic(ctx context.Context, topic string) (*topicMeta, error) {
	c.metaMu.RLock()
	tm := c.topics[topic]
	c.metaMu.RUnlock()
	if tm != nil {
		return tm, nil
	}
	c.fetchMu.Lock()
	defer c.fetchMu.Unlock()
	c.metaMu.RLock()
	tm = c.topics[topic]
	c.metaMu.RUnlock()
	if tm != nil {
		return tm, nil
	}
	return c.fetch(ctx, topic)
}

// fetch reads topic's metadata from the cluster and caches it. Callers hold
// fetchMu.
func (c *client) fetch(ctx context.Context, topic string) (*topicMeta, error) {
	timeout := c.cfg.metadataTimeout
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < timeout {
		timeout = time.Until(dl)
	}
	if err := ctx.Err(); err != nil || timeout <= 0 {
		return nil, &Error{Op: "metadata", Topic: topic, Partition: -1, Offset: -1, Err: context.Cause(ctx)}
	}
	md, err := c.metadata(ctx, topic, timeout)
	if err != nil {
		return nil, &Error{Op: "metadata", Topic: topic, Partition: -1, Offset: -1, Err: err}
	}
	t, ok := md.Topics[topic]
	if !ok || t.Error.Code() == kafka.ErrUnknownTopicOrPart || t.Error.Code() == kafka.ErrUnknownTopic ||
		(t.Error.Code() == kafka.ErrNoError && len(t.Partitions) == 0) {
		c.forget(topic)
		return nil, &Error{Op: "metadata", Topic: topic, Partition: -1, Offset: -1, Err: ErrUnknownTopic}
	}
	if t.Error.Code() != kafka.ErrNoError {
		return nil, &Error{Op: "metadata", Topic: topic, Partition: -1, Offset: -1, Err: t.Error}
	}
	tm := metaOf(t)
	tm.name = topic
	c.metaMu.Lock()
	old := c.topics[topic]
	c.topics[topic] = tm
	c.metaMu.Unlock()
	if old != nil && old.partitions != tm.partitions {
		c.log.Warn("kord producer: partition count changed; keys now map to other partitions", "topic", topic, "was", old.partitions, "now", tm.partitions)
	}
	return tm, nil
}

// metadata asks for topic's metadata, for up to timeout, through the
// client's Conn.Do (internal/kafkaconf), in growing slices (1 s, 2 s, 4 s,
// ...), so that an authentication or TLS failure (ErrAuth, taken in by the
// events goroutine) ends the wait within a second rather than at its end,
// while a slow answer still gets its time; an unreachable cluster fails at
// the timeout as ErrUnreachable, and any failure is classified.
func (c *client) metadata(ctx context.Context, topic string, timeout time.Duration) (*kafka.Metadata, error) {
	var md *kafka.Metadata
	err := c.conn.Do(ctx, timeout, nil, func(_ context.Context, slice time.Duration) error {
		c.closeMu.RLock()
		defer c.closeMu.RUnlock()
		if c.closed {
			return ErrClosed
		}
		var err error
		md, err = c.kp.GetMetadata(&topic, false, max(int(slice.Milliseconds()), 1))
		return err
	})
	if errors.Is(err, ErrClosed) {
		return nil, ErrClosed
	}
	if err != nil {
		if f := c.failure(); f != nil {
			return nil, f
		}
		return nil, err
	}
	return md, nil
}

// metaOf derives placement metadata. A partition is available when it has a
// leader (Java: Cluster.availablePartitionsForTopic keeps partitions whose
// leader is not null; a broker reports a leaderless partition with leader -1
// or LEADER_NOT_AVAILABLE).
func metaOf(t kafka.TopicMetadata) *topicMeta {
	ps := append([]kafka.PartitionMetadata(nil), t.Partitions...)
	sort.Slice(ps, func(i, j int) bool { return ps[i].ID < ps[j].ID })
	tm := &topicMeta{partitions: len(ps)}
	for _, p := range ps {
		if p.Leader >= 0 && p.Error.Code() != kafka.ErrLeaderNotAvailable {
			tm.available = append(tm.available, p.ID)
		}
	}
	return tm
}

func (c *client) forget(topic string) {
	c.metaMu.Lock()
	delete(c.topics, topic)
	c.metaMu.Unlock()
}

func (c *client) triggerRefresh() {
	select {
	case c.refresh <- struct{}{}:
	default:
	}
}

// refresher re-reads the metadata of every topic in use every
// MetadataMaxAge and when triggered, until close.
func (c *client) refresher() {
	defer c.wg.Done()
	t := time.NewTicker(c.cfg.metadataMaxAge)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
		case <-c.refresh:
		}
		c.refreshAll()
	}
}

func (c *client) refreshAll() {
	c.metaMu.RLock()
	names := make([]string, 0, len(c.topics))
	for n := range c.topics {
		names = append(names, n)
	}
	c.metaMu.RUnlock()
	for _, n := range names {
		c.fetchMu.Lock()
		ctx, cancel := context.WithTimeout(context.Background(), c.cfg.metadataTimeout)
		_, err := c.fetch(ctx, n)
		cancel()
		c.fetchMu.Unlock()
		if err != nil && !errors.Is(err, ErrClosed) {
			c.log.Warn("kord producer: metadata refresh", "topic", n, "err", err)
		}
	}
}
