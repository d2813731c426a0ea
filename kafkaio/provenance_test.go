package kafkaio_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kordproject/kord/checkpoint"
	"github.com/kordproject/kord/internal/rig/kafkatest"
	"github.com/kordproject/kord/kafkaio"
	"github.com/kordproject/kord/keyed"
	"github.com/kordproject/kord/keyed/connector"
	"github.com/kordproject/kord/kordtest"
	"github.com/kordproject/kord/producer"
	"github.com/kordproject/kord/serde"
)

var bounded = func(s *jobSpec) { s.srcOpts = []kafkaio.Opt{kafkaio.Bounded()} }

// provenanceOf reads the cluster id and topic id the job's source reports
// now for topic on brokers.
func provenanceOf(t *testing.T, brokers, topic string) checkpoint.SourceRef {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	src := kafkaio.NewSource(mustClient(kafkaio.Brokers(strings.Split(brokers, ",")...)), topic, serde.Bytes()).(connector.Identified)
	ref, err := src.Provenance(ctx)
	require.NoError(t, err)
	require.NotEmpty(t, ref.Cluster, "the cluster id")
	require.NotEmpty(t, ref.TopicID, "the topic id")
	return ref
}

// TestProvenanceRecreatedTopic: a job's input topic is deleted and created
// again under its name. The restore is refused, naming both topic ids and
// the ways forward, and nothing is written; with keyed.Failover the keyed
// state is kept and the new topic is read from its start, so each key's
// counts go on exactly once.
func TestProvenanceRecreatedTopic(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		f := newFixture(t, c, 4, 100)
		f.fill(2_000)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		j, _, _ := f.build(bounded)
		require.NoError(t, j.Run(ctx))
		before := provenanceOf(t, c.Brokers, f.in)

		c.RecreateTopic(t, f.in, f.parts)
		after := provenanceOf(t, c.Brokers, f.in)
		require.Equal(t, before.Cluster, after.Cluster)
		require.NotEqual(t, before.TopicID, after.TopicID, "a recreated topic has a new id")
		f.fill(1_000) // the keys' sequences go on in the new topic

		j, _, _ = f.build(bounded)
		err := j.Run(ctx)
		require.ErrorIs(t, err, checkpoint.ErrProvenance)
		require.ErrorIs(t, err, keyed.ErrPermanent)
		var pe *checkpoint.ProvenanceError
		require.ErrorAs(t, err, &pe)
		require.False(t, pe.OtherCluster())
		require.Equal(t, before.TopicID, pe.Recorded.TopicID)
		require.Equal(t, after.TopicID, pe.Current.TopicID)
		for _, want := range []string{before.TopicID, after.TopicID, fmt.Sprintf("%q", f.in), "deleted and created again", "Job.Forget", "keyed.Failover()"} {
			require.Contains(t, err.Error(), want)
		}
		require.Len(t, f.c.ReadAll(t, f.out, 2_001, true, 2*time.Second), 2_000, "a refused restore writes nothing")

		// Failover: state kept, the new topic read from its start
		// (StartFrom's default, earliest).
		j, _, _ = f.build(func(s *jobSpec) { bounded(s); s.opts = append(s.opts, keyed.Failover()) })
		require.NoError(t, j.Run(ctx))
		f.verify()

		// The failover's checkpoints record the new topic: more input
		// restores without Failover and reads on.
		f.fill(500)
		j, _, _ = f.build(bounded)
		require.NoError(t, j.Run(ctx))
		f.verify()
	})
}

// TestProvenanceOtherCluster: a job's checkpoints, taken on one cluster,
// meet another cluster with topics of the same names and the same input.
// The restore is refused, naming both cluster ids. On the real broker the
// other cluster is an in-process one.
func TestProvenanceOtherCluster(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		f := newFixture(t, c, 4, 100)
		f.fill(1_000)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		j, _, _ := f.build(bounded)
		require.NoError(t, j.Run(ctx))
		first := provenanceOf(t, c.Brokers, f.in)

		other := kafkatest.Fake(t)
		for _, topic := range []string{f.in, f.out} {
			require.NoError(t, kordtest.CreateTopic(ctx, strings.Split(other.Brokers, ","), topic, f.parts, nil))
		}
		produceTo(t, other.Brokers, f.in, 1_000)
		second := provenanceOf(t, other.Brokers, f.in)
		require.NotEqual(t, first.Cluster, second.Cluster, "every cluster has an id of its own")

		j, _, _ = f.build(func(s *jobSpec) { bounded(s); s.brokers = other.Brokers })
		err := j.Run(ctx)
		require.ErrorIs(t, err, checkpoint.ErrProvenance)
		var pe *checkpoint.ProvenanceError
		require.ErrorAs(t, err, &pe)
		require.True(t, pe.OtherCluster())
		for _, want := range []string{first.Cluster, second.Cluster, "another cluster", "Job.Forget", "keyed.Failover()"} {
			require.Contains(t, err.Error(), want)
		}
		require.Empty(t, other.ReadAll(t, f.out, 1, true, time.Second), "a refused restore writes nothing")
	})
}

// TestProvenanceNewcomer is the newcomer's case: the same job (same name,
// the default checkpoint directory) run on two fresh in-process clusters
// with the same input. The second run used to restore the first's local
// checkpoint, whose offsets were the new topic's end, write nothing and
// return nil. It must not end with no output and no error.
func TestProvenanceNewcomer(t *testing.T) {
	t.Setenv(keyed.EnvStateDir, t.TempDir())
	const topic, job = "access-log", "uri-counts"
	run := func() (error, int) {
		c, err := kordtest.NewCluster(kordtest.Topic(topic, 3), kordtest.Topic(topic+".counts", 3))
		require.NoError(t, err)
		defer c.Close()
		produceTo(t, strings.Join(c.Brokers(), ","), topic, 300)
		client, err := c.Client()
		require.NoError(t, err)
		j := keyed.NewJob(job) // the default directory: keyed.DefaultDir(job)
		src := kafkaio.NewSource(client, topic, serde.JSON[event](), kafkaio.Bounded())
		sink := kafkaio.NewSink(client, topic+".counts", serde.JSON[result](), kafkaio.Key(func(r result) string { return r.UUID }, serde.String()))
		out := keyed.Process(keyed.ByPartition(keyed.FromSource(j, "events", 1, connector.Source[event](src))), "count", 1,
			func() keyed.Operator[event, result] { return &counter{} })
		keyed.ToSink(out, "results", connector.Sink[result](sink))
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		err = j.Run(ctx)
		recs, rerr := kordtest.ReadCommitted(ctx, client, topic+".counts")
		require.NoError(t, rerr)
		return err, len(recs)
	}
	err, n := run()
	require.NoError(t, err)
	require.Equal(t, 300, n)
	err, n = run()
	require.False(t, err == nil && n == 0, "the second run wrote nothing and returned nil")
	require.ErrorIs(t, err, checkpoint.ErrProvenance)
	require.Contains(t, err.Error(), keyed.DefaultDir(job), "the error names the directory to clear")
	entries, rerr := os.ReadDir(keyed.DefaultDir(job))
	require.NoError(t, rerr)
	require.NotEmpty(t, entries, "the first cluster's checkpoints are left alone")
}

// produceTo writes n events with uuid keys, each key's sequence from 0,
// to topic at brokers.
func produceTo(t *testing.T, brokers, topic string, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := producer.New(serde.String(), serde.JSON[event](), producer.Brokers(brokers))
	require.NoError(t, err)
	defer p.Close()
	seq := map[string]int64{}
	for i := 0; i < n; i++ {
		k := fmt.Sprintf("%08x-0000-4000-8000-000000000000", i%37)
		require.NoError(t, p.Produce(ctx, producer.Record[string, event]{Topic: topic, Key: k, Value: event{UUID: k, Seq: seq[k]}}, nil))
		seq[k]++
	}
	require.NoError(t, p.Flush(ctx))
}
