package producer_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kordproject/kord/internal/rig/kafkatest"
	"github.com/kordproject/kord/producer"
	"github.com/kordproject/kord/serde"
)

func TestTransactionsCommitAbortAndOffsetMetadata(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		out := c.CreateTopic(t, 3, nil)
		in := c.CreateTopic(t, 2, nil)
		group := kafkatest.TopicName(t) + ".commit"
		p := newBytesProducer(t, c, producer.TransactionalID(kafkatest.TopicName(t)))
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		require.NoError(t, p.InitTransactions(ctx))

		// Aborted: never visible to read_committed.
		require.NoError(t, p.BeginTransaction())
		for i := 0; i < 10; i++ {
			require.NoError(t, p.Produce(ctx, producer.Record[string, []byte]{Topic: out, Key: fmt.Sprint(i), Value: []byte("aborted")}, nil))
		}
		require.NoError(t, p.AbortTransaction(ctx))
		require.NoError(t, p.Flush(ctx), "records purged by an abort are not failures to report")

		// Committed with offsets and metadata for a group that has no members.
		require.NoError(t, p.BeginTransaction())
		for i := 0; i < 10; i++ {
			require.NoError(t, p.Produce(ctx, producer.Record[string, []byte]{Topic: out, Key: fmt.Sprint(i), Value: []byte("committed")}, nil))
		}
		meta := "kord1;run=r1;ckpt=7"
		require.NoError(t, p.SendOffsetsToTransaction(ctx, group, []producer.Offset{
			{Topic: in, Partition: 0, Offset: 42, Metadata: meta},
			{Topic: in, Partition: 1, Offset: 0, Metadata: meta},
		}))
		require.NoError(t, p.CommitTransaction(ctx))

		recs := c.ReadAll(t, out, 10, true, 30*time.Second)
		require.Len(t, recs, 10)
		for _, r := range recs {
			require.Equal(t, "committed", string(r.Value))
		}
		require.Empty(t, c.ReadAll(t, out, 11, true, 2*time.Second)[10:], "aborted records visible")

		// The commit group's offsets and metadata, read with stable offsets.
		req := kmsg.NewPtrOffsetFetchRequest()
		req.Group = group
		req.RequireStable = true
		rt := kmsg.NewOffsetFetchRequestTopic()
		rt.Topic = in
		rt.Partitions = []int32{0, 1}
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, c.Client(t))
		require.NoError(t, err)
		require.Len(t, resp.Topics, 1)
		got := map[int32]int64{}
		for _, p := range resp.Topics[0].Partitions {
			require.Zero(t, p.ErrorCode)
			require.Equal(t, meta, *p.Metadata)
			got[p.Partition] = p.Offset
		}
		require.Equal(t, map[int32]int64{0: 42, 1: 0}, got)
	})
}

func TestTransactionalCallsNeedTransactionalID(t *testing.T) {
	c := kafkatest.Fake(t)
	p := newBytesProducer(t, c)
	require.ErrorIs(t, p.BeginTransaction(), producer.ErrConfig)
}

// fencedPair returns a topic, a transactional.id and two producers with
// it: old, with a transaction open holding one record, then fenced by cur,
// initialised after it.
func fencedPair(t *testing.T, ctx context.Context, c *kafkatest.Cluster) (out, id string, old, cur *producer.Producer[string, []byte]) {
	t.Helper()
	out = c.CreateTopic(t, 1, nil)
	id = kafkatest.TopicName(t)
	old = newBytesProducer(t, c, producer.TransactionalID(id))
	require.NoError(t, old.InitTransactions(ctx))
	require.NoError(t, old.BeginTransaction())
	require.NoError(t, old.Produce(ctx, producer.Record[string, []byte]{Topic: out, Key: "k", Value: []byte("zombie")}, nil))
	require.NoError(t, old.Flush(ctx))
	cur = newBytesProducer(t, c, producer.TransactionalID(id))
	require.NoError(t, cur.InitTransactions(ctx))
	return out, id, old, cur
}

// liveCommits checks that cur, which fenced a zombie, commits a record and
// that a read_committed reader sees only it (nothing of the zombie's).
func liveCommits(t *testing.T, ctx context.Context, c *kafkatest.Cluster, cur *producer.Producer[string, []byte], out string) {
	t.Helper()
	require.NoError(t, cur.BeginTransaction())
	require.NoError(t, cur.Produce(ctx, producer.Record[string, []byte]{Topic: out, Key: "k", Value: []byte("live")}, nil))
	require.NoError(t, cur.CommitTransaction(ctx))
	recs := c.ReadAll(t, out, 1, true, 30*time.Second)
	require.Len(t, recs, 1)
	require.Equal(t, "live", string(recs[0].Value))
}

// TestZombieIsFenced: a second producer with the same transactional.id
// fences the first; the first's next transactional call fails fatally with
// ErrFenced and it refuses further records.
func TestZombieIsFenced(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		out, id, old, cur := fencedPair(t, ctx, c)

		err := old.CommitTransaction(ctx)
		require.Error(t, err)
		var te *producer.TxnError
		require.ErrorAs(t, err, &te)
		require.True(t, te.Fatal, "%v", err)
		require.ErrorIs(t, err, producer.ErrFenced)
		require.Contains(t, err.Error(), id)
		require.ErrorIs(t, old.Produce(ctx, producer.Record[string, []byte]{Topic: out, Key: "k"}, nil), producer.ErrFailed)

		liveCommits(t, ctx, c, cur, out)
	})
}

// TestZombieAbortIsFenced: a zombie whose next call after being fenced
// fails (on kfake as "abort required", on Apache Kafka as fenced) learns
// through AbortIfRequired that it is fenced, so that it stops instead of
// starting a new producer that would fence the live one.
func TestZombieAbortIsFenced(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		out, id, old, cur := fencedPair(t, ctx, c)

		_ = old.Produce(ctx, producer.Record[string, []byte]{Topic: out, Key: "k", Value: []byte("zombie 2")}, nil)
		_ = old.Flush(ctx)
		err := old.SendOffsetsToTransaction(ctx, id+".group", []producer.Offset{{Topic: out, Partition: 0, Offset: 1}})
		require.Error(t, err)
		t.Logf("the zombie's first failed call: %v", err)
		// A record produced now is refused at once: on kfake as in an
		// erroneous state (abort required), on Apache Kafka as failed
		// (fenced). Either way AbortIfRequired ends in ErrFenced.
		perr := old.Produce(ctx, producer.Record[string, []byte]{Topic: out, Key: "k", Value: []byte("zombie 3")}, nil)
		require.Error(t, perr)
		t.Logf("the zombie's next produce: %v", perr)
		if producer.RequiresAbort(perr) {
			require.ErrorIs(t, old.AbortIfRequired(ctx, perr), producer.ErrFenced)
		} else {
			require.ErrorIs(t, perr, producer.ErrFenced)
		}
		err = old.AbortIfRequired(ctx, err)
		require.ErrorIs(t, err, producer.ErrFenced)

		liveCommits(t, ctx, c, cur, out)
	})
}

// TestCommitReports: a transactional producer without per-record delivery
// reports commits what it produced (read_committed sees every record, in
// order per key) and aborts what it aborts; Produce with a callback and the
// option without a transactional.id are refused.
func TestCommitReports(t *testing.T) {
	_, err := producer.New(serde.String(), serde.Bytes(), producer.Brokers("127.0.0.1:1"), producer.CommitReports())
	require.ErrorIs(t, err, producer.ErrConfig)
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		out := c.CreateTopic(t, 3, nil)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		p := newBytesProducer(t, c, producer.TransactionalID(kafkatest.TopicName(t)), producer.CommitReports())
		require.NoError(t, p.InitTransactions(ctx))
		require.NoError(t, p.BeginTransaction())
		require.ErrorIs(t, p.Produce(ctx, producer.Record[string, []byte]{Topic: out, Key: "k"}, func(producer.Delivery, error) {}), producer.ErrConfig)
		for i := 0; i < 500; i++ {
			require.NoError(t, p.Produce(ctx, producer.Record[string, []byte]{Topic: out, Key: fmt.Sprintf("k%d", i%7), Value: []byte("aborted")}, nil))
		}
		require.NoError(t, p.AbortTransaction(ctx))
		require.NoError(t, p.BeginTransaction())
		const n = 10_000
		for i := 0; i < n; i++ {
			require.NoError(t, p.Produce(ctx, producer.Record[string, []byte]{Topic: out, Key: fmt.Sprintf("k%d", i%7), Value: []byte(strconv.Itoa(i))}, nil))
		}
		require.NoError(t, p.Flush(ctx))
		require.NoError(t, p.CommitTransaction(ctx))
		recs := c.ReadExactly(t, out, n)
		last := map[string]int{}
		for _, r := range recs {
			v, err := strconv.Atoi(string(r.Value))
			require.NoError(t, err, "an aborted record was read: %q", r.Value)
			if prev, ok := last[string(r.Key)]; ok {
				require.Greater(t, v, prev, "key %s out of order", r.Key)
			}
			last[string(r.Key)] = v
		}
	})
}

// TestTxnCallOutlivingDeadline: a transactional call whose librdkafka call
// does not return (as rd_kafka_send_offsets_to_transaction does not when
// its group coordinator was decommissioned: librdkafka issues #5456 and
// #5511, met when a broker of three was killed) returns anyway, 2 s after
// its context's deadline, with a fatal error wrapping
// context.DeadlineExceeded; the producer is failed; Close returns at once,
// saying it left the handle open; and when the call comes back at last, the
// handle is closed and the producer's goroutines end.
func TestTxnCallOutlivingDeadline(t *testing.T) {
	c := kafkatest.Fake(t)
	p := newBytesProducer(t, c, producer.TransactionalID(kafkatest.TopicName(t)))
	release := make(chan struct{})
	producer.SetTxnCallHook(func(op string) {
		if strings.HasPrefix(op, "send offsets") {
			<-release
		}
	})
	t.Cleanup(func() { producer.SetTxnCallHook(nil) })

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := p.SendOffsetsToTransaction(ctx, "g", []producer.Offset{{Topic: "in", Partition: 0, Offset: 1}})
	took := time.Since(start)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	var te *producer.TxnError
	require.ErrorAs(t, err, &te)
	require.True(t, te.Fatal, "%v", err)
	require.Contains(t, err.Error(), "#5456")
	require.GreaterOrEqual(t, took, 2*time.Second, "returned before the grace after the deadline")
	require.Less(t, took, 5*time.Second)
	require.Error(t, p.Produce(context.Background(), producer.Record[string, []byte]{Topic: "in", Key: "k"}, nil), "a given-up producer takes no records")

	start = time.Now()
	err = p.Close()
	require.ErrorContains(t, err, "still in librdkafka")
	require.Less(t, time.Since(start), time.Second, "Close waited for the call")

	close(release)
	require.Eventually(t, func() bool {
		buf := make([]byte, 1<<20)
		n := runtime.Stack(buf, true)
		return !strings.Contains(string(buf[:n]), "kord/producer.(*client)")
	}, 30*time.Second, 50*time.Millisecond, "the producer's goroutines outlived the call")
	require.NoError(t, p.Close(), "closed by the call that came back")
}

// TestZombieProduceIsFenced: a fenced producer's records fail with
// ErrFenced whichever path learns it first: the fatal error its events
// recorded, or librdkafka refusing the record itself ("Local: Fatal
// error", before the event is read), which a job on several processes
// must tell from any other failure (kafkaio's sink recovers from a
// fencing there; a CI run's zombie died of the bare error).
func TestZombieProduceIsFenced(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		out, _, old, cur := fencedPair(t, ctx, c)
		var err error
		for i := 0; err == nil && ctx.Err() == nil; i++ {
			err = old.Produce(ctx, producer.Record[string, []byte]{Topic: out, Key: fmt.Sprint(i)}, nil)
			if err == nil {
				time.Sleep(time.Millisecond)
			}
		}
		if c.Real() {
			require.ErrorIs(t, err, producer.ErrFenced)
		} else {
			// kfake answers a zombie's records "abort required", which
			// AbortIfRequired turns into ErrFenced (TestZombieAbortIsFenced).
			require.True(t, errors.Is(err, producer.ErrFenced) || producer.RequiresAbort(err), "%v", err)
		}
		liveCommits(t, ctx, c, cur, out)
	})
}
