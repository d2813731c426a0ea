// Package admin is kord's Kafka admin client on confluent-kafka-go:
// topics (CreateTopic, DeleteTopics, Partitions, ListOffsets, TopicConfig,
// and Identity, the cluster id and topic id an offset belongs to) and
// consumer groups (GroupOffsets, CommitGroupOffsets, DeleteGroup). It sits
// beside the producer and consumer packages, imports neither, and knows
// nothing of kord's engine.
//
// # Bounded, classified failures
//
// Every call that reaches for the cluster succeeds or fails within the
// client's request timeout ([RequestTimeout], 10 s by default), and its
// error says why, in the same classes as the producer's and the
// consumer's (the same values):
//
//   - [ErrAuth]: the cluster refused the client: SASL credentials (the error
//     names the mechanism and the user, never the secret), or a TLS
//     handshake (the error names the broker certificate's subject and why
//     it does not verify: expired, another host, an unknown authority).
//     Within about a second, not at the timeout.
//   - [ErrUnreachable]: no broker answered: connection refused, host not
//     found, connect timed out. The error names the bootstrap servers.
//   - [ErrDenied]: the cluster's authorizer refused the request; the error
//     names the resource.
//   - [ErrUnknownTopic], [ErrUnknownGroup]: the topic or group does not
//     exist.
//
// librdkafka reports a refusal only as a client-level error event and a
// log line, and its admin calls wait out their whole timeout (about 70 s
// with librdkafka's defaults, for a topic's creation). The client reads
// those events and log lines as they come, and cancels a call's wait as
// soon as they say the cluster refused it.
//
// # Log
//
// librdkafka's log lines go to the client's [Logger] (log/slog) at their
// syslog level, never to stderr: an admin client made with
// kafka.NewAdminClient without go.logs.channel.enable prints them raw.
package admin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kordproject/kord/cluster"
	"github.com/kordproject/kord/internal/kafkaconf"
	"github.com/kordproject/kord/runlog"
)

var (
	// ErrConfig is a configuration error.
	ErrConfig = errors.New("admin: invalid configuration")
	// ErrAuth means the cluster refused the client (credentials or TLS
	// handshake). The same value as producer.ErrAuth and consumer.ErrAuth.
	ErrAuth = kafkaconf.ErrAuth
	// ErrUnreachable means no broker answered within the request timeout.
	// The same value as producer.ErrUnreachable and consumer.ErrUnreachable.
	ErrUnreachable = kafkaconf.ErrUnreachable
	// ErrDenied means the cluster's authorizer refused the request.
	ErrDenied = kafkaconf.ErrDenied
	// ErrUnknownTopic means the topic does not exist. The same value as
	// producer.ErrUnknownTopic and consumer.ErrUnknownTopic.
	ErrUnknownTopic = kafkaconf.ErrUnknownTopic
	// ErrUnknownGroup means the consumer group does not exist.
	ErrUnknownGroup = kafkaconf.ErrUnknownGroup
	// ErrClosed is returned by calls on a closed client.
	ErrClosed = errors.New("admin: closed")
)

// Opt configures a Client.
type Opt func(*cfg)

type cfg struct {
	brokers  []string
	settings map[string]string
	log      *slog.Logger
	timeout  time.Duration
	err      error
	checked  map[string]string // Cluster's: checked when it was made
}

// Brokers sets the bootstrap servers (librdkafka and Java
// bootstrap.servers).
func Brokers(addrs ...string) Opt { return func(c *cfg) { c.brokers = append(c.brokers, addrs...) } }

// Cluster connects to the cluster c describes: its bootstrap servers and
// settings, checked once when c was made (cluster.New). Settings and
// brokers given by this client's own options win over c's.
func Cluster(cl *cluster.Config) Opt {
	return func(c *cfg) {
		c.checked = kafkaconf.Adopt(c.settings, cl.Settings())
	}
}

// Set passes a librdkafka setting through by its own name (security
// settings, client.id, ...). go.logs.channel.enable is kord's.
func Set(key, value string) Opt { return func(c *cfg) { c.settings[key] = value } }

// Properties applies a Java client.properties file, the one a Java or
// Flink client of the same cluster uses, as consumer.Properties does: a
// property with no librdkafka equivalent makes New fail, naming it.
// Options after it override what it sets; Brokers overrides its
// bootstrap.servers.
func Properties(path string) Opt {
	return func(c *cfg) {
		if err := kafkaconf.LoadJavaInto(path, c.settings); err != nil {
			c.err = errors.Join(c.err, fmt.Errorf("%w: %w", ErrConfig, err))
		}
	}
}

// Logger sets where the client logs, librdkafka's log included. Default
// (and with nil): nothing is logged.
func Logger(l *slog.Logger) Opt {
	return func(c *cfg) {
		if l != nil {
			c.log = l
		}
	}
}

// RequestTimeout bounds each call: within it a call succeeds or fails
// with a classified error (see the package doc). Default 10 s
// (kafkaconf.DefaultTimeout, the same as the consumer's RequestTimeout
// and the producer's MetadataTimeout).
func RequestTimeout(d time.Duration) Opt { return func(c *cfg) { c.timeout = d } }

// Client is an admin client of one cluster. It is safe for concurrent
// use. New starts two goroutines (librdkafka's events and log); Close
// ends them.
type Client struct {
	p       *kafka.Producer // the handle: it alone gives librdkafka's events and log to Go
	a       *kafka.AdminClient
	conn    *kafkaconf.Conn
	log     *slog.Logger
	timeout time.Duration

	mu     sync.RWMutex // guards closed against calls in flight
	closed bool
	wg     sync.WaitGroup

	cm kafka.ConfigMap // the handle's configuration, for the group handle
	// The group handle (groupAdmin): a consumer with a group id, made at
	// the first group call, closed by Close.
	gmu     sync.Mutex
	gc      *kafka.Consumer
	ga      *kafka.AdminClient
	gstop   chan struct{}
	gpolled chan struct{}
}

// New creates a client. It opens no connection until the first call.
func New(opts ...Opt) (*Client, error) {
	c := cfg{settings: map[string]string{}, log: slog.New(slog.NewTextHandler(io.Discard, nil)), timeout: kafkaconf.DefaultTimeout}
	for _, o := range opts {
		o(&c)
	}
	if c.err != nil {
		return nil, c.err
	}
	if c.timeout <= 0 {
		return nil, fmt.Errorf("%w: RequestTimeout %v: want a positive duration", ErrConfig, c.timeout)
	}
	if err := kafkaconf.FoldAliases(c.settings); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if _, ok := c.settings["go.logs.channel.enable"]; ok {
		return nil, fmt.Errorf("%w: go.logs.channel.enable cannot be set: kord forwards librdkafka's log to log/slog; use admin.Logger", ErrConfig)
	}
	settings := map[string]string{"client.id": "kord-admin"}
	for k, v := range c.settings {
		settings[k] = v
	}
	if len(c.brokers) > 0 {
		settings["bootstrap.servers"] = strings.Join(c.brokers, ",")
	}
	if settings["bootstrap.servers"] == "" {
		return nil, fmt.Errorf("%w: no brokers (admin.Brokers or bootstrap.servers)", ErrConfig)
	}
	if err := kafkaconf.CheckBeyond(settings, c.checked); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	cm := kafka.ConfigMap{"go.logs.channel.enable": true, "go.delivery.reports": false}
	for k, v := range settings {
		cm[k] = v
	}
	// An admin client is a producer handle to librdkafka in any case
	// (kafka.NewAdminClient makes one); made as a Producer, its error
	// events and log lines reach Go, where the client reads them.
	p, err := kafka.NewProducer(&cm)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	kafkaconf.HandleOpened()
	a, err := kafka.NewAdminClientFromProducer(p)
	if err != nil {
		p.Close()
		kafkaconf.HandleClosed()
		return nil, fmt.Errorf("admin: %w", err)
	}
	cl := &Client{p: p, a: a, conn: kafkaconf.NewConn(settings), log: c.log, timeout: c.timeout, cm: cm}
	cl.wg.Add(2)
	go cl.events()
	go cl.logs()
	return cl, nil
}

// events takes in librdkafka's client-level errors until Close.
func (c *Client) events() {
	defer c.wg.Done()
	refused := false
	for ev := range c.p.Events() {
		e, ok := ev.(kafka.Error)
		if !ok {
			continue
		}
		if err := c.conn.Event(e); err != nil {
			if !refused {
				refused = true
				c.log.Error("kord admin: the cluster refused the client", "err", err)
			}
			continue
		}
		// A broker down or unreachable: librdkafka logs it itself
		// (its FAIL lines, suppressing repeats), while these events come
		// once per attempt. Kept for a timeout's explanation (Event).
		c.log.Debug("kord admin: client error", "err", e)
	}
}

// logs forwards librdkafka's log to the Conn (which explains failures
// from it) and to slog, until Close.
func (c *Client) logs() {
	defer c.wg.Done()
	for l := range c.p.Logs() {
		c.conn.Log(l.Tag, l.Message)
		c.log.Log(context.Background(), runlog.SyslogLevel(l.Level), "librdkafka: "+l.Message, "tag", l.Tag, "client", l.Name)
	}
}

// Close closes the client and waits for its goroutines. Calls after the
// first return nil.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.mu.Unlock()
	c.a.Close()
	c.p.Close()
	kafkaconf.HandleClosed()
	c.gmu.Lock()
	if c.gc != nil {
		close(c.gstop)
		<-c.gpolled // the poller no longer uses the handle
		c.ga.Close()
		if err := c.gc.Close(); err != nil {
			c.log.Debug("kord admin: closing the group handle", "err", err)
		}
		kafkaconf.HandleClosed()
	}
	c.gmu.Unlock()
	c.wg.Wait()
	return nil
}

// groupAdmin returns the admin client of the group handle: a consumer
// with a group id, that never joins its group. Group calls
// (ListConsumerGroupOffsets, AlterConsumerGroupOffsets) go through it,
// not through the producer handle: librdkafka handles NOT_COORDINATOR in
// an OffsetFetch response by calling into the handle's consumer group
// (rd_kafka_handle_OffsetFetch -> rd_kafka_cgrp_op), which a producer
// handle does not have: a NULL dereference in librdkafka's main thread.
// Test processes died of it (SIGSEGV, TestBrokerRestart's fresh broker;
// the core's backtrace: rd_kafka_cgrp_op <
// rd_kafka_handle_OffsetFetch < rd_kafka_ListConsumerGroupOffsetsResponse_parse
// < rd_kafka_admin_worker). consumer.Source's group calls, on its own
// consumer handle, never met it. Called with c.mu held (shared).
func (c *Client) groupAdmin() (*kafka.AdminClient, error) {
	c.gmu.Lock()
	defer c.gmu.Unlock()
	if c.ga != nil {
		return c.ga, nil
	}
	cm := kafka.ConfigMap{}
	for k, v := range c.cm {
		cm[k] = v
	}
	delete(cm, "go.delivery.reports")
	cm["group.id"] = "kord.admin"
	cm["enable.auto.commit"] = false
	gc, err := kafka.NewConsumer(&cm)
	if err != nil {
		return nil, fmt.Errorf("%w: group handle: %w", ErrConfig, err)
	}
	kafkaconf.HandleOpened()
	ga, err := kafka.NewAdminClientFromConsumer(gc)
	if err != nil {
		_ = gc.Close()
		kafkaconf.HandleClosed()
		return nil, fmt.Errorf("admin: group handle: %w", err)
	}
	c.gc, c.ga, c.gstop, c.gpolled = gc, ga, make(chan struct{}), make(chan struct{})
	c.wg.Add(1)
	go func() { // its log, until its Close
		defer c.wg.Done()
		for l := range gc.Logs() {
			c.conn.Log(l.Tag, l.Message)
			c.log.Log(context.Background(), runlog.SyslogLevel(l.Level), "librdkafka: "+l.Message, "tag", l.Tag, "client", l.Name)
		}
	}()
	go func() { // its client-level errors, until Close stops it
		defer close(c.gpolled)
		for {
			select {
			case <-c.gstop:
				return
			default:
			}
			if e, ok := gc.Poll(100).(kafka.Error); ok {
				if err := c.conn.Event(e); err != nil {
					c.log.Error("kord admin: the cluster refused the client", "err", err)
				}
			}
		}
	}()
	return ga, nil
}

// do makes one call through kafkaconf's Conn.Do: bounded by the request
// timeout and ctx, sliced, cancelled at a refusal, classified. Errors
// name what.
//
// The slices bound the wait only (ctx), never librdkafka's own request
// timeout (SetAdminRequestTimeout), which stays at its default
// (socket.timeout.ms), as consumer.Source's admin calls had it: a request
// that times out inside librdkafka while its response is on the way takes
// a path with a known reference-count bug (librdkafka issue 4605, met from
// confluent-kafka-go's ListConsumerGroupOffsets).
func (c *Client) do(ctx context.Context, what string, call func(ctx context.Context, slice time.Duration) error) error {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed {
		return ErrClosed
	}
	if err := c.conn.Do(ctx, c.timeout, nil, call); err != nil {
		return fmt.Errorf("admin: %s: %w", what, err)
	}
	return nil
}

// Partitions returns the partition ids of topic, ascending, and fails
// with ErrUnknownTopic when it does not exist.
func (c *Client) Partitions(ctx context.Context, topic string) ([]int32, error) {
	return c.partitions(ctx, topic, false)
}

// partitions is Partitions; created: the topic was just created, and
// metadata that does not list it yet (a broker's metadata cache lags the
// controller) is waited for.
func (c *Client) partitions(ctx context.Context, topic string, created bool) ([]int32, error) {
	var ids []int32
	err := c.do(ctx, fmt.Sprintf("metadata of topic %q", topic), func(_ context.Context, slice time.Duration) error {
		md, err := c.a.GetMetadata(&topic, false, max(int(slice.Milliseconds()), 1))
		if err != nil {
			return err
		}
		t, ok := md.Topics[topic]
		if !ok || t.Error.Code() == kafka.ErrUnknownTopicOrPart || t.Error.Code() == kafka.ErrUnknownTopic || len(t.Partitions) == 0 {
			if created {
				return kafka.NewError(kafka.ErrLeaderNotAvailable, "the topic is not in the broker's metadata yet", false)
			}
			ids = nil
			return nil
		}
		if t.Error.Code() != kafka.ErrNoError {
			return t.Error
		}
		ids = ids[:0]
		for _, p := range t.Partitions {
			if p.Leader < 0 || p.Error.Code() == kafka.ErrLeaderNotAvailable {
				return kafka.NewError(kafka.ErrLeaderNotAvailable, fmt.Sprintf("partition %d has no leader yet", p.ID), false)
			}
			ids = append(ids, p.ID)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if ids == nil {
		return nil, fmt.Errorf("admin: %w %q", ErrUnknownTopic, topic)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids, nil
}

// Topics returns the names of the cluster's topics, sorted (Kafka's
// Metadata; kafka-topics --list), internal ones included.
func (c *Client) Topics(ctx context.Context) ([]string, error) {
	var names []string
	err := c.do(ctx, "metadata of every topic", func(_ context.Context, slice time.Duration) error {
		md, err := c.a.GetMetadata(nil, true, max(int(slice.Milliseconds()), 1))
		if err != nil {
			return err
		}
		names = names[:0]
		for name := range md.Topics {
			names = append(names, name)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	return names, nil
}

// CreateTopic creates topic with partitions partitions, the broker's
// default replication factor (Kafka's CreateTopics; kafka-topics
// --create) and configs as its topic-level settings. It returns once every
// partition has a leader. A topic that exists already is not an error:
// created is then false, and the caller checks its partitions
// (Partitions).
func (c *Client) CreateTopic(ctx context.Context, topic string, partitions int32, configs map[string]string) (created bool, err error) {
	what := fmt.Sprintf("create topic %q with %d partitions", topic, partitions)
	// -1: the broker's default.replication.factor (KIP-464). A retry
	// after a create that did succeed finds the topic there.
	err = c.do(ctx, what, func(ctx context.Context, slice time.Duration) error {
		res, err := c.a.CreateTopics(ctx, []kafka.TopicSpecification{{Topic: topic, NumPartitions: int(partitions), ReplicationFactor: -1, Config: configs}})
		if err != nil {
			return err
		}
		for _, r := range res {
			switch r.Error.Code() {
			case kafka.ErrNoError:
				created = true
			case kafka.ErrTopicAlreadyExists:
			default:
				return r.Error
			}
		}
		return nil
	})
	if err != nil {
		return false, err
	}
	// The partitions' leaders: a producer or consumer made right after
	// would otherwise meet LEADER_NOT_AVAILABLE.
	if _, err := c.partitions(ctx, topic, true); err != nil {
		return created, err
	}
	return created, nil
}

// DeleteTopics deletes topics (Kafka's DeleteTopics). A topic that does
// not exist fails the call with ErrUnknownTopic, after the others are
// deleted.
func (c *Client) DeleteTopics(ctx context.Context, topics ...string) error {
	var missing []string
	err := c.do(ctx, fmt.Sprintf("delete topics %q", topics), func(ctx context.Context, slice time.Duration) error {
		missing = missing[:0]
		res, err := c.a.DeleteTopics(ctx, topics)
		if err != nil {
			return err
		}
		for _, r := range res {
			switch r.Error.Code() {
			case kafka.ErrNoError:
			case kafka.ErrUnknownTopicOrPart, kafka.ErrUnknownTopic:
				missing = append(missing, r.Topic)
			default:
				return fmt.Errorf("topic %q: %w", r.Topic, r.Error)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	if len(missing) > 0 {
		return fmt.Errorf("admin: delete topics: %w %q", ErrUnknownTopic, missing)
	}
	return nil
}

// DeleteGroup deletes a consumer group and its committed offsets (Kafka's
// DeleteGroups; kafka-consumer-groups --delete). The group must have no
// active members. A group that does not exist fails with
// ErrUnknownGroup.
func (c *Client) DeleteGroup(ctx context.Context, group string) error {
	return c.do(ctx, fmt.Sprintf("delete group %q", group), func(ctx context.Context, slice time.Duration) error {
		res, err := c.a.DeleteConsumerGroups(ctx, []string{group})
		if err != nil {
			return err
		}
		for _, r := range res.ConsumerGroupResults {
			if r.Error.Code() != kafka.ErrNoError {
				return r.Error
			}
		}
		return nil
	})
}

// Offsets are a partition's log start offset, its end (the high
// watermark: the offset the next record will get) and its last stable
// offset (the end a read_committed reader sees: below End while a
// transaction is open in the partition).
type Offsets struct {
	Partition          int32
	Start, End, Stable int64
}

// ListOffsets returns the start, end and last stable offset of every
// partition of topic, in ascending partition order (Kafka's ListOffsets:
// earliest and latest read_uncommitted, latest read_committed). A topic
// that does not exist fails with ErrUnknownTopic.
func (c *Client) ListOffsets(ctx context.Context, topic string) ([]Offsets, error) {
	ids, err := c.Partitions(ctx, topic)
	if err != nil {
		return nil, err
	}
	out := make([]Offsets, len(ids))
	for i, id := range ids {
		out[i].Partition = id
	}
	for round := range 3 {
		spec, level := kafka.EarliestOffsetSpec, kafka.IsolationLevelReadUncommitted
		switch round {
		case 1:
			spec = kafka.LatestOffsetSpec
		case 2:
			spec, level = kafka.LatestOffsetSpec, kafka.IsolationLevelReadCommitted
		}
		req := make(map[kafka.TopicPartition]kafka.OffsetSpec, len(ids))
		for _, id := range ids {
			req[kafka.TopicPartition{Topic: &topic, Partition: id}] = spec
		}
		err := c.do(ctx, fmt.Sprintf("offsets of topic %q", topic), func(ctx context.Context, slice time.Duration) error {
			res, err := c.a.ListOffsets(ctx, req, kafka.SetAdminIsolationLevel(level))
			if err != nil {
				return err
			}
			for i, id := range ids {
				info, ok := res.ResultInfos[kafka.TopicPartition{Topic: &topic, Partition: id}]
				if !ok {
					for k, v := range res.ResultInfos {
						if k.Topic != nil && *k.Topic == topic && k.Partition == id {
							info, ok = v, true
						}
					}
				}
				if !ok {
					return fmt.Errorf("partition %d: no answer", id)
				}
				if info.Error.Code() != kafka.ErrNoError {
					return fmt.Errorf("partition %d: %w", id, info.Error)
				}
				*[]*int64{&out[i].Start, &out[i].End, &out[i].Stable}[round] = int64(info.Offset)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Latest returns the end of each of tps: its high watermark, or with
// readCommitted its last stable offset, the end a read_committed reader
// sees (Kafka's ListOffsets, latest). One request, on the client's own
// connections: a consumer's fetch, which long-polls on its own, does not
// hold it up.
func (c *Client) Latest(ctx context.Context, tps []TopicPartition, readCommitted bool) (map[TopicPartition]int64, error) {
	req := make(map[kafka.TopicPartition]kafka.OffsetSpec, len(tps))
	for _, tp := range tps {
		topic := tp.Topic
		req[kafka.TopicPartition{Topic: &topic, Partition: tp.Partition}] = kafka.LatestOffsetSpec
	}
	level := kafka.IsolationLevelReadUncommitted
	if readCommitted {
		level = kafka.IsolationLevelReadCommitted
	}
	out := make(map[TopicPartition]int64, len(tps))
	err := c.do(ctx, fmt.Sprintf("latest offsets of %d partitions", len(tps)), func(ctx context.Context, slice time.Duration) error {
		res, err := c.a.ListOffsets(ctx, req, kafka.SetAdminIsolationLevel(level))
		if err != nil {
			return err
		}
		for k, info := range res.ResultInfos {
			if k.Topic == nil {
				continue
			}
			tp := TopicPartition{*k.Topic, k.Partition}
			if info.Error.Code() != kafka.ErrNoError {
				return fmt.Errorf("%s[%d]: %w", tp.Topic, tp.Partition, info.Error)
			}
			out[tp] = int64(info.Offset)
		}
		for _, tp := range tps {
			if _, ok := out[tp]; !ok {
				return fmt.Errorf("%s[%d]: no answer", tp.Topic, tp.Partition)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// DeleteRecords deletes every record of each partition below its offset
// (Kafka's DeleteRecords; kafka-delete-records): the partition's log start
// offset moves up to it. An offset past a partition's high watermark fails
// (OFFSET_OUT_OF_RANGE), naming the partition.
func (c *Client) DeleteRecords(ctx context.Context, below []Committed) error {
	if len(below) == 0 {
		return nil
	}
	req := make([]kafka.TopicPartition, len(below))
	for i, b := range below {
		topic := b.Topic
		req[i] = kafka.TopicPartition{Topic: &topic, Partition: b.Partition, Offset: kafka.Offset(b.Offset)}
	}
	return c.do(ctx, "delete records", func(ctx context.Context, slice time.Duration) error {
		res, err := c.a.DeleteRecords(ctx, req)
		if err != nil {
			return err
		}
		var errs []error
		for _, r := range res.DeleteRecordsResults {
			if r.TopicPartition.Error != nil {
				errs = append(errs, fmt.Errorf("%s[%d] below %d: %w", *r.TopicPartition.Topic, r.TopicPartition.Partition, int64(r.TopicPartition.Offset), r.TopicPartition.Error))
			}
		}
		return errors.Join(errs...)
	})
}
