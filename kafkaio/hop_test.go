//go:build kordfailpoints

package kafkaio_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kordproject/kord/admin"
	"github.com/kordproject/kord/internal/rig/kafkatest"
	"github.com/kordproject/kord/internal/rig/syncbuf"
	"github.com/kordproject/kord/kafkaio"
	"github.com/kordproject/kord/keyed"
	"github.com/kordproject/kord/keyed/connector"
	"github.com/kordproject/kord/partitioner"
	"github.com/kordproject/kord/serde"
)

// hopStage is the name of the stage the tests' hop feeds.
const hopStage = "count"

// hopKey is what the tests' jobs key by across the hop: the uuid, salted,
// so that a record's hop partition is seldom its input partition (the
// input is keyed by uuid) and the exchange is real.
func hopKey(e event) string { return "u:" + e.UUID }

// startHopInstance starts instance id of the fixture's job keyed by a
// field on several processes (hopJob).
func (f *fixture) startHopInstance(id string, log *syncbuf.Buffer) *instanceJob {
	ij := &instanceJob{id: id, done: make(chan error, 1)}
	ij.j, ij.sink = f.hopJob(id, log)
	rctx := ij.runContext(f.t)
	go func() { ij.done <- ij.j.Run(rctx) }()
	return ij
}

// hopJob is instance id of the fixture's job keyed by a field on several
// processes: the input's records are keyed by hopKey, cross to the count
// stage through the hop, and each result goes out.
func (f *fixture) hopJob(id string, log *syncbuf.Buffer) (*keyed.Job, *kafkaio.Sink[result]) {
	client := client(f.c)
	logger := logTo(log, slog.LevelInfo, nil).With("instance", id)
	j := keyed.NewJob(f.name, keyed.Instance(id), keyed.Dir(f.dir), keyed.CheckpointInterval(f.interval), keyed.Logger(logger), keyed.CheckpointTimeout(10*time.Second))
	sink := kafkaio.NewSink(client, f.out, serde.JSON[result](), kafkaio.SessionTimeout(10*time.Second), byUUID).(*kafkaio.Sink[result])
	s := keyed.FromSource(j, "events", 2, kafkaio.NewSource(client, f.in, serde.JSON[event]()))
	out := keyed.Process(keyed.KeyByString("user", hopKey, s).Serde(serde.JSON[event]()), hopStage, 2, func() keyed.Operator[event, result] { return &counter{} })
	keyed.ToSink(out, "results", connector.Sink[result](sink))
	return j, sink
}

// TestScaledHop: a job keyed by a field on two processes, one job whose
// records cross between them through its hop topic. The second process
// joins while input arrives, the first stops; the partitions of the input
// and of the hop move with their state. A read_committed reader finds
// every result exactly once, in per-key order, with counts that continue
// across the moves; the hop topic holds every event once, in the
// partition Kafka's Java client would choose for its key, most of them in
// another partition than their input's, and watermark marks; a process
// that commits deletes the records below its committed offsets, and
// Job.Forget all of them.
func TestScaledHop(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		old := kafkaio.SetPurgeInterval(time.Hour) // the hop's records are checked below
		defer kafkaio.SetPurgeInterval(old)
		f := newFixture(t, c, 6, 200)
		f.fill(2000)
		prodErr := f.produceInBackground(5000, 600, 3*time.Minute)
		var log syncbuf.Buffer
		a := f.startHopInstance("a", &log)
		a.waitCommits(t, 6, &log)
		b := f.startHopInstance("b", &log)
		b.waitCommits(t, 6, &log)
		a.end(t, &log)
		require.NoError(t, <-prodErr)
		recs := f.c.ReadAll(t, f.out, f.expected(), true, 2*time.Minute)
		b.end(t, &log)
		require.Equal(t, f.expected(), len(recs), "%s", &log)
		f.verify()

		topic := kafkaio.RepartitionTopic(f.name, hopStage)
		moved, marks := 0, 0
		seen := map[string]bool{}
		for _, r := range f.c.ReadAll(t, topic, 1<<30, true, 5*time.Second) {
			if len(r.Headers) > 0 {
				require.Equal(t, "kord.watermark", r.Headers[0].Key)
				marks++
				continue
			}
			var e event
			require.NoError(t, json.Unmarshal(r.Value, &e))
			require.Equal(t, hopKey(e), string(r.Key))
			require.Equal(t, partitioner.KeyPartition(r.Key, 6), r.Partition, "key %s: not where Kafka's Java client puts it", r.Key)
			if r.Partition != partitioner.KeyPartition([]byte(e.UUID), 6) {
				moved++
			}
			id := e.UUID + "/" + strconv.FormatInt(e.Seq, 10)
			require.False(t, seen[id], "event %s twice in the hop topic", id)
			seen[id] = true
		}
		require.Len(t, seen, f.expected())
		require.Greater(t, moved, len(seen)/2, "most records change partition")
		t.Logf("%d records crossed, %d changed partition; %d marks", len(seen), moved, marks)

		// Purging: a process that commits deletes the hop's records below
		// the offsets it committed.
		kafkaio.SetPurgeInterval(0)
		cproc := f.startHopInstance("c", &log)
		cproc.waitCommits(t, 4, &log)
		cproc.end(t, &log)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		starts, err := f.logStarts(ctx, topic)
		require.NoError(t, err)
		ad, err := admin.New(admin.Brokers(strings.Split(c.Brokers, ",")...))
		require.NoError(t, err)
		defer ad.Close()
		var tps []admin.TopicPartition
		for p := range f.parts {
			tps = append(tps, admin.TopicPartition{Topic: topic, Partition: p})
		}
		committed, err := ad.GroupOffsets(ctx, kafkaio.CommitGroup(f.name), tps)
		require.NoError(t, err)
		for _, o := range committed {
			require.Positive(t, o.Offset, "hop partition %d: no committed offset", o.Partition)
			// The last commit's purge may have been skipped while an
			// earlier one ran.
			require.Positive(t, starts[o.Partition], "hop partition %d: nothing below the committed offset %d deleted", o.Partition, o.Offset)
			require.LessOrEqual(t, starts[o.Partition], o.Offset, "hop partition %d: records deleted past the committed offset", o.Partition)
		}

		// Forget: a job that starts over reads nothing its earlier life
		// wrote to the hop.
		j, sink := f.hopJob("c", &log)
		// The group keeps its static members until their sessions end.
		var forgetErr error
		require.Eventually(t, func() bool { forgetErr = j.Forget(ctx); return forgetErr == nil }, time.Minute, time.Second, "Forget: %v", forgetErr)
		require.NoError(t, sink.Close())
		starts, err = f.logStarts(ctx, topic)
		require.NoError(t, err)
		ends, err := f.ends(ctx, topic, 0)
		require.NoError(t, err)
		require.Equal(t, ends, starts, "the hop's records after Forget")
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

// userWindow is a window count of one user's events, the output of
// TestScaledHopWindows.
type userWindow struct {
	User  string `json:"user"`
	Start int64  `json:"start"`
	Count int64  `json:"count"`
}

// TestScaledHopWindows: event time crosses the hop, on Kafka. Events
// keyed by uuid, with increasing Kafka timestamps (input partition 5's 30
// s behind the others'), are counted per user in one-second tumbling
// windows after a hop keyed by the (salted) uuid, on two processes; the
// first stops halfway. At the end a record far in the future goes to
// every input partition, so every window of the events closes. Every
// window fires exactly once, with the model's count, and no record is
// late. (Which process owns which input partitions is the group's choice:
// here one process usually holds them all, so the rule that takes the
// least of the writers' marks is proven by keyed's TestHopWatermarks,
// where two processes own fixed partitions.)
func TestScaledHopWindows(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
		defer cancel()
		f := newFixture(t, c, 6, 40)
		base := time.UnixMilli(1_700_000_000_000)
		const events, step, lag = 6000, 20 * time.Millisecond, 30 * time.Second
		want := map[string]int64{} // user/window start: count
		var recs []*kgo.Record
		for i := range events {
			e := f.next(f.keys[i%len(f.keys)], false)
			at := base.Add(time.Duration(i) * step)
			if partitioner.KeyPartition([]byte(e.UUID), int(f.parts)) == 5 {
				at = at.Add(-lag) // partition 5 runs behind in event time
			}
			v, _ := json.Marshal(e)
			recs = append(recs, &kgo.Record{Topic: f.in, Key: []byte(e.UUID), Value: v, Timestamp: at})
			want[fmt.Sprintf("%s/%d", e.UUID, at.UnixMilli()/1000*1000)]++
		}
		kc := c.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
		for i := range recs {
			recs[i].Partition = partitioner.KeyPartition(recs[i].Key, int(f.parts))
		}

		var log syncbuf.Buffer
		start := func(id string) *instanceJob {
			ij := &instanceJob{id: id, done: make(chan error, 1)}
			cl := client(f.c)
			j := keyed.NewJob(f.name, keyed.Instance(id), keyed.Dir(f.dir), keyed.CheckpointInterval(f.interval),
				keyed.Logger(logTo(&log, slog.LevelInfo, nil).With("instance", id)), keyed.CheckpointTimeout(10*time.Second))
			sink := kafkaio.NewSink(cl, f.out, serde.JSON[userWindow](), kafkaio.SessionTimeout(10*time.Second)).(*kafkaio.Sink[userWindow])
			s := keyed.FromSource(j, "events", 2, kafkaio.NewSource(cl, f.in, serde.JSON[event]())).Watermarks(0)
			counts := keyed.WindowAggregate(keyed.KeyByString("user", hopKey, s).Serde(serde.JSON[event]()), hopStage, 2, keyed.Tumbling(time.Second), serde.Int64(),
				keyed.Aggregator[event, int64]{Init: func() int64 { return 0 }, Add: func(n int64, _ event) int64 { return n + 1 }},
				func(user string, w keyed.Window, n int64) userWindow {
					return userWindow{User: strings.TrimPrefix(user, "u:"), Start: w.Start.UnixMilli(), Count: n}
				}, nil)
			keyed.ToSink(counts, "windows", connector.Sink[userWindow](sink))
			ij.j, ij.sink = j, sink
			rctx := ij.runContext(f.t)
			go func() { ij.done <- j.Run(rctx) }()
			return ij
		}
		// Both processes run (each owning some input partitions, one of
		// them partition 5) before the input comes; the first stops
		// halfway.
		a, b := start("a"), start("b")
		a.waitCommits(t, 3, &log)
		b.waitCommits(t, 3, &log)
		a.waitCommits(t, a.commits.Load()+3, &log)
		produced, half := make(chan error, 1), make(chan struct{})
		go func() {
			for i := 0; i < len(recs); i += 100 {
				if i == len(recs)/2 {
					close(half)
				}
				if err := kc.ProduceSync(ctx, recs[i:min(i+100, len(recs))]...).FirstErr(); err != nil {
					produced <- err
					return
				}
				time.Sleep(150 * time.Millisecond)
			}
			// Every input partition far ahead: every window of the events
			// closes.
			var ahead []*kgo.Record
			for p := range f.parts {
				ahead = append(ahead, &kgo.Record{Topic: f.in, Partition: p, Key: []byte(fmt.Sprintf("ahead-%d", p)), Value: []byte(`{"uuid":"ahead","seq":0}`), Timestamp: base.Add(time.Hour)})
			}
			produced <- kc.ProduceSync(ctx, ahead...).FirstErr()
		}()
		<-half
		a.end(t, &log)
		require.NoError(t, <-produced)
		out := f.c.ReadAll(t, f.out, len(want), true, 2*time.Minute)
		late := a.j.LateRecords()
		// The survivor's stages and tasks, their watermarks among them:
		// what a stall shows first.
		overview, _ := json.MarshalIndent(b.j.Overview(), "", "  ")
		b.end(t, &log)
		late += b.j.LateRecords()
		got := map[string]int64{}
		for _, r := range f.c.ReadAll(t, f.out, len(want)+1, true, 3*time.Second) {
			var w userWindow
			require.NoError(t, json.Unmarshal(r.Value, &w))
			k := fmt.Sprintf("%s/%d", w.User, w.Start)
			require.NotContains(t, got, k, "window %s fired twice", k)
			got[k] = w.Count
		}
		require.Zero(t, late, "late records")
		require.Equal(t, len(want), len(out), "%s\nthe survivor's overview before its stop: %s", &log, overview)
		require.Equal(t, want, got)
	})
}
