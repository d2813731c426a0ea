package kafkaio_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kordproject/kord/checkpoint"
	"github.com/kordproject/kord/consumer"
	"github.com/kordproject/kord/internal/rig/kafkatest"
	"github.com/kordproject/kord/kafkaio"
	"github.com/kordproject/kord/keyed"
	"github.com/kordproject/kord/keyed/connector"
	"github.com/kordproject/kord/producer"
	"github.com/kordproject/kord/serde"
)

// TestOptionsMisplaced: kafkaio has one option type; an option given to
// what it does not configure is an error naming the option and what it
// was given to, never ignored.
func TestOptionsMisplaced(t *testing.T) {
	_, err := kafkaio.NewClient(kafkaio.Brokers("b:9092"), kafkaio.DeadLetterTopic("dlq"), kafkaio.Bounded())
	require.ErrorContains(t, err, "NewClient: option DeadLetterTopic does not configure a Client")
	require.ErrorContains(t, err, "NewClient: option Bounded does not configure a Client")

	c := mustClient(kafkaio.Brokers("b:9092"))
	src := kafkaio.NewSource(c, "in", serde.String(), kafkaio.Key(func(s string) string { return s }, serde.String()), kafkaio.Brokers("x:1"))
	err = src.(interface{ Validate() error }).Validate()
	require.ErrorContains(t, err, `source of topic "in": option Key does not configure a source`)
	require.ErrorContains(t, err, `source of topic "in": option Brokers does not configure a source`)
	require.ErrorIs(t, err, keyed.ErrPermanent)

	sink := kafkaio.NewSink(c, "out", serde.String(), kafkaio.StartFrom(consumer.Earliest), kafkaio.Bounded()).(*kafkaio.Sink[string])
	info := connector.SinkInfo{Job: "j", Inputs: []string{"in"}, Mode: checkpoint.ExactlyOnce, TransactionTimeout: time.Minute, CommitTimeout: 10 * time.Second}
	err = sink.ValidateSink(info)
	require.ErrorContains(t, err, `sink to topic "out": option StartFrom does not configure a sink`)
	require.ErrorContains(t, err, `sink to topic "out": option Bounded does not configure a sink`)

	// A Key of another type than the sink's records.
	sink = kafkaio.NewSink(c, "out", serde.String(), kafkaio.Key(func(n int) string { return "" }, serde.String())).(*kafkaio.Sink[string])
	require.ErrorContains(t, sink.ValidateSink(info), `sink to topic "out": its Key takes another type than the sink's string`)

	// The options that configure every part are taken by each.
	_, err = kafkaio.NewClient(kafkaio.Brokers("b:9092"), kafkaio.Set("client.id", "x"), kafkaio.Logger(nil))
	require.NoError(t, err)
	sink = kafkaio.NewSink(c, "out", serde.String(), kafkaio.Set("linger.ms", "5"), kafkaio.Logger(nil)).(*kafkaio.Sink[string])
	require.NoError(t, sink.ValidateSink(info))

	// An instance id Kafka would refuse as a group.instance.id.
	scaled := info
	scaled.Instance = "pod 7"
	require.ErrorContains(t, sink.ValidateSink(scaled), `sink to topic "out": instance id "pod 7" (keyed.Instance)`)
	scaled.Instance = "pod-7"
	require.NoError(t, sink.ValidateSink(scaled))
}

// TestOutputRefusals: a job's further Kafka sink must be an Output of
// its first: a second NewSink on another cluster is refused naming both
// clusters, one on the same cluster is refused as committing apart, and
// an Output checks its options and its first sink.
func TestOutputRefusals(t *testing.T) {
	build := func(second func(first connector.Sink[string]) connector.Sink[string]) error {
		j := keyed.NewJob("outputs", keyed.Dir(t.TempDir()))
		src := keyed.NewMemorySource[string]("in", 1, true)
		out := keyed.ProcessFunc(keyed.KeyByString("s", func(s string) string { return s }, keyed.FromSource(j, "in", 1, connector.Source[string](src))),
			"op", 1, func(k string, s string, out *keyed.Collector[string]) error { out.Emit(s); return nil })
		first := kafkaio.NewSink(mustClient(kafkaio.Brokers("a:9092")), "out", serde.String())
		keyed.ToSink(out, "first", first)
		keyed.ToSink(out, "second", second(first))
		return j.Validate()
	}
	err := build(func(connector.Sink[string]) connector.Sink[string] {
		return kafkaio.NewSink(mustClient(kafkaio.Brokers("b:9092")), "out2", serde.String())
	})
	require.ErrorContains(t, err, `sinks "first" and "second" write to different clusters (a:9092 and b:9092)`)
	err = build(func(connector.Sink[string]) connector.Sink[string] {
		return kafkaio.NewSink(mustClient(kafkaio.Brokers("a:9092")), "out2", serde.String())
	})
	require.ErrorContains(t, err, `sinks "first" and "second" would commit apart`)
	err = build(func(first connector.Sink[string]) connector.Sink[string] {
		return kafkaio.Output(first, "out2", serde.String(), kafkaio.Bounded(), kafkaio.Key(func(n int) string { return "" }, serde.String()))
	})
	require.ErrorContains(t, err, `Output to topic "out2": option Bounded does not configure an Output`)
	require.ErrorContains(t, err, `Output to topic "out2": its Key takes another type than the Output's string`)
	require.NoError(t, build(func(first connector.Sink[string]) connector.Sink[string] {
		return kafkaio.Output(first, "out2", serde.String(), kafkaio.Key(func(s string) string { return s }, serde.String()))
	}))
	err = build(func(connector.Sink[string]) connector.Sink[string] {
		return kafkaio.Output(keyed.NewMemorySink[string](), "out2", serde.String())
	})
	require.ErrorContains(t, err, `Output to topic "out2": its first sink is not one of kafkaio.NewSink`)
}

// TestSinkNullKey: a sink without Key writes null keys (no key serde
// needed), and with Key writes what its serde encodes: a string key's
// bytes (shared with the string), the empty string an empty key.
func TestSinkNullKey(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		in, out := c.CreateTopic(t, 1, nil), c.CreateTopic(t, 1, nil)
		for i, opts := range [][]kafkaio.Opt{nil, {kafkaio.Key(func(v string) int64 { return int64(len(v)) }, serde.Int64())},
			{kafkaio.Key(func(v string) string { return v[:1] }, serde.String())}, {kafkaio.Key(func(string) string { return "" }, serde.String())}} {
			sink := kafkaio.NewSink(client(c), out, serde.String(), opts...).(*kafkaio.Sink[string])
			info := connector.SinkInfo{Job: strings.ReplaceAll(kafkatest.TopicName(t), "/", "."), Inputs: []string{in}, Mode: checkpoint.ExactlyOnce,
				TransactionTimeout: time.Minute, CommitTimeout: 30 * time.Second}
			require.NoError(t, sink.Reset(ctx, info))
			require.NoError(t, sink.Write(ctx, 1, "abc"))
			require.NoError(t, sink.Commit(ctx, checkpoint.Ref{Run: "r", ID: uint64(i + 1)}, []checkpoint.PartitionOffset{{Topic: in, Partition: 0, Offset: int64(i + 1)}}))
			require.NoError(t, sink.Close())
		}
		recs := c.ReadAll(t, out, 4, true, 10*time.Second)
		require.Len(t, recs, 4)
		require.Nil(t, recs[0].Key, "no Key: a null key")
		require.Equal(t, []byte{0, 0, 0, 0, 0, 0, 0, 3}, recs[1].Key)
		require.Equal(t, "abc", string(recs[1].Value))
		require.Equal(t, "a", string(recs[2].Key))
		require.NotNil(t, recs[3].Key, "the empty string is an empty key, not a null one")
		require.Empty(t, recs[3].Key)
	})
}

// TestErrorChains: a job's error names each layer once, in order (the
// job, its part, the Kafka edge, the client below), and says which name
// is a job and which a topic; errors.Is still finds the class.
func TestErrorChains(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		in, out := c.CreateTopic(t, 1, nil), c.CreateTopic(t, 1, nil)
		run := func(in, out string, opts ...kafkaio.Opt) error {
			ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
			defer cancel()
			j := keyed.NewJob("chains", keyed.Dir(t.TempDir()), keyed.RestartStrategy(keyed.FixedDelay(0, 0)))
			s := keyed.FromSource(j, "hits", 1, kafkaio.NewSource(client(c), in, serde.String()))
			o := keyed.ProcessFunc(keyed.ByPartition(s), "copy", 1, func(_ []byte, v string, out *keyed.Collector[string]) error {
				out.Emit(v)
				return nil
			})
			keyed.ToSink(o, "counts", kafkaio.NewSink(client(c), out, serde.String(), opts...))
			return j.Run(ctx)
		}
		once := func(err error, layers ...string) {
			t.Helper()
			for _, l := range []string{"keyed:", "kafkaio:", "admin:", "producer:", "consumer:"} {
				want := 0
				if slices.Contains(layers, l) {
					want = 1
				}
				require.Equal(t, want, strings.Count(err.Error(), l), "%s in %v", l, err)
			}
		}

		err := run(in, out, kafkaio.DeadLetterTopic(in+".dlq"))
		require.ErrorIs(t, err, producer.ErrUnknownTopic)
		require.Regexp(t, `^keyed: job "chains": sink "counts": reset: kafkaio: sink to topic "`+out+`": its dead-letter topic \(brokers [^)]+\): admin: .*unknown topic "`+in+`\.dlq"$`, err.Error())
		once(err, "keyed:", "kafkaio:", "admin:")

		err = run(in, out, kafkaio.Set("transactional.id", "x"))
		require.ErrorIs(t, err, producer.ErrConfig)
		require.ErrorIs(t, err, keyed.ErrPermanent)
		require.Regexp(t, `^keyed: job "chains": sink "counts": kafkaio: sink to topic "`+out+`": producer setting transactional.id is derived from the job name`, err.Error())
		once(err, "keyed:", "kafkaio:")

		err = run(in+".missing", out)
		require.ErrorIs(t, err, consumer.ErrUnknownTopic)
		require.Regexp(t, `^keyed: job "chains": source "hits": `, err.Error())
		require.Contains(t, err.Error(), `topic "`+in+`.missing": unknown topic`)
		require.Equal(t, 1, strings.Count(err.Error(), in+".missing"), "the topic named once: %v", err)
		once(err, "keyed:", "admin:")
	})
}
