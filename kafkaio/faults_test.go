package kafkaio_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kordproject/kord/checkpoint"
	"github.com/kordproject/kord/consumer"
	"github.com/kordproject/kord/internal/rig/kafkatest"
	"github.com/kordproject/kord/kafkaio"
	"github.com/kordproject/kord/keyed"
	"github.com/kordproject/kord/keyed/connector"
	"github.com/kordproject/kord/partitioner"
	"github.com/kordproject/kord/producer"
	"github.com/kordproject/kord/serde"
)

// Misconfigurations and faults of a Kafka job: each must end Run with a
// clear error within a stated bound, never hang. A second live copy of the
// job is TestKafkaZombieIsFenced's.

// restartLog counts the engine's restarts from its log.
type restartLog struct{ n atomic.Int64 }

func (l *restartLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *restartLog) Handle(_ context.Context, r slog.Record) error {
	if r.Message == restartMessage {
		l.n.Add(1)
	}
	return nil
}
func (l *restartLog) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *restartLog) WithGroup(string) slog.Handler      { return l }

// runBounded runs j under a deadline far above bound, requires Run to
// return before bound with an error that is not the context's, and
// returns the error; the time Run took is logged.
func runBounded(t *testing.T, j *keyed.Job, bound time.Duration) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*bound)
	defer cancel()
	start := time.Now()
	err := j.Run(ctx)
	took := time.Since(start)
	t.Logf("Run returned after %v: %v", took.Round(time.Millisecond), err)
	require.Error(t, err)
	require.NoError(t, ctx.Err(), "Run returned only at the test's deadline")
	require.False(t, errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled), "a context error: %v", err)
	require.Less(t, took, bound, "Run took longer than the bound")
	return err
}

// TestKafkaFaultTransactionTimeout: checkpoint settings whose derived
// transaction timeout is above the broker's transaction.max.timeout.ms
// (900000 by default on both Apache Kafka and kfake, which enforces it in
// InitProducerID) are Flink's classic failure (a 1 h timeout against a
// 15 min maximum). The job is told the brokers allow an hour
// (TransactionMaxTimeout), and its checkpoint timeout asks for more than
// 15 min. It stops at once with an error naming
// transaction.max.timeout.ms, wrapping producer.ErrConfig and
// keyed.ErrPermanent, and does not restart although its strategy allows
// restarts: the broker will refuse every new producer the same way.
func TestKafkaFaultTransactionTimeout(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		f := newFixture(t, c, 2, 10)
		f.fill(100)
		restarts := &restartLog{}
		j, _, sink := f.build(func(s *jobSpec) {
			s.logger = slog.New(restarts)
			s.opts = []keyed.Opt{keyed.RestartStrategy(keyed.FixedDelay(5, 10*time.Millisecond)),
				keyed.CheckpointTimeout(30 * time.Minute), keyed.TransactionMaxTimeout(time.Hour)}
		})
		err := runBounded(t, j, 30*time.Second)
		require.ErrorIs(t, err, producer.ErrConfig)
		require.ErrorIs(t, err, keyed.ErrPermanent)
		require.Contains(t, err.Error(), "transaction.max.timeout.ms")
		require.Zero(t, restarts.n.Load(), "the job restarted after a configuration error")
		require.NotContains(t, err.Error(), "gave up after")
		require.NoError(t, sink.Close())
		require.Empty(t, f.c.ReadAll(t, f.out, 1, false, 2*time.Second), "output written by a job that never started")
	})
}

// defaultTransactionTimeout is the transaction timeout a job with the
// default checkpoint settings hands its sink: interval 1 s plus timeout
// 60 s, plus 10 s (keyed derives it).
const defaultTransactionTimeout = 71 * time.Second

// TestSinkRefusesDerivedSettings: transactional.id and
// transaction.timeout.ms are derived from the job, so a user's value is
// refused; message.timeout.ms may be lowered but not raised above the
// transaction timeout (a record retried past its transaction's end would
// outlive it); socket.timeout.ms must exceed the commit timeout (else
// librdkafka resends a commit by itself: DESIGN.md, on KIP-890). Refusals
// are permanent and come before any network call.
func TestSinkRefusesDerivedSettings(t *testing.T) {
	info := connector.SinkInfo{Job: "v", Inputs: []string{"in"}, Mode: checkpoint.ExactlyOnce, TransactionTimeout: defaultTransactionTimeout, CommitTimeout: time.Minute}
	txn := info.TransactionTimeout.Milliseconds()
	for _, tc := range []struct {
		settings map[string]string
		err      string
	}{
		{map[string]string{"transaction.timeout.ms": "60000"}, "transaction.timeout.ms is derived"},
		{map[string]string{"transactional.id": "x"}, "transactional.id is derived from the job name (kord.v)"},
		{map[string]string{"message.timeout.ms": fmt.Sprint(txn + 1)}, fmt.Sprintf("message.timeout.ms %d exceeds the transaction timeout %d ms", txn+1, txn)},
		{map[string]string{"message.timeout.ms": "soon"}, "message.timeout.ms \"soon\""},
		{map[string]string{"message.timeout.ms": fmt.Sprint(txn)}, ""},
		{map[string]string{"message.timeout.ms": "5000"}, ""},
		{map[string]string{"socket.timeout.ms": "60000"}, "socket.timeout.ms \"60000\" must exceed the commit timeout 60000 ms"},
		{map[string]string{"socket.timeout.ms": "70000"}, ""},
	} {
		opts := []kafkaio.Opt{kafkaio.InitTimeout(100 * time.Millisecond)}
		for k, v := range tc.settings {
			opts = append(opts, kafkaio.Set(k, v))
		}
		sink := kafkaio.NewSink(mustClient(kafkaio.Brokers("127.0.0.1:1")), "out", serde.String(), opts...).(*kafkaio.Sink[string])
		if tc.err != "" {
			require.ErrorContains(t, sink.ValidateSink(info), tc.err, "Validate sees it before the job starts")
		}
		err := sink.Reset(context.Background(), info)
		require.NoError(t, sink.Close())
		if tc.err == "" {
			// Accepted: it goes on to the (unreachable) broker.
			require.False(t, errors.Is(err, producer.ErrConfig), "%v: %v", tc.settings, err)
			continue
		}
		require.ErrorIs(t, err, producer.ErrConfig, "%v", tc.settings)
		require.ErrorIs(t, err, keyed.ErrPermanent, "%v", tc.settings)
		require.ErrorContains(t, err, tc.err, "%v", tc.settings)
	}
}

// TestSinkBoundsProduceQueue: the sink's producer gets kord's bound on
// librdkafka's produce queue (4 MiB, or one record of message.max.bytes
// if that is more) in both modes, unless the user set it, on the sink or
// on its Client (the Client's settings reach the producer as they are, so
// the sink adds none of its own).
func TestSinkBoundsProduceQueue(t *testing.T) {
	const kbytes = "queue.buffering.max.kbytes"
	for _, mode := range []checkpoint.Mode{checkpoint.ExactlyOnce, checkpoint.AtLeastOnce} {
		info := connector.SinkInfo{Job: "v", Inputs: []string{"in"}, Mode: mode, TransactionTimeout: defaultTransactionTimeout, CommitTimeout: time.Minute}
		settings := func(client []kafkaio.Opt, sink ...kafkaio.Opt) map[string]string {
			t.Helper()
			s := kafkaio.NewSink(mustClient(append(client, kafkaio.Brokers("127.0.0.1:1"))...), "out", serde.String(), sink...).(*kafkaio.Sink[string])
			out, err := s.ProducerSettings(info)
			require.NoError(t, err)
			require.NoError(t, s.Close())
			return out
		}
		require.Equal(t, "4096", settings(nil)[kbytes], "mode %v", mode)
		require.Equal(t, "500", settings(nil, kafkaio.Set(kbytes, "500"))[kbytes], "the sink's own setting wins (mode %v)", mode)
		require.NotContains(t, settings([]kafkaio.Opt{kafkaio.Set(kbytes, "65536")}), kbytes,
			"the Client's setting reaches the producer as it is (mode %v)", mode)
		// Room for one record of message.max.bytes (10,000,000 bytes:
		// 9766 KiB), on the sink or on its Client.
		require.Equal(t, "9766", settings(nil, kafkaio.Set("message.max.bytes", "10000000"))[kbytes], "mode %v", mode)
		require.Equal(t, "9766", settings([]kafkaio.Opt{kafkaio.Set("message.max.bytes", "10000000")})[kbytes], "mode %v", mode)
	}
}

// TestKafkaFaultUnreachableBroker: source and sink name a broker nothing
// listens on. No cluster is needed.
//
// "error": Run ends within 45 s (the sink's Reset waits for the brokers at
// most Sink.InitTimeout, default 30 s) with an error that names the broker or says
// it could not connect, not at the test's deadline, not with a context
// error.
//
// "stop": a stop request (Run's ctx done after 2 s) ends Run within 10 s
// more, although the broker is still unreachable.
func TestKafkaFaultUnreachableBroker(t *testing.T) {
	const broker = "127.0.0.1:1"
	job := func(t *testing.T) (*keyed.Job, *kafkaio.Sink[result]) {
		j, _, sink := newJob(jobSpec{brokers: broker, in: "events", out: "results", name: "unreachable", dir: t.TempDir(), interval: time.Second, byPartition: true, parallelism: 1})
		return j, sink
	}
	t.Run("error", func(t *testing.T) {
		t.Parallel()
		j, sink := job(t)
		err := runBounded(t, j, 45*time.Second)
		require.True(t, containsAny(err.Error(), broker, "connect", "Connection refused", "brokers are down"),
			"the error neither names %s nor says it could not connect: %v", broker, err)
		require.NoError(t, sink.Close())
	})
	t.Run("stop", func(t *testing.T) {
		t.Parallel()
		j, sink := job(t)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		start := time.Now()
		err := j.Run(ctx)
		took := time.Since(start)
		t.Logf("Run returned after %v: %v", took.Round(time.Millisecond), err)
		require.Less(t, took, 12*time.Second, "Run ignored the stop request while the broker was unreachable")
		require.NoError(t, sink.Close())
	})
}

func containsAny(s string, subs ...string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// TestKafkaFaultMissingOutputTopic: the sink's topic does not exist, and
// neither broker creates topics on demand (scripts/kafka.sh sets
// auto.create.topics.enable=false; kfake creates none unless
// kfake.AllowAutoTopicCreation; kord's producer refuses
// allow.auto.create.topics anyway). With input waiting and with none (an
// idle job would otherwise commit checkpoints for days and fail only at
// its first result), the job fails within 30 s with
// producer.ErrUnknownTopic naming the topic, and commits no output.
func TestKafkaFaultMissingOutputTopic(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		for _, events := range []int{200, 0} {
			f := newFixture(t, c, 2, 20)
			f.fill(events)
			f.out = kafkatest.TopicName(t) + ".missing"
			j, _, sink := f.build(func(s *jobSpec) { s.parallelism = 1 })
			err := runBounded(t, j, 30*time.Second)
			require.ErrorIs(t, err, producer.ErrUnknownTopic, "%d events waiting", events)
			require.Contains(t, err.Error(), f.out)
			_ = sink.Close()
		}
	})
}

// TestKafkaFaultUndecodableRecord: a record whose value does not decode,
// arriving after the job committed the results of every record before it,
// fails the job with *consumer.OffsetError at exactly that record's topic,
// partition and offset, also after the restarts its strategy allows (a
// restart must not skip it: invariant 9). A read_committed reader of the
// output then sees each earlier record's result exactly once and nothing
// for the bad record or the records after it in its partition.
func TestKafkaFaultUndecodableRecord(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		const parts = 3
		f := newFixture(t, c, parts, 50)
		f.fill(1_000)
		restarts := &restartLog{}
		j, _, sink := f.build(func(s *jobSpec) {
			s.byPartition, s.logger = false, slog.New(restarts)
			s.opts = []keyed.Opt{keyed.RestartStrategy(keyed.FixedDelay(2, 10*time.Millisecond))}
		})
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		done := make(chan error, 1)
		go func() { done <- j.Run(ctx) }()
		require.Len(t, f.c.ReadAll(t, f.out, f.total(), true, 2*time.Minute), f.total(), "results of the good records before the bad one")

		// The bad record, then good ones after it in the same partition
		// (keys the fixture used there, continuing their sequences).
		p, err := producer.New(serde.String(), serde.Bytes(), producer.Brokers(c.Brokers))
		require.NoError(t, err)
		defer func() { _ = p.Close() }()
		bad, err := p.ProduceSync(ctx, producer.Record[string, []byte]{Topic: f.in, Key: "user-bad", Value: []byte("{not json")})
		require.NoError(t, err)
		after := map[string]bool{} // "uuid/seq" of the records after the bad one
		for u, n := range f.want {
			if partitioner.KeyPartition([]byte(u), parts) != bad.Partition {
				continue
			}
			for k := int64(0); k < 3; k++ {
				v := fmt.Appendf(nil, `{"uuid":%q,"seq":%d}`, u, n+k)
				d, err := p.ProduceSync(ctx, producer.Record[string, []byte]{Topic: f.in, Key: u, Value: v})
				require.NoError(t, err)
				require.Equal(t, bad.Partition, d.Partition)
				require.Greater(t, d.Offset, bad.Offset)
				after[fmt.Sprintf("%s/%d", u, n+k)] = true
			}
		}
		require.NotEmpty(t, after)
		sent := time.Now()

		var runErr error
		select {
		case runErr = <-done:
		case <-time.After(30 * time.Second):
			t.Fatal("the job did not fail within 30 s of the undecodable record")
		}
		t.Logf("Run returned %v after the bad record was written: %v", time.Since(sent).Round(time.Millisecond), runErr)
		var oe *consumer.OffsetError
		require.ErrorAs(t, runErr, &oe)
		require.Equal(t, consumer.OffsetError{Topic: f.in, Partition: bad.Partition, Offset: bad.Offset}, consumer.OffsetError{Topic: oe.Topic, Partition: oe.Partition, Offset: oe.Offset})
		require.Contains(t, runErr.Error(), "decode")
		require.Contains(t, runErr.Error(), "gave up after 2 restarts")
		require.EqualValues(t, 2, restarts.n.Load())
		require.NoError(t, sink.Close())

		recs := f.c.ReadAll(t, f.out, f.total()+1, true, 3*time.Second)
		for _, rec := range recs {
			var r result
			require.NoError(t, json.Unmarshal(rec.Value, &r))
			require.False(t, after[fmt.Sprintf("%s/%d", r.UUID, r.Seq)], "result committed for %s seq %d, a record after the bad one", r.UUID, r.Seq)
			require.NotEqual(t, "user-bad", r.UUID)
		}
		f.verify()
	})
}
