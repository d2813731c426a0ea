//go:build kordfailpoints

package kafkaio_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kordproject/kord/admin"
	"github.com/kordproject/kord/checkpoint"
	"github.com/kordproject/kord/consumer"
	"github.com/kordproject/kord/internal/failpoint"
	"github.com/kordproject/kord/internal/rig/kafkatest"
	"github.com/kordproject/kord/internal/rig/testdir"
	"github.com/kordproject/kord/kafkaio"
	"github.com/kordproject/kord/keyed"
	"github.com/kordproject/kord/keyed/connector"
	"github.com/kordproject/kord/producer"
	"github.com/kordproject/kord/serde"
)

// incarnations builds and runs the job once per hook, each of which must
// crash it, then once without a hook until until returns, with a graceful
// stop. edit adjusts each build. It returns every job and sink, in order.
func (f *fixture) incarnations(ctx context.Context, edit func(*jobSpec), hooks []failpoint.Hook,
	until func(*kafkaio.Sink[result])) ([]*keyed.Job, []*kafkaio.Sink[result]) {
	t := f.t
	t.Helper()
	var jobs []*keyed.Job
	var sinks []*kafkaio.Sink[result]
	for _, hook := range append(hooks, nil) {
		j, _, sink := f.build(edit)
		jobs, sinks = append(jobs, j), append(sinks, sink)
		if hook != nil {
			require.ErrorIs(t, j.Run(failpoint.WithHook(ctx, hook)), failpoint.ErrCrashed)
			continue // abandoned, as by a dead process: the next incarnation fences it
		}
		rctx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- j.Run(rctx) }()
		until(sink)
		stop()
		require.NoError(t, <-done)
	}
	return jobs, sinks
}

// TestKafkaZombieIsFenced: a job stalled mid-run (held at a checkpoint
// step, like a paused process) while a second copy starts with the same
// name on a copy of its checkpoints. The copy fences it; the stalled one,
// released, stops with producer.ErrFenced and does not restart (a restart
// would fence the live copy in turn), although its restart strategy allows
// restarts; the survivor's output is exactly-once.
func TestKafkaZombieIsFenced(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		f := newFixture(t, c, 4, 200)
		f.fill(5_000)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		zdir, sdir := t.TempDir(), t.TempDir()
		held, release := make(chan struct{}), make(chan struct{})
		var markers atomic.Int64
		hold := func(p string) error {
			if p == failpoint.AfterMarker && markers.Add(1) == 3 {
				close(held)
				<-release
			}
			return nil
		}
		zombie, _, zsink := f.build(func(s *jobSpec) {
			s.dir, s.byPartition = zdir, false
			s.opts = []keyed.Opt{keyed.RestartStrategy(keyed.FixedDelay(5, 10*time.Millisecond))}
		})
		zdone := make(chan error, 1)
		go func() { zdone <- zombie.Run(failpoint.WithHook(ctx, hold)) }()
		select {
		case <-held:
		case err := <-zdone:
			t.Fatalf("the first copy ended before its third commit: %v", err)
		}
		testdir.Copy(t, zdir, sdir)
		var commits atomic.Int64
		count := func(p string) error {
			if p == failpoint.AfterMarker {
				commits.Add(1)
			}
			return nil
		}
		survivor, _, ssink := f.build(func(s *jobSpec) { s.dir, s.byPartition = sdir, false })
		sctx, stop := context.WithCancel(ctx)
		sdone := make(chan error, 1)
		go func() { sdone <- survivor.Run(failpoint.WithHook(sctx, count)) }()
		require.Eventually(t, func() bool { return commits.Load() >= 2 }, time.Minute, 10*time.Millisecond)
		close(release)
		select {
		case err := <-zdone:
			require.ErrorIs(t, err, producer.ErrFenced)
			require.ErrorIs(t, err, keyed.ErrPermanent)
		case <-time.After(time.Minute):
			t.Fatal("the fenced copy did not stop within a minute")
		}
		// The fenced sink's Close reports the fencing again; nothing to check.
		_ = zsink.Close()
		f.c.ReadAll(t, f.out, f.total(), true, 2*time.Minute)
		stop()
		require.NoError(t, <-sdone, "the survivor must not be fenced by the zombie")
		require.NoError(t, ssink.Close())
		f.verify()
	})
}

// TestKafkaUnknownTopic: a job whose input topic does not exist fails at
// once with an error naming the topic.
func TestKafkaUnknownTopic(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		f := newFixture(t, c, 1, 1)
		missing := kafkatest.TopicName(t) + ".missing"
		j, _, sink := f.build(func(s *jobSpec) { s.in = missing })
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		start := time.Now()
		err := j.Run(ctx)
		require.ErrorIs(t, err, consumer.ErrUnknownTopic)
		require.Contains(t, err.Error(), missing)
		require.Less(t, time.Since(start), 30*time.Second)
		require.NoError(t, sink.Close())
	})
}

// stringSink makes one-partition input and output topics and a started
// Sink of strings (key "k") to the output, in mode, with opts, closed with
// the test; ctx ends after a minute.
func stringSink(t *testing.T, c *kafkatest.Cluster, mode checkpoint.Mode, opts ...kafkaio.Opt) (ctx context.Context, in, out string, sink *kafkaio.Sink[string]) {
	in = c.CreateTopic(t, 1, nil)
	out = c.CreateTopic(t, 1, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	sink = kafkaio.NewSink(client(c), out, serde.String(), append([]kafkaio.Opt{keyK}, opts...)...).(*kafkaio.Sink[string])
	require.NoError(t, sink.Reset(ctx, sinkInfo(t, mode, in)))
	t.Cleanup(func() { sink.Close() })
	return ctx, in, out, sink
}

// keyK keys every record "k".
var keyK = kafkaio.Key(func(string) string { return "k" }, serde.String())

// bigKey keys the record big "big-key", and every other "k".
func bigKey(big string) kafkaio.Opt {
	return kafkaio.Key(func(v string) string {
		if v == big {
			return "big-key"
		}
		return "k"
	}, serde.String())
}

// bigSerde writes strings as their bytes, and the one named big as value.
type bigSerde struct{ big, value string }

func (b bigSerde) Encode(dst []byte, v string) ([]byte, error) {
	if v == b.big {
		v = b.value
	}
	return serde.String().Encode(dst, v)
}
func (b bigSerde) Decode(v []byte) (string, error) { return serde.String().Decode(v) }
func (b bigSerde) Fingerprint() string             { return "test-big" }

// sinkInfo is what a job with one input gives its sink.
func sinkInfo(t *testing.T, mode checkpoint.Mode, in string) connector.SinkInfo {
	return connector.SinkInfo{Job: strings.ReplaceAll(kafkatest.TopicName(t), "/", "."), Inputs: []string{in}, Mode: mode,
		TransactionTimeout: defaultTransactionTimeout, CommitTimeout: time.Minute}
}

// TestKafkaSinkCommitAfterAbort: after checkpoint 1 aborts, the output
// written after its barrier (epoch 2) waits in the sink's buffer; the
// commit of checkpoint 2 must carry it, since checkpoint 2's offsets cover
// its input. Epoch 3's output stays invisible until checkpoint 3.
func TestKafkaSinkCommitAfterAbort(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		ctx, in, out, sink := stringSink(t, c, checkpoint.ExactlyOnce)
		rec, err := sink.Recorded(ctx)
		require.NoError(t, err)
		require.Nil(t, rec)
		offsets := func(o int64) []checkpoint.PartitionOffset {
			return []checkpoint.PartitionOffset{{Topic: in, Partition: 0, Offset: o}}
		}
		require.NoError(t, sink.Commit(ctx, checkpoint.Ref{Run: "r", ID: 0}, offsets(0)))
		require.NoError(t, sink.Write(ctx, 1, "epoch 1"))
		require.NoError(t, sink.Write(ctx, 2, "epoch 2")) // after barrier 1: buffered
		require.Equal(t, 1, sink.BufferLen())             // checkpoint 1 aborts: no commit
		require.NoError(t, sink.Write(ctx, 3, "epoch 3")) // after barrier 2
		require.NoError(t, sink.Commit(ctx, checkpoint.Ref{Run: "r", ID: 2}, offsets(20)))
		recs := c.ReadAll(t, out, 3, true, 5*time.Second)
		var got []string
		for _, r := range recs {
			got = append(got, string(r.Value))
		}
		require.Equal(t, []string{"epoch 1", "epoch 2"}, got, "checkpoint 2 commits the output of every epoch ≤ 2, and only that")
		rec, err = sink.Recorded(ctx)
		require.NoError(t, err)
		require.Equal(t, checkpoint.Ref{Run: "r", ID: 2}, rec.Ref)
		require.Equal(t, offsets(20), rec.Offsets)
	})
}

// TestKafkaSinkWritesDuringCommit: while a checkpoint's commit waits on
// the network (held here at its AfterSendOffsets point), the job's next
// epoch is written without waiting for it: into the epoch buffer, not the
// committing transaction, and into the next transaction once the commit is
// done (the sink once held its lock through the commit's round trips,
// stalling every Write for them).
func TestKafkaSinkWritesDuringCommit(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		ctx, in, out, sink := stringSink(t, c, checkpoint.ExactlyOnce)
		offsets := func(o int64) []checkpoint.PartitionOffset {
			return []checkpoint.PartitionOffset{{Topic: in, Partition: 0, Offset: o}}
		}
		require.NoError(t, sink.Commit(ctx, checkpoint.Ref{Run: "r", ID: 0}, offsets(0)))
		require.NoError(t, sink.Write(ctx, 1, "epoch 1"))
		inCommit, release := make(chan struct{}), make(chan struct{})
		hook := failpoint.WithHook(ctx, func(p string) error {
			if p == failpoint.AfterSendOffsets {
				close(inCommit)
				<-release
			}
			return nil
		})
		committed := make(chan error, 1)
		go func() { committed <- sink.Commit(hook, checkpoint.Ref{Run: "r", ID: 1}, offsets(10)) }()
		<-inCommit
		wrote := make(chan error, 1)
		go func() { wrote <- sink.Write(ctx, 2, "epoch 2") }()
		select {
		case err := <-wrote:
			require.NoError(t, err)
		case <-time.After(10 * time.Second):
			close(release)
			t.Fatal("Write waited for the commit's network calls")
		}
		require.Equal(t, 1, sink.BufferLen(), "epoch 2 waits in the epoch buffer, out of the committing transaction")
		close(release)
		require.NoError(t, <-committed)
		require.Zero(t, sink.BufferLen(), "the next transaction took the buffered record")
		require.NoError(t, sink.Commit(ctx, checkpoint.Ref{Run: "r", ID: 2}, offsets(20)))
		recs := c.ReadAll(t, out, 2, true, 5*time.Second)
		var got []string
		for _, r := range recs {
			got = append(got, string(r.Value))
		}
		require.Equal(t, []string{"epoch 1", "epoch 2"}, got)
	})
}

// TestKafkaDeadLetters: undecodable input records, with a dead-letter
// topic, go to the dead-letter topic in the transactions that commit
// their offsets: across a crash after a commit and a crash before one, a
// read_committed reader sees each bad record there exactly once, with
// headers naming its topic, partition and offset, and every good event's
// result exactly once in the output.
func TestKafkaDeadLetters(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		f := newFixture(t, c, 3, 100)
		f.fill(3_000)
		dlq := c.CreateTopic(t, 1, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		bad, err := producer.New(serde.String(), serde.Bytes(), producer.Brokers(c.Brokers))
		require.NoError(t, err)
		defer bad.Close()
		nBad := 0
		produceBad := func() {
			require.NoError(t, bad.Produce(ctx, producer.Record[string, []byte]{Topic: f.in, Key: fmt.Sprintf("bad-%05d", nBad), Value: []byte(fmt.Sprintf("not json %d", nBad))}, nil))
			require.NoError(t, bad.Flush(ctx))
			nBad++
		}
		for range 20 {
			produceBad()
		}
		// A bad record read after checkpoint k's barrier belongs to the
		// epoch after it: crashing right after k commits must not leave
		// it committed, or the restart would send it again.
		lateBadThenCrash := func(k int64) failpoint.Hook {
			var snaps, commits atomic.Int64
			return func(p string) error {
				switch p {
				case failpoint.AfterSnapshots:
					if snaps.Add(1) == k {
						produceBad()
						time.Sleep(500 * time.Millisecond) // read and handed to the sink before k commits
					}
				case failpoint.AfterCommit:
					if commits.Add(1) == k {
						return fmt.Errorf("injected crash")
					}
				}
				return nil
			}
		}
		jobs, sinks := f.incarnations(ctx, func(s *jobSpec) {
			s.byPartition = false
			s.sinkOpts = []kafkaio.Opt{kafkaio.DeadLetterTopic(dlq)}
		}, []failpoint.Hook{lateBadThenCrash(3), crashAt(failpoint.BeforeCommit, 1), lateBadThenCrash(2)},
			func(*kafkaio.Sink[result]) {
				f.c.ReadAll(t, f.out, f.total(), true, 2*time.Minute)
				f.c.ReadAll(t, dlq, nBad, true, time.Minute)
			})
		require.NoError(t, sinks[len(sinks)-1].Close())
		f.verify()
		dead := f.c.ReadExactly(t, dlq, nBad) // each bad record exactly once in the dead-letter topic
		seen := map[string]bool{}
		for _, r := range dead {
			h := map[string]string{}
			for _, x := range r.Headers {
				h[x.Key] = string(x.Value)
			}
			require.Equal(t, f.in, h["kord.dlq.topic"])
			require.NotEmpty(t, h["kord.dlq.partition"])
			require.NotEmpty(t, h["kord.dlq.offset"])
			require.Contains(t, h["kord.dlq.error"], "invalid character")
			require.False(t, seen[string(r.Value)], "duplicate dead letter %q", r.Value)
			seen[string(r.Value)] = true
		}
		var counted int64
		for _, j := range jobs {
			counted += j.DeadLetters()
		}
		require.GreaterOrEqual(t, counted, int64(nBad), "every dead letter counted (again when re-read after a crash)")
		require.Equal(t, 22, nBad)
	})
}

// TestKafkaSinkTopicLimit: an output topic whose max.message.bytes is
// below the producer's message.max.bytes: a record the broker would refuse
// (and so fail every transaction carrying it) is refused when produced and
// goes to the dead-letter topic as a stand-in; the rest commits.
func TestKafkaSinkTopicLimit(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		in := c.CreateTopic(t, 1, nil)
		out := c.CreateTopic(t, 1, map[string]string{"max.message.bytes": "20000"})
		dlq := c.CreateTopic(t, 1, nil)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		sink := kafkaio.NewSink(client(c), out, bigSerde{"big", strings.Repeat("x", 50_000)}, bigKey("big"), kafkaio.DeadLetterTopic(dlq)).(*kafkaio.Sink[string])
		require.NoError(t, sink.Reset(ctx, sinkInfo(t, checkpoint.ExactlyOnce, in)))
		defer sink.Close()
		_, err := sink.Recorded(ctx)
		require.NoError(t, err)
		require.NoError(t, sink.Commit(ctx, checkpoint.Ref{Run: "r", ID: 0}, []checkpoint.PartitionOffset{{Topic: in, Partition: 0, Offset: 0}}))
		for _, v := range []string{"before", "big", "after"} {
			require.NoError(t, sink.Write(ctx, 1, v))
		}
		require.NoError(t, sink.Commit(ctx, checkpoint.Ref{Run: "r", ID: 1}, []checkpoint.PartitionOffset{{Topic: in, Partition: 0, Offset: 3}}))
		var got []string
		for _, r := range c.ReadAll(t, out, 3, true, 5*time.Second) {
			got = append(got, string(r.Value))
		}
		require.Equal(t, []string{"before", "after"}, got)
		dead := c.ReadAll(t, dlq, 2, true, 5*time.Second)
		require.Len(t, dead, 1)
		require.Equal(t, "big-key", string(dead[0].Key))
	})
}

// TestKafkaSinkTooLarge: an output record larger than message.max.bytes
// fails the write naming its key when the sink has no dead-letter topic
// (and the sink then refuses to commit: the transaction lacks the record),
// and with one leaves a stand-in (key, size, error) in the dead-letter
// topic in the same transaction while the other records commit.
func TestKafkaSinkTooLarge(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		in := c.CreateTopic(t, 1, nil)
		out := c.CreateTopic(t, 1, nil)
		dlq := c.CreateTopic(t, 1, nil)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		huge := string(make([]byte, 2_000_000))
		for _, deadLetters := range []bool{false, true} {
			var opts []kafkaio.Opt
			if deadLetters {
				opts = append(opts, kafkaio.DeadLetterTopic(dlq))
			}
			sink := kafkaio.NewSink(client(c), out, bigSerde{"huge", huge}, append([]kafkaio.Opt{bigKey("huge")}, opts...)...).(*kafkaio.Sink[string])
			require.NoError(t, sink.Reset(ctx, sinkInfo(t, checkpoint.ExactlyOnce, in)))
			_, err := sink.Recorded(ctx)
			require.NoError(t, err)
			require.NoError(t, sink.Commit(ctx, checkpoint.Ref{Run: "r", ID: 0}, []checkpoint.PartitionOffset{{Topic: in, Partition: 0, Offset: 0}}))
			require.NoError(t, sink.Write(ctx, 1, "before"))
			err = sink.Write(ctx, 1, "huge")
			if !deadLetters {
				require.ErrorIs(t, err, producer.ErrRecordTooLarge)
				require.Contains(t, err.Error(), "big-key")
				require.Contains(t, err.Error(), out)
				require.Error(t, sink.Commit(ctx, checkpoint.Ref{Run: "r", ID: 1}, []checkpoint.PartitionOffset{{Topic: in, Partition: 0, Offset: 3}}),
					"a transaction without the refused record must not commit")
				if err := sink.Close(); err != nil {
					t.Logf("close after the refused record: %v", err)
				}
				continue
			}
			require.NoError(t, err)
			require.NoError(t, sink.Write(ctx, 1, "after"))
			require.NoError(t, sink.Commit(ctx, checkpoint.Ref{Run: "r", ID: 1}, []checkpoint.PartitionOffset{{Topic: in, Partition: 0, Offset: 3}}))
			require.NoError(t, sink.Close())
			require.EqualValues(t, 1, sink.TooLarge())
		}
		recs := c.ReadAll(t, out, 3, true, 5*time.Second)
		var got []string
		for _, r := range recs {
			got = append(got, string(r.Value))
		}
		require.Equal(t, []string{"before", "after"}, got)
		dead := c.ReadAll(t, dlq, 2, true, 5*time.Second)
		require.Len(t, dead, 1)
		require.Equal(t, "big-key", string(dead[0].Key))
		h := map[string]string{}
		for _, x := range dead[0].Headers {
			h[x.Key] = string(x.Value)
		}
		require.Equal(t, out, h["kord.dlq.topic"])
		require.Equal(t, "2000007", h["kord.dlq.size"])
	})
}

// TestKafkaStartFromLatest: a fresh job with StartFrom = consumer.Latest
// records the end of the log as checkpoint 0 and processes only what
// arrives after it.
func TestKafkaStartFromLatest(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		f := newFixture(t, c, 3, 50)
		f.fill(1_000) // before the start: never processed
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		var commits atomic.Int64
		j, _, sink := f.build(func(s *jobSpec) {
			s.byPartition = false
			s.srcOpts = []kafkaio.Opt{kafkaio.StartFrom(consumer.Latest)}
		})
		runCtx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			done <- j.Run(failpoint.WithHook(runCtx, func(p string) error {
				if p == failpoint.AfterMarker {
					commits.Add(1)
				}
				return nil
			}))
		}()
		require.Eventually(t, func() bool { return commits.Load() >= 1 }, time.Minute, 10*time.Millisecond)

		p, err := producer.New(serde.String(), serde.JSON[event](), producer.Brokers(c.Brokers))
		require.NoError(t, err)
		const late = 500
		for i := 0; i < late; i++ {
			u := fmt.Sprintf("late-%02d", i%25)
			require.NoError(t, p.Produce(ctx, producer.Record[string, event]{Topic: f.in, Key: u, Value: event{UUID: u, Seq: int64(i / 25)}}, nil))
		}
		require.NoError(t, p.Flush(ctx))
		require.NoError(t, p.Close())
		recs := c.ReadAll(t, f.out, late, true, time.Minute)
		stop()
		require.NoError(t, <-done)
		require.NoError(t, sink.Close())
		c.ReadExactly(t, f.out, late)
		for _, r := range recs {
			require.True(t, strings.HasPrefix(string(r.Key), "late-"), "result for %s, written before the start", r.Key)
		}
	})
}

// TestKafkaPartitionDiscovery: partitions added to the input while a KeyBy
// job runs are found, read from their beginning and recorded in the next
// checkpoints: across a crash after the growth, every event's result is
// there exactly once. In partition mode the growth fails the job with an
// error naming the topic.
func TestKafkaPartitionDiscovery(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		f := newFixture(t, c, 2, 100)
		f.fill(2_000)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		discovering := func(s *jobSpec) {
			s.byPartition = false
			s.opts = []keyed.Opt{keyed.PartitionDiscovery(100 * time.Millisecond)}
		}
		j, _, sink := f.build(discovering)
		done := make(chan error, 1)
		go func() { done <- j.Run(failpoint.WithHook(ctx, crashAt(failpoint.AfterCommit, 15))) }()
		f.c.ReadAll(t, f.out, f.total(), true, time.Minute)

		c.AddPartitions(t, f.in, 5)
		f.parts = 2 // the output keeps its 2 partitions
		p, err := producer.New(serde.String(), serde.JSON[event](), producer.Brokers(c.Brokers))
		require.NoError(t, err)
		more := map[int32]int{}
		for i := 0; i < 1_000; i++ {
			u := fmt.Sprintf("new-%03d", i%100)
			d, err := p.ProduceSync(ctx, producer.Record[string, event]{Topic: f.in, Key: u, Value: f.next(u, true)})
			require.NoError(t, err)
			more[d.Partition]++
		}
		require.NoError(t, p.Close())
		require.Greater(t, more[2]+more[3]+more[4], 0, "some events on the new partitions")
		require.ErrorIs(t, <-done, failpoint.ErrCrashed, "the job crashes after its 15th commit")
		require.NoError(t, sink.Close())

		j, _, sink = f.build(discovering)
		f.runUntil(ctx, j, sink)
		f.verify()

		// Partition mode cannot follow a growth.
		g := newFixture(t, c, 2, 10)
		g.fill(100)
		j, _, sink = g.build(func(s *jobSpec) { s.opts = []keyed.Opt{keyed.PartitionDiscovery(100 * time.Millisecond)} })
		go func() { done <- j.Run(ctx) }()
		g.c.ReadAll(t, g.out, g.total(), true, time.Minute)
		c.AddPartitions(t, g.in, 3)
		select {
		case err := <-done:
			require.ErrorContains(t, err, g.in)
			require.ErrorContains(t, err, "grew from 2 to 3 partitions")
		case <-time.After(time.Minute):
			t.Fatal("partition mode did not fail on a partition count change")
		}
		_ = sink.Close()
	})
}

// TestKafkaAtLeastOnce: the engine in at-least-once mode with the Kafka
// sink's at-least-once delivery (write at once, flush and commit offsets on
// each checkpoint), crashed at checkpoint steps: every event has a result
// (duplicates allowed), and every result's count matches its sequence
// number, since state and offsets are restored together.
func TestKafkaAtLeastOnce(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		f := newFixture(t, c, 4, 200)
		f.fill(5_000)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		// The first crash comes before the first checkpoint commits, once
		// some output is written (the tasks run on while the hook waits):
		// the restart writes it again.
		afterOutput := func(p string) error {
			if p != failpoint.BeforeCommit {
				return nil
			}
			if len(c.ReadAll(t, f.out, 1, false, 30*time.Second)) == 0 {
				return nil // no crash: the test then fails on the missing ErrCrashed
			}
			return fmt.Errorf("injected crash")
		}
		atLeastOnce := func(s *jobSpec) { s.byPartition, s.mode = false, checkpoint.AtLeastOnce }
		_, sinks := f.incarnations(ctx, atLeastOnce, []failpoint.Hook{afterOutput, crashAt(failpoint.AfterSnapshots, 1), crashAt(failpoint.AfterCommit, 2)},
			func(sink *kafkaio.Sink[result]) {
				require.Eventually(t, func() bool {
					rec, err := sink.Recorded(ctx)
					return err == nil && rec != nil && committedAll(t, c, f)
				}, 2*time.Minute, 200*time.Millisecond)
			})
		for _, s := range sinks {
			require.NoError(t, s.Close())
		}
		recs := c.ReadAll(t, f.out, 1<<30, false, 5*time.Second)
		seen := map[string]map[int64]bool{}
		for _, rec := range recs {
			var r result
			require.NoError(t, json.Unmarshal(rec.Value, &r))
			require.Equal(t, r.Seq+1, r.Count, "key %s seq %d: state and offsets restored together", r.UUID, r.Seq)
			if seen[r.UUID] == nil {
				seen[r.UUID] = map[int64]bool{}
			}
			seen[r.UUID][r.Seq] = true
		}
		for u, n := range f.want {
			for s := int64(0); s < n; s++ {
				require.True(t, seen[u][s], "key %s seq %d: no result (lost)", u, s)
			}
		}
		t.Logf("%d results for %d events", len(recs), f.total())
		require.Greater(t, len(recs), f.total(), "the crash before the first commit replays output (else this test did not exercise a replay)")
	})
}

// committedAll reports whether the fixture's commit group holds the end
// of every input partition.
func committedAll(t *testing.T, c *kafkatest.Cluster, f *fixture) bool {
	src, err := consumer.New(consumer.Brokers(c.Brokers))
	require.NoError(t, err)
	defer src.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	parts, err := src.Partitions(ctx, f.in)
	require.NoError(t, err)
	tps := make([]admin.TopicPartition, len(parts))
	for i, p := range parts {
		tps[i] = admin.TopicPartition{Topic: f.in, Partition: p}
	}
	a, err := admin.New(admin.Brokers(c.Brokers))
	require.NoError(t, err)
	defer a.Close()
	got, err := a.GroupOffsets(ctx, kafkaio.CommitGroup(f.name), tps)
	if err != nil {
		return false
	}
	for _, g := range got {
		_, end, err := src.Watermarks(ctx, consumer.TopicPartition{Topic: g.Topic, Partition: g.Partition})
		if err != nil || g.Offset != end {
			return false
		}
	}
	return true
}

// TestKafkaSideOutput: results routed to a side topic (TopicOf) commit in
// the same transactions as the main output: across crashes after and
// before a commit, each event's result is in exactly one of the two topics,
// the one its route names, exactly once.
func TestKafkaSideOutput(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		f := newFixture(t, c, 3, 100)
		f.fill(3_000)
		side := c.CreateTopic(t, 3, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		toSide := func(r result) bool { return r.Seq%5 == 0 }
		nSide := 0
		for _, n := range f.want {
			nSide += int((n + 4) / 5) // seq 0, 5, 10, ... < n
		}
		route := func(r result) string {
			if toSide(r) {
				return side
			}
			return ""
		}
		_, sinks := f.incarnations(ctx, func(s *jobSpec) {
			s.byPartition = false
			s.sinkOpts = []kafkaio.Opt{kafkaio.SideOutput(route, side)}
		}, []failpoint.Hook{crashAt(failpoint.AfterCommit, 2), crashAt(failpoint.BeforeCommit, 1)},
			func(*kafkaio.Sink[result]) {
				f.c.ReadAll(t, f.out, f.total()-nSide, true, 2*time.Minute)
				f.c.ReadAll(t, side, nSide, true, time.Minute)
			})
		require.NoError(t, sinks[len(sinks)-1].Close())
		seen := map[string]bool{}
		for _, topic := range []string{f.out, side} {
			want := f.total() - nSide
			if topic == side {
				want = nSide
			}
			// Not a 3-second read for one more than want: one came back
			// with 174 of 641 under CI's load.
			recs := f.c.ReadExactly(t, topic, want)
			for _, rec := range recs {
				var r result
				require.NoError(t, json.Unmarshal(rec.Value, &r))
				require.Equal(t, toSide(r), topic == side, "%s seq %d in %s", r.UUID, r.Seq, topic)
				require.Equal(t, r.Seq+1, r.Count)
				k := fmt.Sprintf("%s/%d", r.UUID, r.Seq)
				require.False(t, seen[k], "%s twice", k)
				seen[k] = true
			}
		}
		require.Len(t, seen, f.total())
	})
}

// slowCommits holds each commit back by 50 ms before hook sees it, so
// that the sink tasks write the next epochs' output meanwhile: into the
// epoch buffer, never into the transaction being committed.
func slowCommits(hook failpoint.Hook) failpoint.Hook {
	return func(p string) error {
		if p == failpoint.BeforeCommit {
			time.Sleep(50 * time.Millisecond)
		}
		return hook(p)
	}
}

// TestKafkaOutput: a second sink (kafkaio.Output) writes a second stream
// in the first sink's transactions, through crashes before and after a
// commit: both topics hold each record once, and a read_committed reader
// sees an echo exactly for each even result. A second NewSink on another
// cluster is refused, naming both clusters.
func TestKafkaOutput(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		f := newFixture(t, c, 3, 100)
		f.fill(500)
		echoes := c.CreateTopic(t, 2, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		// Input arrives while the job runs, so that its checkpoints carry
		// output and the epoch buffer holds the next epochs' during a
		// commit.
		produced := f.produceInBackground(4_000, 2_000, 2*time.Minute)
		nEven := 0
		_, sinks := f.incarnations(ctx, func(s *jobSpec) { s.echo = echoes },
			[]failpoint.Hook{slowCommits(crashAt(failpoint.AfterCommit, 3)), slowCommits(crashAt(failpoint.BeforeCommit, 2))},
			func(*kafkaio.Sink[result]) {
				require.NoError(t, <-produced)
				for _, n := range f.want {
					nEven += int((n + 1) / 2) // seq 0, 2, 4, ... < n
				}
				f.c.ReadAll(t, f.out, f.total(), true, 2*time.Minute)
				f.c.ReadAll(t, echoes, nEven, true, time.Minute)
			})
		require.NoError(t, sinks[len(sinks)-1].Close())
		results := map[string]int64{}
		for _, rec := range f.c.ReadExactly(t, f.out, f.total()) {
			var r result
			require.NoError(t, json.Unmarshal(rec.Value, &r))
			k := fmt.Sprintf("%s/%d", r.UUID, r.Seq)
			_, dup := results[k]
			require.False(t, dup, "result %s twice", k)
			results[k] = r.Count
		}
		seen := map[string]bool{}
		for _, rec := range f.c.ReadExactly(t, echoes, nEven) {
			var e echo
			require.NoError(t, json.Unmarshal(rec.Value, &e))
			require.False(t, seen[e.Of], "echo %s twice", e.Of)
			seen[e.Of] = true
			n, ok := results[e.Of]
			require.True(t, ok, "echo %s of no result", e.Of)
			require.Equal(t, n, e.Count, "echo %s", e.Of)
		}
		require.Len(t, seen, nEven)
	})
}

// TestKafkaSinkAtLeastOnceFlushes: the at-least-once sink commits a
// checkpoint's offsets only once everything written before is delivered:
// with linger.ms at 30 s, the records must be readable as soon as Commit
// returns, or a crash after the commit would lose them.
func TestKafkaSinkAtLeastOnceFlushes(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		ctx, in, out, sink := stringSink(t, c, checkpoint.AtLeastOnce, kafkaio.Set("linger.ms", "30000"))
		for i := 0; i < 100; i++ {
			require.NoError(t, sink.Write(ctx, 1, strconv.Itoa(i)))
		}
		require.NoError(t, sink.Commit(ctx, checkpoint.Ref{Run: "r", ID: 1}, []checkpoint.PartitionOffset{{Topic: in, Partition: 0, Offset: 100}}))
		require.Len(t, c.ReadAll(t, out, 100, false, 3*time.Second), 100, "records not delivered when their offsets were committed")
		rec, err := sink.Recorded(ctx)
		require.NoError(t, err)
		require.Equal(t, checkpoint.Ref{Run: "r", ID: 1}, rec.Ref)
	})
}

// TestKafkaBounded: a Bounded source ends where the topic ended when the
// job started: Run commits a final checkpoint and returns nil by itself.
// Records written meanwhile wait for the next run, which reads from the
// committed checkpoint to the new end. The output is exactly once.
func TestKafkaBounded(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		f := newFixture(t, c, 4, 100)
		f.fill(3_000)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		bounded := func(s *jobSpec) { s.srcOpts = []kafkaio.Opt{kafkaio.Bounded()} }
		j, _, _ := f.build(bounded)
		require.NoError(t, j.Run(ctx), "a bounded job returns nil at its end")
		f.c.ReadExactly(t, f.out, f.total())
		f.fill(1_000)
		j, _, _ = f.build(bounded)
		require.NoError(t, j.Run(ctx))
		f.verify()
	})
}
