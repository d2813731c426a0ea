package consumer_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/stretchr/testify/require"

	"github.com/kordproject/kord/admin"
	"github.com/kordproject/kord/consumer"
	"github.com/kordproject/kord/internal/rig/kafkatest"
	"github.com/kordproject/kord/internal/rig/syncbuf"
	"github.com/kordproject/kord/producer"
	"github.com/kordproject/kord/serde"
)

// watcher records a member's hook calls.
type watcher struct {
	mu       sync.Mutex
	owned    map[consumer.TopicPartition]bool
	events   []string
	revokeAt map[consumer.TopicPartition]time.Time // when Revoked returned
	assignAt map[consumer.TopicPartition]time.Time // when Assigned was called
	hold     time.Duration                         // Revoked holds the partitions this long
}

func newWatcher(hold time.Duration) *watcher {
	return &watcher{owned: map[consumer.TopicPartition]bool{}, revokeAt: map[consumer.TopicPartition]time.Time{},
		assignAt: map[consumer.TopicPartition]time.Time{}, hold: hold}
}

func (w *watcher) hooks() consumer.Hooks {
	return consumer.Hooks{
		Assigned: func(_ context.Context, ps []consumer.TopicPartition) {
			w.mu.Lock()
			defer w.mu.Unlock()
			for _, p := range ps {
				w.owned[p] = true
				w.assignAt[p] = time.Now()
			}
			w.events = append(w.events, fmt.Sprint("assigned ", ps))
		},
		Revoked: func(ctx context.Context, ps []consumer.TopicPartition, lost bool) {
			select { // the owner's commit of what it holds
			case <-time.After(w.hold):
			case <-ctx.Done():
			}
			w.mu.Lock()
			defer w.mu.Unlock()
			for _, p := range ps {
				delete(w.owned, p)
				w.revokeAt[p] = time.Now()
			}
			w.events = append(w.events, fmt.Sprint("revoked ", ps, " lost=", lost))
		},
	}
}

func (w *watcher) snapshot() (owned map[consumer.TopicPartition]bool, events []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	owned = map[consumer.TopicPartition]bool{}
	for p := range w.owned {
		owned[p] = true
	}
	return owned, append([]string(nil), w.events...)
}

func (w *watcher) count() int {
	o, _ := w.snapshot()
	return len(o)
}

func join(t *testing.T, c *kafkatest.Cluster, group, topic string, w *watcher, log *syncbuf.Buffer, opts ...consumer.Opt) *consumer.Member {
	t.Helper()
	opts = append([]consumer.Opt{consumer.Brokers(c.Brokers), consumer.Group(group),
		consumer.Logger(slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelInfo})))}, opts...)
	m, err := consumer.Join(context.Background(), []string{topic}, w.hooks(), opts...)
	require.NoError(t, err)
	t.Cleanup(func() { m.Close() })
	return m
}

// TestMemberHandsOver: two members of one group share a topic's
// partitions without overlap; when the second joins, Kafka moves
// partitions to it only after the first's Revoked hook returned (the
// owner's commit comes first); when it leaves, the first gets them back.
func TestMemberHandsOver(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		topic := c.CreateTopic(t, 6, nil)
		group := "kord.test." + kafkatest.TopicName(t)
		var log syncbuf.Buffer
		wa, wb := newWatcher(2*time.Second), newWatcher(0)
		a := join(t, c, group, topic, wa, &log)
		require.Eventually(t, func() bool { return wa.count() == 6 }, time.Minute, 20*time.Millisecond, "%s", &log)
		require.Len(t, a.Assigned(), 6)

		b := join(t, c, group, topic, wb, &log)
		require.Eventually(t, func() bool { return wa.count() > 0 && wb.count() > 0 && wa.count()+wb.count() == 6 }, time.Minute, 20*time.Millisecond, "%s", &log)
		oa, ob := requireMovedAfterRevoked(t, wa, wb)
		require.ElementsMatch(t, a.Assigned(), keys(oa))
		require.ElementsMatch(t, b.Assigned(), keys(ob))

		require.NoError(t, b.Close())
		require.Eventually(t, func() bool { return wa.count() == 6 }, time.Minute, 20*time.Millisecond, "%s", &log)
		require.NoError(t, a.Err())
	})
}

// TestMemberHandsOverKIP848: the same handover with KIP-848's consumer
// group protocol (Kafka 4.x): the broker computes the assignment, and the
// first member's Revoked hook still returns before the second gets the
// partitions.
func TestMemberHandsOverKIP848(t *testing.T) {
	c := kafkatest.Broker(t)
	topic := c.CreateTopic(t, 4, nil)
	group := "kord.test." + kafkatest.TopicName(t)
	var log syncbuf.Buffer
	proto := consumer.Protocol(consumer.ProtocolConsumer)
	wa, wb := newWatcher(2*time.Second), newWatcher(0)
	join(t, c, group, topic, wa, &log, proto)
	require.Eventually(t, func() bool { return wa.count() == 4 }, time.Minute, 20*time.Millisecond, "%s", &log)
	join(t, c, group, topic, wb, &log, proto)
	require.Eventually(t, func() bool { return wb.count() > 0 && wa.count()+wb.count() == 4 }, time.Minute, 20*time.Millisecond, "%s", &log)
	requireMovedAfterRevoked(t, wa, wb)
}

// requireMovedAfterRevoked checks that every partition the second member
// owns is not the first's, and was assigned to it only after the first's
// Revoked hook returned for it. It returns both members' partitions.
func requireMovedAfterRevoked(t *testing.T, wa, wb *watcher) (oa, ob map[consumer.TopicPartition]bool) {
	t.Helper()
	oa, ea := wa.snapshot()
	ob, _ = wb.snapshot()
	for p := range ob {
		require.False(t, oa[p], "%s owned by both members", p)
		wa.mu.Lock()
		revoked, ok := wa.revokeAt[p]
		wa.mu.Unlock()
		require.True(t, ok, "%s moved to the second member without a revocation on the first: %v", p, ea)
		wb.mu.Lock()
		assigned := wb.assignAt[p]
		wb.mu.Unlock()
		require.False(t, assigned.Before(revoked), "%s assigned to the second member at %s, before the first's Revoked returned at %s",
			p, assigned.Format(time.StampMilli), revoked.Format(time.StampMilli))
	}
	return oa, ob
}

// TestMemberStatic: a static member (InstanceID) that restarts within the
// session timeout gets its partitions back, and the other member is not
// disturbed, neither while it is away nor when it is back: no revocation,
// no assignment.
func TestMemberStatic(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		topic := c.CreateTopic(t, 4, nil)
		group := "kord.test." + kafkatest.TopicName(t)
		var log syncbuf.Buffer
		session := consumer.Set("session.timeout.ms", "20000")
		wa, wb := newWatcher(0), newWatcher(0)
		join(t, c, group, topic, wa, &log, consumer.InstanceID("a"), session)
		require.Eventually(t, func() bool { return wa.count() == 4 }, time.Minute, 20*time.Millisecond, "%s", &log)
		b := join(t, c, group, topic, wb, &log, consumer.InstanceID("b"), session)
		require.Eventually(t, func() bool { return wa.count() == 2 && wb.count() == 2 }, time.Minute, 20*time.Millisecond, "%s", &log)
		before, _ := wb.snapshot()
		_, eventsA := wa.snapshot()

		require.NoError(t, b.Close())
		// A dynamic member leaves on Close, and the other takes its
		// partitions within a few heartbeats; a static one keeps them
		// for the session timeout.
		time.Sleep(3 * time.Second)
		_, eventsA1 := wa.snapshot()
		require.Equal(t, eventsA, eventsA1, "a static member's close moved its partitions")
		wb2 := newWatcher(0)
		join(t, c, group, topic, wb2, &log, consumer.InstanceID("b"), session)
		require.Eventually(t, func() bool { return wb2.count() == 2 }, time.Minute, 20*time.Millisecond, "%s", &log)
		after, _ := wb2.snapshot()
		require.Equal(t, before, after, "the restarted static member got other partitions")
		time.Sleep(2 * time.Second) // a rebalance would reach the first member's hooks by now
		_, eventsA2 := wa.snapshot()
		require.Equal(t, eventsA, eventsA2, "the other member was disturbed by a static member's restart")
	})
}

// staleMember hands out group metadata captured earlier: a zombie that
// missed a rebalance.
type staleMember struct {
	group string
	gm    *kafka.ConsumerGroupMetadata
}

func (s staleMember) Group() string { return s.group }
func (s staleMember) KafkaGroupMetadata() (*kafka.ConsumerGroupMetadata, error) {
	return s.gm, nil
}

// TestMemberFencesOldGeneration (KIP-447): offsets sent in a transaction
// with a member's group metadata commit; the same member's metadata from
// before a rebalance (a zombie's) is refused by the group coordinator, the
// transaction must be aborted, and the group's offset stays where the live
// member committed it. Real broker only: kfake does not check generations
// of transactional offset commits.
func TestMemberFencesOldGeneration(t *testing.T) {
	c := kafkatest.Broker(t)
	topic := c.CreateTopic(t, 2, nil)
	group := "kord.test." + kafkatest.TopicName(t)
	var log syncbuf.Buffer
	wa := newWatcher(0)
	a := join(t, c, group, topic, wa, &log)
	require.Eventually(t, func() bool { return wa.count() == 2 }, time.Minute, 20*time.Millisecond, "%s", &log)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p, err := producer.New(serde.String(), serde.String(), producer.Brokers(c.Brokers), producer.TransactionalID("kord.test."+kafkatest.TopicName(t)))
	require.NoError(t, err)
	defer p.Close()
	require.NoError(t, p.InitTransactions(ctx))

	commit := func(m producer.GroupMember, off int64) error {
		require.NoError(t, p.BeginTransaction())
		err := p.SendOffsetsToTransactionFor(ctx, m, []producer.Offset{{Topic: topic, Partition: 0, Offset: off, Metadata: fmt.Sprint("at ", off)}})
		if err == nil {
			return p.CommitTransaction(ctx)
		}
		require.True(t, producer.RequiresAbort(err), "not abortable: %v", err)
		require.NoError(t, p.AbortTransaction(ctx))
		return err
	}
	require.NoError(t, commit(a, 5))
	gm, err := a.KafkaGroupMetadata()
	require.NoError(t, err)
	zombie := staleMember{group: group, gm: gm}

	// A second member joins: a rebalance, a new generation.
	wb := newWatcher(0)
	join(t, c, group, topic, wb, &log)
	require.Eventually(t, func() bool { return wa.count() == 1 && wb.count() == 1 }, time.Minute, 20*time.Millisecond, "%s", &log)

	err = commit(zombie, 9)
	require.Error(t, err, "a commit with the group metadata of an older generation was accepted")
	require.ErrorContains(t, err, group)
	require.NoError(t, commit(a, 7), "the live member's commit")

	got, err := groupOffsets(t, c).GroupOffsets(ctx, group, []admin.TopicPartition{{Topic: topic, Partition: 0}})
	require.NoError(t, err)
	require.Equal(t, int64(7), got[0].Offset)
	require.Equal(t, "at 7", got[0].Metadata)
}

func TestMemberConfig(t *testing.T) {
	hooks := consumer.Hooks{}
	_, err := consumer.Join(context.Background(), []string{"t"}, hooks, consumer.Brokers("127.0.0.1:1"))
	require.ErrorIs(t, err, consumer.ErrConfig)
	require.ErrorContains(t, err, "consumer.Group")
	for _, k := range []string{"group.instance.id", "partition.assignment.strategy", "enable.auto.commit", "group.protocol"} {
		_, err := consumer.Join(context.Background(), []string{"t"}, hooks, consumer.Brokers("127.0.0.1:1"), consumer.Group("g"), consumer.Set(k, "x"))
		require.ErrorIs(t, err, consumer.ErrConfig, k)
		require.ErrorContains(t, err, k)
	}
	_, err = consumer.Join(context.Background(), []string{"t"}, hooks, consumer.Brokers("127.0.0.1:1"), consumer.Group("g"), consumer.Protocol("eager"))
	require.ErrorIs(t, err, consumer.ErrConfig)
	require.ErrorContains(t, err, `"eager"`)
}

func keys(m map[consumer.TopicPartition]bool) []consumer.TopicPartition {
	out := make([]consumer.TopicPartition, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestMemberFencedInstance: a static member whose instance id a newer
// member took is out of the group for good: Failed gets
// ErrInstanceFenced once, Err says the same, and Close returns (the
// fatally failed client cannot be closed, and Close must not wait for it).
func TestMemberFencedInstance(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		topic := c.CreateTopic(t, 2, nil)
		group := "kord.test." + kafkatest.TopicName(t)
		var log syncbuf.Buffer
		session := consumer.Set("session.timeout.ms", "10000")
		w := newWatcher(0)
		failed := make(chan error, 2)
		hooks := w.hooks()
		hooks.Failed = func(err error) { failed <- err }
		m, err := consumer.Join(context.Background(), []string{topic}, hooks, consumer.Brokers(c.Brokers), consumer.Group(group),
			consumer.InstanceID("a"), session, consumer.Logger(slog.New(slog.NewTextHandler(&log, nil))))
		require.NoError(t, err)
		require.Eventually(t, func() bool { return w.count() == 2 }, time.Minute, 20*time.Millisecond, "%s", &log)
		join(t, c, group, topic, newWatcher(0), &log, consumer.InstanceID("a"), session)
		select {
		case err := <-failed:
			require.ErrorIs(t, err, consumer.ErrInstanceFenced)
			require.ErrorContains(t, err, group)
		case <-time.After(time.Minute):
			t.Fatalf("the fenced member was not told\n%s", &log)
		}
		require.ErrorIs(t, m.Err(), consumer.ErrInstanceFenced)
		closed := make(chan error, 1)
		go func() { closed <- m.Close() }()
		select {
		case err := <-closed:
			require.NoError(t, err)
		case <-time.After(30 * time.Second):
			t.Fatalf("Close of the fenced member hangs\n%s", &log)
		}
		require.Empty(t, failed, "Failed called twice")
	})
}

// TestMemberSessionTimeoutRefused: a session timeout outside the broker's
// bounds (group.max.session.timeout.ms, 30 min by default; the test
// broker's minimum is lowered) is a setting that can never work: the
// member fails at once, naming it, instead of retrying its JoinGroup for
// ever.
func TestMemberSessionTimeoutRefused(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		topic := c.CreateTopic(t, 1, nil)
		group := "kord.test." + kafkatest.TopicName(t)
		var log syncbuf.Buffer
		failed := make(chan error, 2)
		hooks := consumer.Hooks{Failed: func(err error) { failed <- err }}
		m, err := consumer.Join(context.Background(), []string{topic}, hooks, consumer.Brokers(c.Brokers), consumer.Group(group),
			consumer.Set("session.timeout.ms", "3600000"), consumer.Set("max.poll.interval.ms", "3600000"), consumer.Logger(slog.New(slog.NewTextHandler(&log, nil))))
		require.NoError(t, err)
		defer m.Close()
		select {
		case err := <-failed:
			require.ErrorContains(t, err, "session.timeout.ms=3600000 is outside the brokers' bounds")
			require.ErrorContains(t, err, group)
			require.ErrorIs(t, m.Err(), err)
		case <-time.After(30 * time.Second):
			t.Fatalf("no failure in 30s:\n%s", &log)
		}
	})
}
