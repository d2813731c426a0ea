package keyed_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kordproject/kord/checkpoint"
	"github.com/kordproject/kord/consumer"
	"github.com/kordproject/kord/internal/kafkatest"
	"github.com/kordproject/kord/keyed"
	"github.com/kordproject/kord/producer"
)

// TestKafkaExactlyOnce runs the keyed counting job from a Kafka topic to a
// Kafka topic through KafkaSource and KafkaSink, crashing it (in process:
// the next incarnation fences the old producer) at each checkpoint step,
// then checks with a read_committed reader that every event's result is
// there exactly once, in per-key order, with counts that match.
func TestKafkaExactlyOnce(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		const parts, n = 6, 20_000
		in := c.CreateTopic(t, parts, nil)
		out := c.CreateTopic(t, parts, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		p, err := producer.New(producer.String(), producer.JSON[event](), producer.Brokers(c.Brokers))
		require.NoError(t, err)
		r := rand.New(rand.NewPCG(2, 3))
		want := map[string]int64{}
		for i := 0; i < n; i++ {
			u := fmt.Sprintf("user-%03d", r.IntN(400))
			require.NoError(t, p.Produce(ctx, producer.Record[string, event]{Topic: in, Key: u, Value: event{UUID: u, Seq: want[u]}}, nil))
			want[u]++
		}
		require.NoError(t, p.Flush(ctx))
		require.NoError(t, p.Close())

		job := kafkatest.TopicName(t)
		dir := t.TempDir()
		interval := 100 * time.Millisecond
		build := func(hook func(string) error, byPartition bool, par int) (*keyed.Job, *keyed.KafkaSink[result]) {
			j := keyed.NewJob("users", keyed.Config{Dir: dir, Checkpoint: checkpoint.Config{Interval: interval}, Hook: hook})
			src := keyed.NewKafkaSource(c.Brokers, in, func(rec consumer.Record) (event, error) {
				var e event
				return e, json.Unmarshal(rec.Value, &e)
			})
			sink := keyed.NewKafkaSink(c.Brokers, out, job, []string{in}, func(r result) ([]byte, []byte, error) {
				b, err := json.Marshal(r)
				return []byte(r.UUID), b, err
			})
			sink.ProducerSettings = map[string]string{"transaction.timeout.ms": keyed.TransactionTimeout(checkpoint.Config{Interval: interval})}
			s := keyed.FromSource(j, "events", par, keyed.Source[event](src))
			var k *keyed.KeyedStream[event]
			if byPartition {
				k = keyed.ByPartition(s)
			} else {
				k = keyed.KeyBy(func(e event) []byte { return []byte(e.UUID) }, s)
			}
			keyed.ToSink(keyed.Process(k, "count", par, func() keyed.Operator[event, result] { return &counter{} }), "results", keyed.Sink[result](sink))
			return j, sink
		}
		for i, point := range []string{checkpoint.FailAfterSnapshots, checkpoint.FailAfterMetadata, checkpoint.FailBeforeCommit,
			checkpoint.FailAfterCommit, checkpoint.FailAfterMarker, checkpoint.FailDuringRestore} {
			nth := 1 + i%3
			if point == checkpoint.FailDuringRestore {
				nth = 1 // hit once per start
			}
			j, sink := build(crashAt(point, nth), true, 1+i%3)
			err := j.Run(ctx)
			require.True(t, errors.Is(err, keyed.ErrCrashed), "crash at %s: %v", point, err)
			_ = sink // abandoned, as by a dead process: the next incarnation fences it
		}
		j, sink := build(nil, true, 2)
		runCtx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- j.Run(runCtx) }()
		recs := c.ReadAll(t, out, n, true, 2*time.Minute)
		stop()
		require.NoError(t, <-done)
		require.NoError(t, sink.Close())
		require.Equal(t, n, len(recs))
		extra := c.ReadAll(t, out, n+1, true, 3*time.Second)
		require.Equal(t, n, len(extra), "read_committed output holds exactly one result per event")
		results := make([]result, len(recs))
		for i, rec := range recs {
			require.NoError(t, json.Unmarshal(rec.Value, &results[i]))
		}
		// Per-key order: the reader returns each partition in order and a
		// key lives in one partition (kord's producer placed it).
		checkOutput(t, results, want)
	})
}

// TestKafkaUnknownTopic: a job whose input topic does not exist fails at
// once with an error naming the topic.
func TestKafkaUnknownTopic(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		out := c.CreateTopic(t, 1, nil)
		missing := kafkatest.TopicName(t) + ".missing"
		j := keyed.NewJob("users", keyed.Config{Dir: t.TempDir()})
		src := keyed.NewKafkaSource(c.Brokers, missing, func(rec consumer.Record) (event, error) { return event{}, nil })
		sink := keyed.NewKafkaSink(c.Brokers, out, kafkatest.TopicName(t), []string{missing}, func(r result) ([]byte, []byte, error) { return nil, nil, nil })
		s := keyed.FromSource(j, "events", 1, keyed.Source[event](src))
		keyed.ToSink(keyed.Process(keyed.ByPartition(s), "count", 1, func() keyed.Operator[event, result] { return &counter{} }), "results", keyed.Sink[result](sink))
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
