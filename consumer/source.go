package consumer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kordproject/kord/admin"
	"github.com/kordproject/kord/cluster"
	"github.com/kordproject/kord/internal/kafkaconf"
	"github.com/kordproject/kord/internal/rdkbatch"
	"github.com/kordproject/kord/runlog"
)

// TopicPartition names a partition.
type TopicPartition struct {
	Topic     string
	Partition int32
}

func (tp TopicPartition) String() string { return fmt.Sprintf("%s[%d]", tp.Topic, tp.Partition) }

// Position is a partition and the next offset to read from it.
type Position struct {
	Topic     string
	Partition int32
	Offset    int64
}

// Record is one consumed record.
type Record struct {
	Topic     string
	Partition int32
	Offset    int64
	Key       []byte
	Value     []byte
	Headers   []Header
	Timestamp time.Time
	// TimestampType says what Timestamp is: the producer's time
	// (CreateTime) or the broker's (LogAppendTime), as the topic's
	// message.timestamp.type sets; TimestampNone when the record has none.
	TimestampType TimestampType
}

// Header is a record header.
type Header struct {
	Key   string
	Value []byte
}

// TimestampType is the kind of a record's timestamp (Kafka's
// TimestampType).
type TimestampType int8

const (
	TimestampNone      TimestampType = iota // no timestamp (Kafka's -1)
	TimestampCreate                         // CreateTime: set by the producer
	TimestampLogAppend                      // LogAppendTime: set by the broker
)

// String is Kafka's name of the type.
func (t TimestampType) String() string {
	switch t {
	case TimestampCreate:
		return "CreateTime"
	case TimestampLogAppend:
		return "LogAppendTime"
	}
	return "NoTimestampType"
}

func timestampType(t kafka.TimestampType) TimestampType {
	switch t {
	case kafka.TimestampCreateTime:
		return TimestampCreate
	case kafka.TimestampLogAppendTime:
		return TimestampLogAppend
	}
	return TimestampNone
}

var (
	// ErrConfig is a configuration error.
	ErrConfig = errors.New("consumer: invalid configuration")
	// ErrAuth means the cluster refused the consumer: its credentials
	// (SASL) were refused, or the TLS handshake failed (an untrusted or
	// expired certificate, a host name the certificate does not name).
	// Every call fails with it from then on; waiting would not help. The
	// same value as producer.ErrAuth.
	ErrAuth = kafkaconf.ErrAuth
	// ErrOutOfRange means a restored or requested offset is not in the
	// partition's log (below its log start, or past its end). kord never
	// resets it silently.
	ErrOutOfRange = errors.New("consumer: offset out of range")
	// ErrUnknownTopic means the topic does not exist. The same value as
	// producer.ErrUnknownTopic and admin.ErrUnknownTopic.
	ErrUnknownTopic = kafkaconf.ErrUnknownTopic
	// ErrUnreachable means no broker of the cluster answered within the
	// request timeout (RequestTimeout): the connection was refused, the
	// host not found, or the connect timed out. The error names the
	// bootstrap servers and the cause. It may pass: a job retries it by
	// its restart strategy. The same value as producer.ErrUnreachable.
	ErrUnreachable = kafkaconf.ErrUnreachable
	// ErrDenied means the cluster's authorizer refused a request; the
	// error names the request's resource. The same value as
	// producer.ErrDenied.
	ErrDenied = kafkaconf.ErrDenied
)

// OffsetError ties an error to a partition and offset.
type OffsetError struct {
	Topic     string
	Partition int32
	Offset    int64
	Err       error
}

func (e *OffsetError) Error() string {
	if e.Offset < 0 { // no offset, e.g. a group without a committed one
		return fmt.Sprintf("consumer: %s[%d]: %v", e.Topic, e.Partition, e.Err)
	}
	return fmt.Sprintf("consumer: %s[%d] offset %d: %v", e.Topic, e.Partition, e.Offset, e.Err)
}

func (e *OffsetError) Unwrap() error { return e.Err }

// Opt configures a Source.
type Opt func(*cfg)

type cfg struct {
	brokers  []string
	group    string
	settings map[string]string
	log      *slog.Logger
	timeout  time.Duration
	instance string            // Member: group.instance.id
	protocol string            // Member: group.protocol
	err      error             // from an option that could not be applied (Properties)
	checked  map[string]string // Cluster's: checked when it was made
}

// Brokers sets the bootstrap servers (librdkafka and Java bootstrap.servers).
func Brokers(addrs ...string) Opt { return func(c *cfg) { c.brokers = append(c.brokers, addrs...) } }

// Cluster connects to the cluster c describes: its bootstrap servers and
// settings, checked once when c was made (cluster.New). Settings and
// brokers given by this client's own options win over c's.
func Cluster(cl *cluster.Config) Opt {
	return func(c *cfg) {
		c.checked = kafkaconf.Adopt(c.settings, cl.Settings())
	}
}

// Group sets the group id the underlying librdkafka consumer carries
// (librdkafka requires one). The source never joins it and never commits
// to it. Default "kord.source".
func Group(id string) Opt { return func(c *cfg) { c.group = id } }

// Set passes a librdkafka consumer setting through by its own name.
// enable.auto.commit, enable.auto.offset.store and group.id are kord's.
// Set overrides kord's defaults: isolation.level (read_committed),
// fetch.queue.backoff.ms (10) and the fetch queue bounds
// queued.max.messages.kbytes (2048) and queued.min.messages (10000); see
// the package doc for the memory they bound.
func Set(key, value string) Opt { return func(c *cfg) { c.settings[key] = value } }

// Properties applies a Java client.properties file, the one a Java or
// Flink client of the same cluster uses: each Java property is mapped to
// its librdkafka equivalent (security.protocol, sasl.mechanism,
// sasl.jaas.config, ssl.truststore.*, ssl.keystore.*, ...; the README's
// table), and a property with no equivalent makes New fail, naming it and
// what to use instead. Options after it override what it sets; Brokers
// overrides its bootstrap.servers.
func Properties(path string) Opt {
	return func(c *cfg) {
		if err := kafkaconf.LoadJavaInto(path, c.settings); err != nil {
			c.err = errors.Join(c.err, fmt.Errorf("%w: %w", ErrConfig, err))
		}
	}
}

// Logger sets where the source logs, including librdkafka's log. Default:
// nothing is logged.
func Logger(l *slog.Logger) Opt { return func(c *cfg) { c.log = l } }

// RequestTimeout bounds each call that reaches for the cluster: metadata,
// watermark and offset requests, and the admin requests a FromGroup start
// makes (package admin, with this timeout). Within it a call succeeds or fails classified
// (ErrAuth, ErrUnreachable, ErrDenied, ErrUnknownTopic). Default 10s
// (kafkaconf.DefaultTimeout).
func RequestTimeout(d time.Duration) Opt { return func(c *cfg) { c.timeout = d } }

var forced = map[string]string{
	"enable.auto.commit":       "offsets reach Kafka only inside the transaction that commits a checkpoint",
	"enable.auto.offset.store": "offsets reach Kafka only inside the transaction that commits a checkpoint",
	"group.id":                 "use consumer.Group",
	"go.logs.channel.enable":   "kord forwards librdkafka's log to log/slog; use consumer.Logger",
	"enable.partition.eof":     "kord tracks positions itself (Reached)",
	"auto.offset.reset":        "kord never skips or re-reads silently: an offset outside the log fails with ErrOutOfRange; choose where to start with a Start (Earliest, Latest, AtTime)",
}

// Source reads assigned partitions from concrete offsets and tracks the next
// offset of every assigned partition, idle ones included. It is used from
// one goroutine, but for Lag; Close ends the goroutine it starts (log
// forwarding).
type Source struct {
	cfg cfg
	c   *kafka.Consumer
	log *slog.Logger

	// readCommitted is isolation.level=read_committed: Watermarks then
	// reads the LSO as the end of a partition.
	readCommitted bool

	// conn follows the connection: the cluster answered, ErrAuth, the
	// last client-level error, which explains a later timeout. slice
	// bounds one librdkafka call inside retry.
	conn    *kafkaconf.Conn
	slice   time.Duration
	refused bool // logged

	// rd reads the consumer's queue in batches (internal/rdkbatch: one
	// cgo call takes up to readBatch events, the records' bytes copied
	// into one Go allocation, of which their keys, values and header
	// values are slices); nil on the per-record path (the kordnobatch
	// tag), where PollAppend takes the records one Consumer.Poll at a
	// time. Both deliver the same records, positions, ends and errors
	// (readpath_test.go). batch is its last batch, reused (but not its
	// bytes: the records outlive it).
	rd    *rdkbatch.Reader
	batch rdkbatch.Batch

	// pos is each assigned partition's reading. Poll writes the values'
	// atomics; mu guards the map's replacement (Assign) and closed
	// against Lag, which reads them from another goroutine.
	mu       sync.RWMutex
	pos      map[TopicPartition]*progress
	assigned []TopicPartition
	wg       sync.WaitGroup
	closed   bool

	// ends asks for the partitions' ends (Behind, Lag), on connections of
	// its own: the consumer's hold a fetch that long-polls up to
	// fetch.wait.max.ms, which a request on them waits behind. Made on
	// first use, closed by Close.
	endsMu sync.Mutex
	ends   *admin.Client
}

// readBatch is the most events one batch read takes off the consumer's
// queue (records, partition ends, an error): keyed's default BatchSize,
// the records a reader asks PollAppend for at a time.
const readBatch = 512

// progress is one assigned partition's reading: the next offset to read,
// where the consumer last reached the partition's end (-1: not yet), and
// the timestamp of the last record read (Unix nanoseconds, 0: none).
type progress struct {
	next, eof, ts atomic.Int64
}

// New creates a source. It reads with isolation.level=read_committed and
// bounds librdkafka's fetch queue (see the package doc) unless Set
// overrides them.
func New(opts ...Opt) (*Source, error) {
	c := cfg{group: "kord.source", settings: map[string]string{}, log: slog.New(slog.NewTextHandler(io.Discard, nil)), timeout: kafkaconf.DefaultTimeout}
	for _, o := range opts {
		o(&c)
	}
	if c.err != nil {
		return nil, c.err
	}
	if err := kafkaconf.FoldAliases(c.settings); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	for k := range c.settings {
		if why, ok := forced[k]; ok {
			return nil, fmt.Errorf("%w: %s cannot be set: %s", ErrConfig, k, why)
		}
	}
	cm := kafka.ConfigMap{
		"isolation.level":          "read_committed",
		"auto.offset.reset":        "error",
		"client.id":                "kord",
		"allow.auto.create.topics": "false",
		// librdkafka idles a consumer whose queue was full for
		// fetch.queue.backoff.ms, 1000 by default: a fast reader then
		// reads at about a third of its speed (bench/RESULTS.md).
		"fetch.queue.backoff.ms": "10",
		// The fetch queue bounds (librdkafka's defaults: 65536 KiB and
		// 100000 records, per Source). librdkafka derives
		// fetch.max.bytes from the first unless it is set: see the
		// package doc for the memory these bound.
		"queued.max.messages.kbytes": defaultQueueKBytes,
		"queued.min.messages":        defaultQueueRecords,
	}
	for k, v := range c.settings {
		cm[k] = v
	}
	if len(c.brokers) > 0 {
		cm["bootstrap.servers"] = strings.Join(c.brokers, ",")
	}
	if v, _ := cm["bootstrap.servers"].(string); v == "" {
		return nil, fmt.Errorf("%w: no brokers (consumer.Brokers or bootstrap.servers)", ErrConfig)
	}
	cm["group.id"] = c.group
	cm["enable.auto.commit"] = false
	cm["enable.auto.offset.store"] = false
	cm["enable.partition.eof"] = true // end of partition events tell Reached where the end is
	cm["go.logs.channel.enable"] = true
	settings := map[string]string{}
	for k, v := range cm {
		settings[k] = fmt.Sprint(v)
	}
	if err := kafkaconf.CheckBeyond(settings, c.checked); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	kc, err := kafka.NewConsumer(&cm)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	kafkaconf.HandleOpened()
	iso, _ := cm["isolation.level"].(string)
	s := &Source{cfg: c, c: kc, log: c.log, pos: map[TopicPartition]*progress{}, readCommitted: iso == "read_committed", conn: kafkaconf.NewConn(settings)}
	if rdkbatch.Enabled {
		if s.rd, err = rdkbatch.New(kc, readBatch); err != nil {
			// Not a confluent-kafka-go or librdkafka it knows: the
			// records come one Consumer.Poll at a time, as with the
			// kordnobatch tag.
			s.log.Warn("kord source: reading record by record", "err", err)
			s.rd = nil
		}
	}
	s.wg.Add(1)
	go s.logs()
	return s, nil
}

func (s *Source) logs() {
	defer s.wg.Done()
	forwardLogs(s.c.Logs(), nil, s.conn, s.log)
}

// forwardLogs hands librdkafka's log to conn (which explains failures
// from it) and to log, at slog levels for syslog's, until the channel
// closes (the consumer's Close) or stop does.
func forwardLogs(logs chan kafka.LogEvent, stop <-chan struct{}, conn *kafkaconf.Conn, log *slog.Logger) {
	for {
		var l kafka.LogEvent
		var ok bool
		select {
		case l, ok = <-logs:
		case <-stop:
		}
		if !ok {
			return
		}
		conn.Log(l.Tag, l.Message)
		log.Log(context.Background(), runlog.SyslogLevel(l.Level), "librdkafka: "+l.Message, "tag", l.Tag, "client", l.Name)
	}
}

func (s *Source) timeoutMs(ctx context.Context) int {
	d := s.cfg.timeout
	if s.slice > 0 {
		d = s.slice
	}
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < d {
		d = time.Until(dl)
	}
	if d < time.Millisecond {
		d = time.Millisecond
	}
	return int(d.Milliseconds())
}

// Partitions returns the partition ids of topic, ascending.
func (s *Source) Partitions(ctx context.Context, topic string) ([]int32, error) {
	var md *kafka.Metadata
	err := s.retry(ctx, fmt.Sprintf("metadata of topic %q", topic), func(ctx context.Context) error {
		var err error
		md, err = s.c.GetMetadata(&topic, false, s.timeoutMs(ctx))
		return err
	})
	if err != nil {
		return nil, err
	}
	t, ok := md.Topics[topic]
	if !ok || t.Error.Code() == kafka.ErrUnknownTopicOrPart || t.Error.Code() == kafka.ErrUnknownTopic || len(t.Partitions) == 0 {
		return nil, fmt.Errorf("consumer: %w %q", ErrUnknownTopic, topic)
	}
	if t.Error.Code() != kafka.ErrNoError {
		return nil, fmt.Errorf("consumer: metadata of topic %q: %w", topic, t.Error)
	}
	ids := make([]int32, 0, len(t.Partitions))
	for _, p := range t.Partitions {
		ids = append(ids, p.ID)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids, nil
}

// Watermarks returns a partition's log start offset and its end as a
// consumer of the source's isolation level sees it: under read_committed
// (the default) the last stable offset (LSO), which is below the high
// watermark while a transaction is open; under read_uncommitted the high
// watermark. (librdkafka sends these ListOffsets requests with the
// consumer's isolation.level.) Transient errors (a leader moving or not
// yet elected, as right after a topic is created) are retried until the
// request timeout or ctx ends.
func (s *Source) Watermarks(ctx context.Context, tp TopicPartition) (low, end int64, err error) {
	refreshed := false
	err = s.retry(ctx, "watermarks of "+tp.String(), func(ctx context.Context) error {
		var err error
		low, end, err = s.c.QueryWatermarkOffsets(tp.Topic, tp.Partition, s.timeoutMs(ctx))
		var kerr kafka.Error
		if errors.As(err, &kerr) && kerr.Code() == kafka.ErrUnknownPartition && !refreshed {
			// A partition added since this client last read the topic's
			// metadata (partition discovery): refresh it once, ask again.
			refreshed = true
			topic := tp.Topic
			if _, merr := s.c.GetMetadata(&topic, false, s.timeoutMs(ctx)); merr == nil {
				low, end, err = s.c.QueryWatermarkOffsets(tp.Topic, tp.Partition, s.timeoutMs(ctx))
			}
		}
		return err
	})
	if err != nil {
		return 0, 0, err
	}
	return low, end, nil
}

// transient is kafkaconf.Transient: what retry tries again.
func transient(err error) bool { return kafkaconf.Transient(err) }

// retry calls fn through the client's Conn.Do (internal/kafkaconf), the
// one bounded and classified way kord's clients reach for the cluster:
// each call of fn gets a context bounded by a growing slice of the request
// timeout (1 s, 2 s, 4 s, ..., also through timeoutMs) and cancelled when
// the cluster refuses the client; between calls the consumer takes in the
// client's errors (drain). An authentication or TLS failure (ErrAuth) then
// ends the wait within a second, an unreachable cluster fails at the
// request timeout with kafkaconf.ErrUnreachable, and any failure is
// classified and named by what.
func (s *Source) retry(ctx context.Context, what string, fn func(ctx context.Context) error) error {
	defer func() { s.slice = 0 }()
	err := s.conn.Do(ctx, s.cfg.timeout, s.drain, func(ctx context.Context, slice time.Duration) error {
		s.slice = slice
		return fn(ctx)
	})
	if err != nil {
		return fmt.Errorf("consumer: %s: %w", what, err)
	}
	return nil
}

// drain takes in the client's pending events while nothing is assigned
// (then no record can be among them): errors, which librdkafka hands to a
// consumer only through its poll.
func (s *Source) drain() {
	if len(s.assigned) > 0 {
		return
	}
	for i := 0; i < 100; i++ {
		ev := s.c.Poll(0)
		if ev == nil {
			return
		}
		if e, ok := ev.(kafka.Error); ok {
			s.clientError(e)
		}
	}
}

// clientError takes in a client-level error: ErrAuth fails the consumer
// for good (conn.Failed); any other is kept to explain a later timeout.
func (s *Source) clientError(e kafka.Error) {
	if err := s.conn.Event(e); err != nil {
		if !s.refused {
			s.refused = true
			s.log.Error("kord consumer: the cluster refused the consumer", "err", err)
		}
		return
	}
	s.log.Warn("kord source: client error", "err", e)
}

// Assign assigns exactly these partitions, each from its concrete offset,
// after checking that every offset lies within the partition's log (log
// start ≤ offset ≤ high watermark; under read_committed an offset past the
// LSO but not past the high watermark waits for its transaction, as a
// Kafka fetch from it does); an offset outside fails with ErrOutOfRange
// naming the partition, the offset and the log's range.
func (s *Source) Assign(ctx context.Context, positions []Position) error {
	tps := make([]kafka.TopicPartition, 0, len(positions))
	pos := make(map[TopicPartition]*progress, len(positions))
	assigned := make([]TopicPartition, 0, len(positions))
	for _, p := range positions {
		tp := TopicPartition{p.Topic, p.Partition}
		if _, dup := pos[tp]; dup {
			return fmt.Errorf("consumer: %s assigned twice", tp)
		}
		low, end, err := s.Watermarks(ctx, tp)
		if err != nil {
			return err
		}
		high, ok, err := s.inLog(ctx, tp, p.Offset, logRange{low, end})
		if err != nil {
			return err
		}
		if !ok {
			return &OffsetError{Topic: p.Topic, Partition: p.Partition, Offset: p.Offset,
				Err: fmt.Errorf("%w: the log holds offsets %d to %d", ErrOutOfRange, low, high)}
		}
		topic := p.Topic
		tps = append(tps, kafka.TopicPartition{Topic: &topic, Partition: p.Partition, Offset: kafka.Offset(p.Offset)})
		pr := &progress{}
		pr.next.Store(p.Offset)
		pr.eof.Store(-1)
		pos[tp] = pr
		assigned = append(assigned, tp)
	}
	if err := s.c.Assign(tps); err != nil {
		return fmt.Errorf("consumer: assign: %w", err)
	}
	s.mu.Lock()
	s.pos, s.assigned = pos, assigned
	s.mu.Unlock()
	return nil
}

// Poll returns up to max records, waiting at most wait for the first one.
// Each returned record advances its partition's position to offset+1.
// A fetch error fails with the partition named; an offset out of range on a
// partition fails with ErrOutOfRange (auto.offset.reset is "error": kord
// never skips or re-reads silently).
func (s *Source) Poll(ctx context.Context, max int, wait time.Duration) ([]Record, error) {
	return s.PollAppend(ctx, nil, max, wait)
}

// PollAppend is Poll appending the records to dst, which it returns
// extended: a reader that reuses one slice from poll to poll allocates
// none for it.
func (s *Source) PollAppend(ctx context.Context, dst []Record, max int, wait time.Duration) ([]Record, error) {
	if err := s.conn.Failed(); err != nil {
		return dst, fmt.Errorf("consumer: %w", err)
	}
	if s.rd != nil {
		return s.pollBatches(ctx, dst, max, wait)
	}
	out := dst
	max += len(dst)
	deadline := time.Now().Add(wait)
	for len(out) < max {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		// Wait, up to the deadline, for the first record only: another
		// event (an end of partition, say) does not end the wait.
		timeout := 0
		if left := time.Until(deadline); len(out) == len(dst) && left > 0 {
			timeout = int(left.Milliseconds())
		}
		ev := s.c.Poll(timeout)
		if ev == nil {
			return out, nil
		}
		switch e := ev.(type) {
		case *kafka.Message:
			tp := e.TopicPartition
			if tp.Error != nil {
				return out, s.fetchError(tp)
			}
			pr := s.pos[TopicPartition{*tp.Topic, tp.Partition}]
			if pr == nil {
				continue // a partition no longer assigned
			}
			pr.next.Store(int64(tp.Offset) + 1)
			if e.TimestampType != kafka.TimestampNotAvailable {
				pr.ts.Store(e.Timestamp.UnixNano())
			}
			s.conn.Served()
			var hs []Header
			if len(e.Headers) > 0 {
				hs = make([]Header, len(e.Headers))
				for i, h := range e.Headers {
					hs[i] = Header{Key: h.Key, Value: h.Value}
				}
			}
			out = append(out, Record{Topic: *tp.Topic, Partition: tp.Partition, Offset: int64(tp.Offset), Key: e.Key, Value: e.Value, Headers: hs, Timestamp: e.Timestamp, TimestampType: timestampType(e.TimestampType)})
			if out[len(out)-1].TimestampType == TimestampNone {
				out[len(out)-1].Timestamp = time.Time{}
			}
		case kafka.PartitionEOF:
			if e.Topic != nil { // its Error is librdkafka's "no more messages"
				if pr := s.pos[TopicPartition{*e.Topic, e.Partition}]; pr != nil {
					pr.eof.Store(int64(e.Offset))
				}
			}
		case kafka.Error:
			if e.IsFatal() || e.Code() == kafka.ErrAutoOffsetReset {
				return out, fmt.Errorf("consumer: %w", e)
			}
			if s.clientError(e); s.conn.Failed() != nil {
				return out, fmt.Errorf("consumer: %w", s.conn.Failed())
			}
		}
	}
	return out, nil
}

// pollBatches is PollAppend on the batch path: it reads the consumer's
// queue in batches of at most the records still wanted, so it takes off
// the queue exactly the events the per-record loop above would have
// taken, and treats each as that loop does, in the same order. Only the
// first read waits (up to the deadline); a batch of partition ends or
// dropped events alone does not end the wait.
func (s *Source) pollBatches(ctx context.Context, dst []Record, max int, wait time.Duration) ([]Record, error) {
	out := dst
	max += len(dst)
	deadline := time.Now().Add(wait)
	b := &s.batch
	for len(out) < max {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		// Whole milliseconds, as the per-record loop waits.
		var timeout time.Duration
		if left := time.Until(deadline); len(out) == len(dst) && left > 0 {
			timeout = time.Duration(left.Milliseconds()) * time.Millisecond
		}
		if err := s.rd.ReadN(b, max-len(out), timeout); err != nil {
			return out, fmt.Errorf("consumer: %w", err)
		}
		if b.Len() == 0 {
			if b.Ignored > 0 {
				continue // only events Poll's loop drops too: read on
			}
			return out, nil
		}
		out = s.records(out, b)
		if b.Err == nil {
			continue
		}
		if b.ErrOnMessage {
			topic := b.ErrTopic
			return out, s.fetchError(kafka.TopicPartition{Topic: &topic, Partition: b.ErrPartition, Offset: kafka.Offset(b.ErrOffset), Error: b.Err})
		}
		var e kafka.Error
		if !errors.As(b.Err, &e) {
			return out, fmt.Errorf("consumer: %w", b.Err)
		}
		if e.IsFatal() || e.Code() == kafka.ErrAutoOffsetReset {
			return out, fmt.Errorf("consumer: %w", e)
		}
		if s.clientError(e); s.conn.Failed() != nil {
			return out, fmt.Errorf("consumer: %w", s.conn.Failed())
		}
	}
	return out, nil
}

// records appends b's records to out as PollAppend's per-record loop
// appends Poll's, skipping those of partitions no longer assigned, and
// takes in b's partition ends in their places among them. The records'
// headers share one allocation.
func (s *Source) records(out []Record, b *rdkbatch.Batch) []Record {
	n := 0
	for i := range b.Messages {
		n += len(b.Messages[i].Headers)
	}
	var hs []Header
	if n > 0 {
		hs = make([]Header, n)
	}
	eofs := b.EOFs
	served := false
	for i := range b.Messages {
		for len(eofs) > 0 && eofs[0].At <= i {
			s.eof(eofs[0])
			eofs = eofs[1:]
		}
		m := &b.Messages[i]
		pr := s.pos[TopicPartition{m.Topic, m.Partition}]
		if pr == nil {
			continue // a partition no longer assigned
		}
		pr.next.Store(m.Offset + 1)
		if m.TimestampType != kafka.TimestampNotAvailable {
			pr.ts.Store(m.Timestamp.UnixNano())
		}
		served = true
		var rh []Header
		if n := len(m.Headers); n > 0 {
			rh, hs = hs[:n:n], hs[n:]
			for j, h := range m.Headers {
				rh[j] = Header{Key: h.Key, Value: h.Value}
			}
		}
		r := Record{Topic: m.Topic, Partition: m.Partition, Offset: m.Offset, Key: m.Key, Value: m.Value, Headers: rh, Timestamp: m.Timestamp, TimestampType: timestampType(m.TimestampType)}
		if r.TimestampType == TimestampNone {
			r.Timestamp = time.Time{}
		}
		out = append(out, r)
	}
	for _, e := range eofs {
		s.eof(e)
	}
	if served {
		s.conn.Served()
	}
	// The batch no longer holds the records' bytes: once the caller
	// drops them, they go, whether or not Poll is called again.
	clear(b.Messages)
	b.Messages = b.Messages[:0]
	return out
}

// eof takes in the consumer reaching a partition's end.
func (s *Source) eof(e rdkbatch.EOF) {
	if pr := s.pos[TopicPartition{e.Topic, e.Partition}]; pr != nil {
		pr.eof.Store(e.Offset)
	}
}

func (s *Source) fetchError(tp kafka.TopicPartition) error {
	topic := ""
	if tp.Topic != nil {
		topic = *tp.Topic
	}
	err := tp.Error
	var kerr kafka.Error
	if errors.As(err, &kerr) && (kerr.Code() == kafka.ErrOffsetOutOfRange || kerr.Code() == kafka.ErrAutoOffsetReset) {
		err = fmt.Errorf("%w: %w", ErrOutOfRange, err)
	}
	var at int64
	if pr := s.pos[TopicPartition{topic, tp.Partition}]; pr != nil {
		at = pr.next.Load()
	}
	return &OffsetError{Topic: topic, Partition: tp.Partition, Offset: at, Err: err}
}

// Ends returns the end of every assigned partition, in assignment order,
// as Watermarks sees it (under read_committed, the last stable offset):
// what a bounded reader stops at.
func (s *Source) Ends(ctx context.Context) ([]Position, error) {
	out := make([]Position, len(s.assigned))
	for i, tp := range s.assigned {
		_, end, err := s.Watermarks(ctx, tp)
		if err != nil {
			return nil, err
		}
		out[i] = Position{Topic: tp.Topic, Partition: tp.Partition, Offset: end}
	}
	return out, nil
}

// Reached reports whether reading has reached ends (from Ends, or resolved
// earlier) on every partition it names: the next offset to read is at or
// past the end, or the consumer came to the partition's end at or past it.
// The second covers read_committed logs, whose last offsets can be
// transaction markers that no record carries. A partition not assigned
// counts as reached.
func (s *Source) Reached(ends []Position) bool {
	for _, e := range ends {
		tp := TopicPartition{e.Topic, e.Partition}
		pr := s.pos[tp]
		if pr == nil || pr.reached() >= e.Offset {
			continue
		}
		return false
	}
	return true
}

// Progress returns how far reading has come in tp: its next offset to
// read, or where the consumer reached the partition's end when that is
// further (past transaction markers, which carry no record: a reader
// positioned there reads the same records). -1 when tp is not assigned.
func (s *Source) Progress(tp TopicPartition) int64 {
	pr := s.pos[tp]
	if pr == nil {
		return -1
	}
	return pr.reached()
}

// Positions returns the next offset to read of every assigned partition,
// in assignment order, idle partitions included.
func (s *Source) Positions() []Position {
	out := make([]Position, len(s.assigned))
	for i, tp := range s.assigned {
		out[i] = Position{Topic: tp.Topic, Partition: tp.Partition, Offset: s.pos[tp].next.Load()}
	}
	return out
}

// endsClient returns the admin client Behind and Lag ask with.
func (s *Source) endsClient() (*admin.Client, error) {
	s.endsMu.Lock()
	defer s.endsMu.Unlock()
	if s.ends == nil {
		a, err := s.admin()
		if err != nil {
			return nil, err
		}
		s.ends = a
	}
	return s.ends, nil
}

// reached is how far reading has come: the next offset to read, or the
// end the consumer last reached there when that is further (a
// read_committed log's last offsets can be transaction markers, which no
// record carries).
func (p *progress) reached() int64 { return max(p.next.Load(), p.eof.Load()) }

// PartitionLag is how far a Source's reading stands behind a partition's
// end.
type PartitionLag struct {
	TopicPartition
	// Next is the next offset to read.
	Next int64
	// End is the partition's end as the Source's isolation level sees it:
	// under read_committed (the default) its last stable offset.
	End int64
	// Behind is the offsets between where reading has come (Next, or the
	// end the consumer reached there, past any transaction markers) and
	// End: 0 when caught up. Offsets, the way Kafka's tools count lag: a
	// transactional input's commit markers among them count too.
	Behind int64
	// LastRecord is the timestamp of the last record read, zero before
	// one.
	LastRecord time.Time
}

// Lag reports, for every assigned partition in assignment order, how far
// reading stands behind its end, asking the cluster for the ends (one
// ListOffsets request at the Source's isolation level, bounded by ctx and
// the request timeout). It
// may be called from any goroutine while another reads; Close waits for
// it. A closed Source, or one with nothing assigned, has no lag.
func (s *Source) Lag(ctx context.Context) ([]PartitionLag, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed || len(s.assigned) == 0 {
		return nil, nil
	}
	tps := make([]admin.TopicPartition, len(s.assigned))
	for i, tp := range s.assigned {
		tps[i] = admin.TopicPartition{Topic: tp.Topic, Partition: tp.Partition}
	}
	a, err := s.endsClient()
	if err != nil {
		return nil, err
	}
	latest, err := a.Latest(ctx, tps, s.readCommitted)
	if err != nil {
		return nil, fmt.Errorf("consumer: ends of the assigned partitions: %w", err)
	}
	out := make([]PartitionLag, len(s.assigned))
	for i, tp := range s.assigned {
		end := latest[admin.TopicPartition{Topic: tp.Topic, Partition: tp.Partition}]
		pr := s.pos[tp]
		l := PartitionLag{TopicPartition: tp, Next: pr.next.Load(), End: end, Behind: max(0, end-pr.reached())}
		if ts := pr.ts.Load(); ts != 0 {
			l.LastRecord = time.Unix(0, ts)
		}
		out[i] = l
	}
	return out, nil
}

// Close closes the consumer without committing anything and waits for its
// goroutine.
func (s *Source) Close() error {
	s.mu.Lock() // waits for a Lag in its request
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	s.endsMu.Lock()
	if s.ends != nil {
		s.ends.Close()
	}
	s.endsMu.Unlock()
	if s.rd != nil {
		s.rd.Close() // a PollAppend after Close fails: its reader is closed
	}
	err := s.c.Close()
	kafkaconf.HandleClosed()
	s.wg.Wait()
	if err != nil {
		return fmt.Errorf("consumer: close: %w", err)
	}
	return nil
}

// Behind reports whether tp, assigned to this Source, has records past
// what Poll has delivered: readable ones not fetched yet (neither the
// next offset to read nor the partition's end the consumer last reached
// stands at its last stable offset), or ones a read_committed reader cannot
// read yet (the last stable offset stands below the high watermark, behind
// a transaction still open). Kafka's ListOffsets, latest, at both
// isolation levels (KIP-98). A partition not assigned has none.
func (s *Source) Behind(ctx context.Context, tp TopicPartition) (bool, error) {
	pr := s.pos[tp]
	if pr == nil {
		return false, nil
	}
	a, err := s.endsClient()
	if err != nil {
		return false, err
	}
	atp := []admin.TopicPartition{{Topic: tp.Topic, Partition: tp.Partition}}
	latest := func(readCommitted bool) (int64, error) {
		ends, err := a.Latest(ctx, atp, readCommitted)
		if err != nil {
			return 0, fmt.Errorf("consumer: latest offset of %s: %w", tp, err)
		}
		return ends[atp[0]], nil
	}
	lso, err := latest(true)
	if err != nil {
		return false, err
	}
	if pr.reached() < lso {
		return true, nil
	}
	hw, err := latest(false)
	if err != nil {
		return false, err
	}
	return lso < hw, nil
}
