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
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kordproject/kord/internal/kafkaconf"
)

// Group protocols a Member can join with (Kafka's group.protocol).
const (
	// ProtocolClassic is the classic group protocol with the
	// cooperative-sticky assignor (KIP-429): a rebalance revokes only the
	// partitions that move.
	ProtocolClassic = "classic"
	// ProtocolConsumer is KIP-848's consumer group protocol (Kafka 4.x):
	// the broker computes the assignment and rebalances are incremental.
	ProtocolConsumer = "consumer"
)

// ErrInstanceFenced is a static member's fatal error when the group has
// given its InstanceID to a newer member (Kafka's FENCED_INSTANCE_ID): its
// session expired and it came back too late, or another running process
// uses the same id. The Member is out of the group for good; a new one
// joined with the same id takes the id back.
var ErrInstanceFenced = errors.New("consumer: static member fenced: its group.instance.id was taken by a newer member")

// Hooks tell a Member's owner which partitions it owns. Both run on the
// Member's goroutine, one at a time, in the order Kafka's rebalances
// happen.
type Hooks struct {
	// Assigned receives partitions newly assigned to this member (only
	// the new ones: assignment is incremental).
	Assigned func(ctx context.Context, ps []TopicPartition)
	// Revoked receives partitions taken from this member. Kafka moves
	// them to another member only after Revoked returns, so the owner
	// commits or aborts their work in flight first; it must return within
	// max.poll.interval.ms (the rebalance timeout), or Kafka removes the
	// member. lost is true when they were taken without a rebalance this
	// member took part in (its session expired, or it was fenced):
	// another member may own them already, and nothing of theirs may be
	// committed.
	Revoked func(ctx context.Context, ps []TopicPartition, lost bool)
	// Failed receives the error that put the member out of the group for
	// good (Err), once. What it owned is lost: another member may own it
	// already, and nothing of it may be committed. A Member cannot rejoin;
	// its owner closes it and joins anew (ErrInstanceFenced), or stops.
	Failed func(err error)
}

// Member is one process's membership of a consumer group: Kafka assigns
// it partitions of the subscribed topics and moves them when members come,
// go or die, with no coordinator of kord's (Kafka Streams' shape). A
// Member reads no records: it holds its partitions paused and tells its
// owner through Hooks which ones it has; the owner reads them with its own
// Sources from the offsets it committed, and commits them in its
// transactions with the Member's group metadata (KIP-447:
// producer.Producer.SendOffsetsToTransactionFor), so a member of an older
// generation is fenced. Make one with Join; Close ends it.
type Member struct {
	group   string
	session string // session.timeout.ms, for errors
	c       *kafka.Consumer
	log     *slog.Logger
	conn    *kafkaconf.Conn
	hooks   Hooks
	ctx     context.Context // the hooks' context, cancelled by Close
	stop    context.CancelFunc

	mu       sync.Mutex
	assigned map[TopicPartition]bool
	err      error // a fatal client error: the member is out of the group
	fatal    bool  // err is librdkafka's fatal error: the client cannot be closed (Close)

	runDone  chan struct{}  // closed when run returns
	logStop  chan struct{}  // closed by Close when it abandons a fatally failed client
	wg       sync.WaitGroup // the log goroutine, ended by the consumer's Close
	closeMu  sync.Mutex
	closed   bool
	closeErr error
}

// memberForced are settings a Member owns.
var memberForced = map[string]string{
	"enable.auto.commit":              "a Member commits nothing; its owner commits in transactions",
	"enable.auto.offset.store":        "a Member commits nothing; its owner commits in transactions",
	"group.id":                        "use consumer.Group",
	"group.instance.id":               "use consumer.InstanceID",
	"group.protocol":                  "use consumer.Protocol",
	"partition.assignment.strategy":   "a Member uses cooperative-sticky (classic protocol) so that a rebalance revokes only what moves",
	"go.logs.channel.enable":          "kord forwards librdkafka's log to log/slog; use consumer.Logger",
	"go.application.rebalance.enable": "a Member handles rebalances itself and calls Hooks",
}

// InstanceID makes the member static (KIP-345, group.instance.id): a
// member that restarts with the same id within the session timeout gets its
// partitions back without a rebalance. Use a stable id per process (a pod
// name, a StatefulSet ordinal).
func InstanceID(id string) Opt { return func(c *cfg) { c.instance = id } }

// Protocol chooses the group protocol: ProtocolClassic (the default) or
// ProtocolConsumer (KIP-848). bench/rebalance measures both on this
// project's broker; bench/RESULTS.md has the figures behind the default.
func Protocol(p string) Opt { return func(c *cfg) { c.protocol = p } }

// Join subscribes a new member of the group set by Group (required) to
// topics. It returns at once; Kafka's assignments reach hooks.Assigned.
func Join(ctx context.Context, topics []string, hooks Hooks, opts ...Opt) (*Member, error) {
	c := cfg{settings: map[string]string{}, log: slog.New(slog.NewTextHandler(io.Discard, nil)), timeout: 10 * time.Second}
	for _, o := range opts {
		o(&c)
	}
	if c.err != nil {
		return nil, c.err
	}
	if c.group == "" {
		return nil, fmt.Errorf("%w: a Member needs its group (consumer.Group)", ErrConfig)
	}
	if len(topics) == 0 {
		return nil, fmt.Errorf("%w: member of group %q: no topics to subscribe to", ErrConfig, c.group)
	}
	if err := kafkaconf.FoldAliases(c.settings); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	for k := range c.settings {
		if why, ok := memberForced[k]; ok {
			return nil, fmt.Errorf("%w: member of group %q: %s cannot be set: %s", ErrConfig, c.group, k, why)
		}
	}
	cm := kafka.ConfigMap{"client.id": "kord", "allow.auto.create.topics": "false"}
	switch c.protocol {
	case "", ProtocolClassic:
		cm["group.protocol"] = ProtocolClassic
		cm["partition.assignment.strategy"] = "cooperative-sticky"
		// A member notices a rebalance at its next heartbeat: 500 ms
		// instead of librdkafka's 3 s cut partition handover from 3-6 s
		// to 1-1.5 s on this project's broker (bench/RESULTS.md,
		// bench/rebalance).
		cm["heartbeat.interval.ms"] = "500"
	case ProtocolConsumer:
		cm["group.protocol"] = ProtocolConsumer
	default:
		return nil, fmt.Errorf("%w: member of group %q: group protocol %q: want %q or %q", ErrConfig, c.group, c.protocol, ProtocolClassic, ProtocolConsumer)
	}
	for k, v := range c.settings {
		cm[k] = v
	}
	if len(c.brokers) > 0 {
		cm["bootstrap.servers"] = strings.Join(c.brokers, ",")
	}
	if v, _ := cm["bootstrap.servers"].(string); v == "" {
		return nil, fmt.Errorf("%w: member of group %q: no brokers (consumer.Brokers or bootstrap.servers)", ErrConfig, c.group)
	}
	cm["group.id"] = c.group
	if c.instance != "" {
		cm["group.instance.id"] = c.instance
	}
	cm["enable.auto.commit"] = false
	cm["enable.auto.offset.store"] = false
	cm["go.logs.channel.enable"] = true
	settings := map[string]string{}
	for k, v := range cm {
		settings[k] = fmt.Sprint(v)
	}
	if err := kafkaconf.CheckBeyond(settings, c.checked); err != nil {
		return nil, fmt.Errorf("%w: member of group %q: %w", ErrConfig, c.group, err)
	}
	kc, err := kafka.NewConsumer(&cm)
	if err != nil {
		return nil, fmt.Errorf("%w: member of group %q: %w", ErrConfig, c.group, err)
	}
	kafkaconf.HandleOpened()
	hctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	session := settings["session.timeout.ms"]
	if session == "" {
		session = "45000" // librdkafka's default
	}
	m := &Member{group: c.group, session: session, c: kc, log: c.log, conn: kafkaconf.NewConn(settings), hooks: hooks, ctx: hctx, stop: stop,
		assigned: map[TopicPartition]bool{}, runDone: make(chan struct{}), logStop: make(chan struct{})}
	m.wg.Add(1)
	go m.logs()
	if err := kc.SubscribeTopics(topics, m.rebalance); err != nil {
		stop()
		close(m.runDone)
		kc.Close()
		kafkaconf.HandleClosed()
		m.wg.Wait()
		return nil, fmt.Errorf("consumer: member of group %q: subscribe to %v: %w", c.group, topics, err)
	}
	go m.run()
	return m, nil
}

// Group returns the member's group id.
func (m *Member) Group() string { return m.group }

// Assigned returns the partitions assigned to this member now, sorted.
func (m *Member) Assigned() []TopicPartition {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]TopicPartition, 0, len(m.assigned))
	for tp := range m.assigned {
		out = append(out, tp)
	}
	sortTPs(out)
	return out
}

// Err returns the error that put the member out of the group for good (a
// fatal client error, such as being fenced by another member with the same
// InstanceID, or ErrAuth), or nil.
func (m *Member) Err() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.err
}

// KafkaGroupMetadata returns the member's group metadata now (group,
// generation, member id, instance id), which a transactional offset commit
// carries so that the broker fences a member of an older generation
// (KIP-447). producer.Producer.SendOffsetsToTransactionFor takes it from
// here.
func (m *Member) KafkaGroupMetadata() (*kafka.ConsumerGroupMetadata, error) {
	gm, err := m.c.GetConsumerGroupMetadata()
	if err != nil {
		return nil, fmt.Errorf("consumer: member of group %q: group metadata: %w", m.group, err)
	}
	return gm, nil
}

// run polls the consumer, which calls rebalance on this goroutine, and
// takes in client errors: a fatal one ends the membership (Err).
func (m *Member) run() {
	defer close(m.runDone)
	for m.ctx.Err() == nil {
		switch ev := m.c.Poll(100).(type) {
		case *kafka.Message:
			// Fetched between an assignment and its pause: dropped; the
			// owner reads the partition itself.
		case kafka.Error:
			m.clientError(ev)
		}
	}
}

// rebalance is the consumer's rebalance callback (it runs inside Poll):
// an assignment is taken (IncrementalAssign, then Pause: a member reads
// nothing) and told to Assigned; a revocation is told to Revoked, and
// released (IncrementalUnassign) only when Revoked returns. While the
// member closes, revocations are released without the hook.
func (m *Member) rebalance(_ *kafka.Consumer, ev kafka.Event) error {
	switch ev := ev.(type) {
	case kafka.AssignedPartitions:
		m.assign(ev.Partitions)
	case kafka.RevokedPartitions:
		m.revoke(ev.Partitions)
	}
	return nil
}

func (m *Member) assign(ps []kafka.TopicPartition) {
	if err := m.c.IncrementalAssign(ps); err != nil {
		m.fail(fmt.Errorf("consumer: member of group %q: assign %s: %w", m.group, tpList(ps), err))
		return
	}
	if len(ps) == 0 {
		return
	}
	if err := m.c.Pause(ps); err != nil {
		m.log.Warn("kord member: pause", "group", m.group, "partitions", tpList(ps), "err", err)
	}
	tps := toTPs(ps)
	m.mu.Lock()
	for _, tp := range tps {
		m.assigned[tp] = true
	}
	m.mu.Unlock()
	m.log.Info("kord member: assigned", "group", m.group, "partitions", tpList(ps))
	if m.hooks.Assigned != nil && m.ctx.Err() == nil {
		m.hooks.Assigned(m.ctx, tps)
	}
}

func (m *Member) revoke(ps []kafka.TopicPartition) {
	tps := toTPs(ps)
	if len(tps) > 0 {
		lost := m.c.AssignmentLost()
		m.log.Info("kord member: revoked", "group", m.group, "partitions", tpList(ps), "lost", lost)
		if m.hooks.Revoked != nil && m.ctx.Err() == nil {
			m.hooks.Revoked(m.ctx, tps, lost)
		}
		m.mu.Lock()
		for _, tp := range tps {
			delete(m.assigned, tp)
		}
		m.mu.Unlock()
	}
	if err := m.c.IncrementalUnassign(ps); err != nil {
		m.fail(fmt.Errorf("consumer: member of group %q: unassign %s: %w", m.group, tpList(ps), err))
	}
}

func (m *Member) clientError(e kafka.Error) {
	if err := m.conn.Event(e); err != nil {
		m.fail(fmt.Errorf("consumer: member of group %q: %w", m.group, err))
		return
	}
	if e.IsFatal() {
		m.fail(fmt.Errorf("consumer: member of group %q: fatal: %w", m.group, e))
		return
	}
	if e.Code() == kafka.ErrInvalidSessionTimeout {
		// librdkafka retries the JoinGroup for ever; the setting can never
		// be taken (Kafka's GroupCoordinator refuses a session timeout
		// outside group.min.session.timeout.ms..group.max.session.timeout.ms).
		m.fail(fmt.Errorf("consumer: member of group %q: session.timeout.ms=%s is outside the brokers' bounds (group.min.session.timeout.ms and group.max.session.timeout.ms, 6 s and 30 min by default): %w", m.group, m.session, e))
		return
	}
	m.log.Warn("kord member: client error", "group", m.group, "err", e)
}

func (m *Member) fail(err error) {
	var ke kafka.Error
	fatal := errors.As(err, &ke) && ke.IsFatal()
	if fatal && ke.Code() == kafka.ErrFencedInstanceID {
		err = fmt.Errorf("%w: %w", ErrInstanceFenced, err)
	}
	m.mu.Lock()
	first := m.err == nil
	if first {
		m.err, m.fatal = err, fatal
	}
	m.mu.Unlock()
	if first {
		m.log.Error("kord member: out of the group", "err", err)
		if m.hooks.Failed != nil {
			m.hooks.Failed(err)
		}
	}
}

func (m *Member) logs() {
	defer m.wg.Done()
	forwardLogs(m.c.Logs(), m.logStop, m.conn, m.log)
}

// Close ends the membership: the polling goroutine stops (a hook running
// gets its context cancelled), and the consumer closes; partitions it
// still holds are released without calling Revoked. A dynamic member
// leaves the group, so its partitions move at once; a static member
// (InstanceID) does not: Kafka keeps its partitions for the session
// timeout, for it to come back. The owner commits what it owns before
// Close (a planned stop). Calls after the first return the first's error.
//
// A member that librdkafka failed fatally (Err: fenced, say) is
// abandoned, not closed: confluent-kafka-go v2.11.1's Close waits forever
// for a consumer close that librdkafka refuses to start after a fatal error
// (rd_kafka_consumer_close_queue returns the fatal error, and its Close
// drops it; fixed by confluent-kafka-go pull request 1588, in no release
// this project can use yet). kord's goroutines of the member end; the
// librdkafka client stays, idle, until the process exits.
func (m *Member) Close() error {
	m.closeMu.Lock()
	defer m.closeMu.Unlock()
	if m.closed {
		return m.closeErr
	}
	m.closed = true
	m.stop()
	<-m.runDone
	m.mu.Lock()
	fatal := m.fatal
	m.mu.Unlock()
	if fatal {
		m.log.Warn("kord member: the fatally failed client is abandoned, not closed (confluent-kafka-go v2.11.1 cannot close it); it stays idle until the process exits", "group", m.group)
		close(m.logStop)
		m.wg.Wait()
		return nil
	}
	if err := m.c.Close(); err != nil {
		m.closeErr = fmt.Errorf("consumer: member of group %q: close: %w", m.group, err)
	}
	kafkaconf.HandleClosed()
	m.wg.Wait()
	return m.closeErr
}

func toTPs(ps []kafka.TopicPartition) []TopicPartition {
	out := make([]TopicPartition, 0, len(ps))
	for _, p := range ps {
		if p.Topic != nil {
			out = append(out, TopicPartition{Topic: *p.Topic, Partition: p.Partition})
		}
	}
	sortTPs(out)
	return out
}

func sortTPs(tps []TopicPartition) {
	sort.Slice(tps, func(i, j int) bool {
		if tps[i].Topic != tps[j].Topic {
			return tps[i].Topic < tps[j].Topic
		}
		return tps[i].Partition < tps[j].Partition
	})
}

func tpList(ps []kafka.TopicPartition) string {
	var b strings.Builder
	for i, tp := range toTPs(ps) {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(tp.String())
	}
	return b.String()
}
