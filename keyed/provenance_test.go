package keyed_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kordproject/kord/checkpoint"
	"github.com/kordproject/kord/internal/rig/syncbuf"
	"github.com/kordproject/kord/keyed"
	"github.com/kordproject/kord/keyed/connector"
	"github.com/kordproject/kord/partitioner"
	"github.com/kordproject/kord/vfs"
)

// identified is a memory source that says which cluster and topic id it
// reads, as kafkaio's does.
type identified struct {
	*keyed.MemorySource[event]
	ref checkpoint.SourceRef
}

func (s identified) Provenance(context.Context) (checkpoint.SourceRef, error) { return s.ref, nil }

// provenanceJob is the counting job over src (a *MemorySource or an
// identified one), keyed by partition.
func provenanceJob(t *testing.T, fs vfs.FS, src connector.Source[event], sink *keyed.MemorySink[result], opts ...keyed.Opt) *keyed.Job {
	j := keyed.NewJob("users", append([]keyed.Opt{keyed.FS(fs), keyed.Dir("/ckpt"), keyed.CheckpointInterval(20 * time.Millisecond)}, opts...)...)
	out := keyed.Process(keyed.ByPartition(keyed.FromSource(j, "events", 2, src)), "count", 2, func() keyed.Operator[event, result] { return &counter{} })
	keyed.ToSink(out, "results", connector.Sink[result](sink))
	require.NoError(t, j.Validate())
	return j
}

// continueInput returns a new bounded memory source ("events", 4
// partitions) holding n more events for the keys of want, each key's
// sequence going on from want (as if produced to a new cluster after the
// old one's input).
func continueInput(want map[string]int64, n int) (*keyed.MemorySource[event], map[string]int64) {
	src := keyed.NewMemorySource[event]("events", 4, true)
	next := map[string]int64{}
	keys := make([]string, 0, len(want))
	for k, v := range want {
		keys = append(keys, k)
		next[k] = v
	}
	for i := 0; i < n; i++ {
		u := keys[i%len(keys)]
		src.Append(partitioner.KeyPartition([]byte(u), 4), []byte(u), event{UUID: u, Seq: next[u]})
		next[u]++
	}
	return src, next
}

func runJob(t *testing.T, j *keyed.Job) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return j.Run(ctx)
}

// TestProvenanceRefused: a checkpoint taken on one cluster is not restored
// onto another, nor onto a topic of the same name created again; the
// error names both ids and the ways forward, and nothing is read.
func TestProvenanceRefused(t *testing.T) {
	first := checkpoint.SourceRef{Topic: "events", Cluster: "cluster-A", TopicID: "topic-1"}
	for _, tc := range []struct {
		name  string
		now   checkpoint.SourceRef
		other bool // another cluster, not a recreated topic
	}{
		{"another cluster", checkpoint.SourceRef{Topic: "events", Cluster: "cluster-B", TopicID: "topic-2"}, true},
		{"recreated topic", checkpoint.SourceRef{Topic: "events", Cluster: "cluster-A", TopicID: "topic-2"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := vfs.NewMem()
			src, want := input(1, 4, 50, 2_000)
			sink := keyed.NewMemorySink[result]()
			require.NoError(t, runJob(t, provenanceJob(t, fs, identified{src, first}, sink)))
			checkOutput(t, sink.Committed(), want)

			// The same job again, with the same checkpoints, on the other
			// cluster or topic, whose sink holds no record (a new cluster's
			// commit group is empty; a deleted topic's offsets go with it).
			src2, _ := continueInput(want, 500)
			sink2 := keyed.NewMemorySink[result]()
			err := runJob(t, provenanceJob(t, fs, identified{src2, tc.now}, sink2))
			require.Error(t, err)
			require.ErrorIs(t, err, checkpoint.ErrProvenance)
			var pe *checkpoint.ProvenanceError
			require.ErrorAs(t, err, &pe)
			require.Equal(t, tc.other, pe.OtherCluster())
			msg := err.Error()
			if tc.other {
				require.Contains(t, msg, `cluster "cluster-A"`)
				require.Contains(t, msg, `cluster "cluster-B"`)
			} else {
				require.Contains(t, msg, `topic id "topic-1"`)
				require.Contains(t, msg, `topic id "topic-2"`)
			}
			require.Contains(t, msg, `topic "events"`)
			require.Contains(t, msg, "Job.Forget")
			require.Contains(t, msg, "keyed.Failover()")
			require.Empty(t, sink2.Committed(), "a refused restore writes nothing")
		})
	}
}

// TestProvenanceFailover: with Failover, the keyed state of a checkpoint
// taken on another cluster is restored and the sources start from their
// start (offset 0 here), not from the old offsets: each key's count goes on
// from the old cluster's.
func TestProvenanceFailover(t *testing.T) {
	fs := vfs.NewMem()
	src, want := input(2, 4, 50, 2_000)
	sink := keyed.NewMemorySink[result]()
	require.NoError(t, runJob(t, provenanceJob(t, fs, identified{src, checkpoint.SourceRef{Topic: "events", Cluster: "A", TopicID: "1"}}, sink)))
	checkOutput(t, sink.Committed(), want)

	src2, want2 := continueInput(want, 700)
	sink2 := keyed.NewMemorySink[result]()
	var log syncbuf.Buffer
	j := provenanceJob(t, fs, identified{src2, checkpoint.SourceRef{Topic: "events", Cluster: "B", TopicID: "2"}}, sink2,
		keyed.Failover(), keyed.Logger(slog.New(slog.NewTextHandler(&log, nil))))
	require.NoError(t, runJob(t, j))
	// The old output and the new together are each key's events once, in
	// order, with counts that go on: the state was kept, and the new
	// topic was read from its start.
	checkOutput(t, append(sink.Committed(), sink2.Committed()...), want2)
	require.Contains(t, log.String(), "failover")

	// The new cluster's checkpoints record the new cluster: a later run
	// there restores them, without Failover, and reads on from their
	// offsets.
	next := map[string]int64{}
	for k, v := range want2 {
		next[k] = v
	}
	for k := range want2 {
		src2.Append(partitioner.KeyPartition([]byte(k), 4), []byte(k), event{UUID: k, Seq: next[k]})
		next[k]++
	}
	j = provenanceJob(t, fs, identified{src2, checkpoint.SourceRef{Topic: "events", Cluster: "B", TopicID: "2"}}, sink2)
	require.NoError(t, runJob(t, j))
	checkOutput(t, append(sink.Committed(), sink2.Committed()...), next)
}

// TestProvenanceOldCheckpoint: a checkpoint that records no provenance
// (written before kord recorded it, or by a source that has none) restores
// as before, with a warning.
func TestProvenanceOldCheckpoint(t *testing.T) {
	fs := vfs.NewMem()
	src, want := input(3, 4, 50, 2_000)
	sink := keyed.NewMemorySink[result]()
	require.NoError(t, runJob(t, provenanceJob(t, fs, src, sink)))

	// More input on the same source, now identified; the same sink (its
	// record says which checkpoint committed).
	next := map[string]int64{}
	for k, v := range want {
		next[k] = v
	}
	i := 0
	for k := range want {
		if i == 100 {
			break
		}
		src.Append(partitioner.KeyPartition([]byte(k), 4), []byte(k), event{UUID: k, Seq: next[k]})
		next[k]++
		i++
	}
	var log syncbuf.Buffer
	j := provenanceJob(t, fs, identified{src, checkpoint.SourceRef{Topic: "events", Cluster: "A", TopicID: "1"}}, sink,
		keyed.Logger(slog.New(slog.NewTextHandler(&log, nil))))
	require.NoError(t, runJob(t, j))
	checkOutput(t, sink.Committed(), next)
	require.Contains(t, log.String(), "does not record which cluster and topic ids")
}

// TestRestoreSaysWhatItDecided: with no Logger given, a restore from the
// local marker alone (the sink holds no record) and a bounded run that
// reads nothing because the restored offsets are at the input's end are
// both said at WARN, through slog.Default.
func TestRestoreSaysWhatItDecided(t *testing.T) {
	var log syncbuf.Buffer
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&log, nil)))
	defer slog.SetDefault(old)

	fs := vfs.NewMem()
	src, want := input(4, 4, 50, 2_000)
	sink := keyed.NewMemorySink[result]()
	require.NoError(t, runJob(t, provenanceJob(t, fs, src, sink)))
	checkOutput(t, sink.Committed(), want)
	require.NotContains(t, log.String(), "level=WARN", "a fresh start and its run say nothing")

	// The same input and directory, a sink with no record: the local
	// marker's checkpoint is restored, and its offsets are the input's
	// end.
	sink2 := keyed.NewMemorySink[result]()
	require.NoError(t, runJob(t, provenanceJob(t, fs, src, sink2)))
	require.Empty(t, sink2.Committed())
	out := log.String()
	require.Contains(t, out, "level=WARN msg=\"keyed: restoring from the local committed marker")
	require.Contains(t, out, "level=WARN msg=\"keyed: the bounded input ended before the run read any record")
	for p := 0; p < 4; p++ {
		require.Contains(t, out, fmt.Sprintf("events[%d]@%d", p, src.Len(int32(p))), "the warning names every offset")
	}
}
