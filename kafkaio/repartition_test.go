//go:build kordfailpoints

package kafkaio_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kordproject/kord/internal/rig/kafkatest"
	"github.com/kordproject/kord/internal/rig/syncbuf"
	"github.com/kordproject/kord/kafkaio"
	"github.com/kordproject/kord/keyed"
	"github.com/kordproject/kord/partitioner"
	"github.com/kordproject/kord/serde"
)

// repartitionStage is the name of the tests' repartition stage.
const repartitionStage = "by-uuid"

// startKeyedInstance starts instance id of the fixture's job keyed by a
// field on several processes: the repartition stage (input → the
// repartition topic with repartParts partitions, keyed by uuid) and the
// job proper (the repartition topic by partition → count → output), run
// together (keyed.RunAll).
func (f *fixture) startKeyedInstance(id string, log *syncbuf.Buffer, repartParts int32) *instanceJob {
	ij := &instanceJob{id: id, done: make(chan error, 1)}
	client := mustClient(kafkaio.Brokers(strings.Split(f.c.Brokers, ",")...))
	logger := logTo(log, slog.LevelInfo, nil).With("instance", id)
	session := kafkaio.SessionTimeout(10 * time.Second)
	r := kafkaio.NewRepartition(client, f.name, repartitionStage, kafkaio.NewSource(client, f.in, serde.JSON[event]()),
		func(e event) []byte { return []byte(e.UUID) }, serde.JSON[event](),
		kafkaio.Partitions(repartParts),
		kafkaio.JobOptions(keyed.Instance(id), keyed.Dir(filepath.Join(f.dir, "repartition")), keyed.CheckpointInterval(f.interval), keyed.Logger(logger),
			keyed.CheckpointTimeout(10*time.Second)),
		session)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(f.t, r.CreateTopic(ctx))
	j := keyed.NewJob(f.name, keyed.Instance(id), keyed.Dir(f.dir), keyed.CheckpointInterval(f.interval), keyed.Logger(logger), keyed.CheckpointTimeout(10*time.Second))
	sink := kafkaio.NewSink(client, f.out, serde.JSON[result](), session, byUUID).(*kafkaio.Sink[result])
	s := keyed.FromSource(j, "events", 2, r.Source())
	out := keyed.Process(keyed.ByPartition(s), "count", 2, func() keyed.Operator[event, result] { return &counter{} })
	keyed.ToSink(out, "results", sink)
	ij.j, ij.sink = j, sink
	rctx := ij.runContext(f.t)
	go func() { ij.done <- keyed.RunAll(rctx, r.Job(), j) }()
	return ij
}

// TestScaledRepartition: a job keyed by a field on two processes. The
// input (6 partitions) is keyed by uuid, but the repartition topic has 4,
// so nearly every key's records change partition on the way: the
// exchange is real. The second process joins while input arrives, the
// first stops; both stages hand their partitions over. A read_committed
// reader finds every result exactly once, in per-key order, with counts
// that continue across the moves; the repartition topic holds every event
// once, in the partition Kafka's Java client would choose for its uuid.
func TestScaledRepartition(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		f := newFixture(t, c, 6, 200)
		f.fill(2000)
		prodErr := f.produceInBackground(5000, 600, 3*time.Minute)
		var log syncbuf.Buffer
		a := f.startKeyedInstance("a", &log, 4)
		a.waitCommits(t, 6, &log)
		b := f.startKeyedInstance("b", &log, 4)
		b.waitCommits(t, 6, &log)
		a.end(t, &log)
		require.NoError(t, <-prodErr)
		recs := f.c.ReadAll(t, f.out, f.expected(), true, 2*time.Minute)
		b.end(t, &log)
		require.Equal(t, f.expected(), len(recs), "%s", &log)
		f.verify()

		topic := kafkaio.RepartitionTopic(f.name, repartitionStage)
		moved := 0
		reparted := f.c.ReadAll(t, topic, f.expected(), true, time.Minute)
		seen := map[string]bool{}
		for _, r := range reparted {
			var e event
			require.NoError(t, json.Unmarshal(r.Value, &e))
			require.Equal(t, e.UUID, string(r.Key))
			require.Equal(t, partitioner.KeyPartition(r.Key, 4), r.Partition, "uuid %s: not where Kafka's Java client puts it", e.UUID)
			if partitioner.KeyPartition(r.Key, 4) != partitioner.KeyPartition(r.Key, 6) {
				moved++
			}
			id := e.UUID + "/" + strconv.FormatInt(e.Seq, 10)
			require.False(t, seen[id], "event %s twice in the repartition topic", id)
			seen[id] = true
		}
		require.Len(t, seen, f.expected())
		require.Greater(t, moved, len(reparted)/2, "most records change partition")
	})
}

// waitCommits waits for the instance's n-th commit, failing at once with
// its error if it ends first.
func (ij *instanceJob) waitCommits(t *testing.T, n int64, log *syncbuf.Buffer) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for ij.commits.Load() < n {
		select {
		case err := <-ij.done:
			t.Fatalf("instance %s ended before commit %d: %v\n%s", ij.id, n, err, log)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("instance %s: no commit %d in a minute\n%s", ij.id, n, log)
		}
	}
}
