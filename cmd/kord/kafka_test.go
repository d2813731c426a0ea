package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"gocloud.dev/blob"

	"github.com/kordproject/kord/checkpoint"
	"github.com/kordproject/kord/checkpoint/blobstore"
	"github.com/kordproject/kord/internal/rig/kafkatest"
	"github.com/kordproject/kord/internal/rig/testjob"
	"github.com/kordproject/kord/kafkaio"
	"github.com/kordproject/kord/keyed"
	"github.com/kordproject/kord/producer"
	"github.com/kordproject/kord/serde"
)

// kafkaJob is the counting job on Kafka: in to out, its checkpoints in
// storage (keyed.Dir or keyed.CheckpointStorage).
func kafkaJob(t *testing.T, c *kafkatest.Cluster, name, in, out string, storage keyed.Opt) *keyed.Job {
	t.Helper()
	cl, err := kafkaio.NewClient(kafkaio.Brokers(strings.Split(c.Brokers, ",")...))
	require.NoError(t, err)
	j := keyed.NewJob(name, storage, keyed.CheckpointInterval(150*time.Millisecond))
	s := keyed.FromSource(j, "events", 1, kafkaio.NewSource(cl, in, serde.JSON[testjob.Event]()))
	o := keyed.Process(keyed.KeyByString("uuid", func(e testjob.Event) string { return e.UUID }, s), "count", 2,
		func() keyed.Operator[testjob.Event, testjob.Result] { return &testjob.Counter{} })
	keyed.ToSink(o, "results", kafkaio.NewSink(cl, out, serde.JSON[testjob.Result]()))
	return j
}

func produce(t *testing.T, kc *kgo.Client, topic string, n int, seq map[string]int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	recs := make([]*kgo.Record, n)
	for i := range recs {
		u := fmt.Sprintf("user-%d", i%users)
		v, err := json.Marshal(testjob.Event{UUID: u, Seq: seq[u]})
		require.NoError(t, err)
		seq[u]++
		recs[i] = &kgo.Record{Topic: topic, Key: []byte(u), Value: v}
	}
	require.NoError(t, kc.ProduceSync(ctx, recs...).FirstErr())
}

type commitOut struct {
	Checkpoint string                       `json:"checkpoint"`
	Lag        int64                        `json:"lag"`
	Partitions []kafkaio.CommittedPartition `json:"partitions"`
}

// TestCommit, on kfake and the real broker: kord commit shows the
// checkpoint Kafka's commit group records for a job that ran (the one the
// local marker names), every input partition with lag 0; seven records
// produced later are a lag of 7. kord checkpoints takes the committed
// checkpoint from Kafka when given the job and the cluster.
func TestCommit(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		in, out := c.CreateTopic(t, 3, nil), c.CreateTopic(t, 3, nil)
		name := strings.ReplaceAll(kafkatest.TopicName(t), "/", ".")
		kc, seq := c.Client(t), map[string]int64{}
		produce(t, kc, in, 120, seq)
		dir := t.TempDir()
		j := kafkaJob(t, c, name, in, out, keyed.Dir(dir))
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- j.Run(ctx) }()
		var co commitOut
		require.Eventually(t, func() bool {
			co = commitOut{}
			kordJSON(t, &co, "commit", "--job", name, "--brokers", c.Brokers)
			return co.Checkpoint != "" && co.Lag == 0 && len(co.Partitions) == 3
		}, time.Minute, 50*time.Millisecond)
		cancel()
		require.NoError(t, <-done)

		kordJSON(t, &co, "commit", "--job", name, "--brokers", c.Brokers)
		marker, ok, err := checkpoint.ReadCommitted(context.Background(), mustStore(t, dir))
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, refText(marker), co.Checkpoint)
		require.Zero(t, co.Lag)
		for _, p := range co.Partitions {
			require.Equal(t, in, p.Topic)
			require.Equal(t, p.End, p.Offset)
		}
		var l listing
		kordJSON(t, &l, "checkpoints", "--checkpoints", dir, "--job", name, "--brokers", c.Brokers)
		require.Contains(t, l.CommittedBy, "Kafka's commit group "+kafkaio.CommitGroup(name))
		committed := l.with(statusCommitted)
		require.Len(t, committed, 1)
		require.Equal(t, co.Checkpoint, committed[0].Ref)
		require.NotEmpty(t, committed[0].Sources[0].Cluster, "the checkpoint records the cluster's id")

		produce(t, kc, in, 7, seq)
		kordJSON(t, &co, "commit", "--job", name, "--brokers", c.Brokers)
		require.Equal(t, int64(7), co.Lag)

		code, _, errOut := kord(t, "", "commit", "--job", "never-ran."+name, "--brokers", c.Brokers)
		require.Equal(t, 0, code, errOut)
	})
}

// TestResetRunningJob, on kfake and the real broker: kord reset against a
// job that runs with its checkpoints in a bucket (no lock to refuse it).
// It fences the job, which stops at its next commit with a fenced
// producer, not restarting; it deletes the commit record and every
// checkpoint, the one the job had in flight included. Run again, the job
// starts over from the input's start with no state: its counter, which
// refuses an event out of order, counts every user from 0 again, and its
// output of that run is exactly the input's.
func TestResetRunningJob(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		in, out := c.CreateTopic(t, 3, nil), c.CreateTopic(t, 3, nil)
		name := strings.ReplaceAll(kafkatest.TopicName(t), "/", ".")
		kc, seq := c.Client(t), map[string]int64{}
		produce(t, kc, in, 100, seq)
		url := "file://" + t.TempDir()
		bucket, err := blob.OpenBucket(context.Background(), url)
		require.NoError(t, err)
		defer bucket.Close()
		storage := keyed.CheckpointStorage(blobstore.New(bucket, name+"/"))
		j := kafkaJob(t, c, name, in, out, storage)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		done := make(chan error, 1)
		go func() { done <- j.Run(ctx) }()
		require.Eventually(t, func() bool { return j.Status().LastCheckpoint >= 2 }, time.Minute, 20*time.Millisecond)

		code, _, errOut := kord(t, "", "reset", "--checkpoints", url, "--prefix", name+"/", "--job", name, "--brokers", c.Brokers)
		require.Equal(t, 1, code, "no confirmation")
		require.Contains(t, errOut, "not confirmed")
		code, out2, errOut := kord(t, name+"\n", "reset", "--checkpoints", url, "--prefix", name+"/", "--job", name, "--brokers", c.Brokers)
		require.Equal(t, 0, code, out2+errOut)
		require.Contains(t, out2, "job "+name+" forgotten")

		select {
		case err := <-done:
			require.Error(t, err)
			require.True(t, errors.Is(err, producer.ErrFenced), "the job stops fenced: %v", err)
		case <-time.After(time.Minute):
			t.Fatal("the fenced job did not stop")
		}
		var co commitOut
		kordJSON(t, &co, "commit", "--job", name, "--brokers", c.Brokers)
		require.Empty(t, co.Checkpoint, "no commit record left")
		var l listing
		kordJSON(t, &l, "checkpoints", "--checkpoints", url, "--prefix", name+"/")
		require.Empty(t, l.Checkpoints, "no checkpoint left, the fenced job's last included")

		// Started again (writing to another topic): from the start, with
		// no state.
		again := c.CreateTopic(t, 3, nil)
		j2 := kafkaJob(t, c, name, in, again, storage)
		ctx2, cancel2 := context.WithCancel(context.Background())
		done2 := make(chan error, 1)
		go func() { done2 <- j2.Run(ctx2) }()
		recs := c.ReadAll(t, again, 100, true, time.Minute)
		cancel2()
		require.NoError(t, <-done2)
		counts := map[string]map[int64]bool{}
		for _, r := range recs {
			var res testjob.Result
			require.NoError(t, json.Unmarshal(r.Value, &res))
			if counts[res.UUID] == nil {
				counts[res.UUID] = map[int64]bool{}
			}
			require.False(t, counts[res.UUID][res.Count], "twice: %s", r.Value)
			counts[res.UUID][res.Count] = true
		}
		for u, cs := range counts {
			for n := int64(1); n <= 100/users; n++ {
				require.True(t, cs[n], "%s: counted from 0 again, so its counts are 1 to %d: %v", u, 100/users, cs)
			}
		}
		require.Len(t, counts, users)
	})
}
