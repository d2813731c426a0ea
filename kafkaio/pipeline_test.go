//go:build kordfailpoints

package kafkaio_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kordproject/kord/internal/rig/kafkatest"
	"github.com/kordproject/kord/kafkaio"
	"github.com/kordproject/kord/keyed"
	"github.com/kordproject/kord/partitioner"
	"github.com/kordproject/kord/serde"
)

// tagged is an event with the number of rules its process held when the
// tag stage saw it.
type tagged struct {
	UUID  string `json:"uuid"`
	Rules int    `json:"rules"`
}

// ruleCount counts the rules of a rules topic, as broadcast state, and
// tags each event with the count.
type ruleCount struct {
	rules *keyed.BroadcastState[string, int64]
}

func (c *ruleCount) Open(b *keyed.Backend) (err error) {
	c.rules, err = keyed.BroadcastMap(b, "rules", serde.String(), serde.Int64())
	return err
}

func (c *ruleCount) Process(_ []byte, e event, out *keyed.Collector[tagged]) error {
	out.Emit(tagged{UUID: e.UUID, Rules: c.rules.Len()})
	return nil
}

func (c *ruleCount) ProcessBroadcast(n int64, _ *keyed.Collector[tagged]) error {
	c.rules.Put(strconv.FormatInt(n, 10), n)
	return nil
}

// ruledWindow is one user's window: its events, and the most rules one
// of them met.
type ruledWindow struct {
	User  string `json:"user"`
	Start int64  `json:"start"`
	Count int64  `json:"count"`
	Rules int    `json:"rules"`
}

// windowAcc is a window's accumulator.
type windowAcc struct {
	N     int64 `json:"n"`
	Rules int   `json:"rules"`
}

// pipelineJob is the job of TestScaledPipeline's processes: events by
// partition, tagged with the rules of rules (an auxiliary broadcast
// input) by the tag stage, across the hop keyed by the salted uuid, into
// one-second windows per user; each window's count and the most rules
// its events met go to the output.
func pipelineJob(s jobSpec, rules string) (*keyed.Job, interface{ Close() error }) {
	j := keyed.NewJob(s.name, append([]keyed.Opt{keyed.Dir(s.dir), keyed.CheckpointInterval(s.interval), keyed.Logger(s.logger)}, s.opts...)...)
	cl := mustClient(kafkaio.Brokers(strings.Split(s.brokers, ",")...))
	sink := kafkaio.NewSink(cl, s.out, serde.JSON[ruledWindow](), append([]kafkaio.Opt{kafkaio.Key(func(w ruledWindow) string { return w.User }, serde.String())}, s.sinkOpts...)...)
	events := keyed.FromSource(j, "events", 2, kafkaio.NewSource(cl, s.in, serde.JSON[event]())).Watermarks(0)
	rs := keyed.FromSource(j, "rules", 1, kafkaio.NewSource(cl, rules, serde.JSON[int64]())).Auxiliary()
	tags := keyed.ProcessBroadcast(keyed.ByPartition(events), keyed.Broadcast(rs), "tag", 2,
		func() keyed.BroadcastOperator[event, int64, tagged] { return &ruleCount{} })
	byUser := keyed.KeyByString("user", func(e tagged) string { return "u:" + e.UUID }, tags).Serde(serde.JSON[tagged]())
	windows := keyed.WindowAggregate(byUser, "windows", 2, keyed.Tumbling(time.Second), serde.JSON[windowAcc](),
		keyed.Aggregator[tagged, windowAcc]{Init: func() windowAcc { return windowAcc{} },
			Add: func(a windowAcc, e tagged) windowAcc { return windowAcc{N: a.N + 1, Rules: max(a.Rules, e.Rules)} }},
		func(user string, w keyed.Window, a windowAcc) ruledWindow {
			return ruledWindow{User: strings.TrimPrefix(user, "u:"), Start: w.Start.UnixMilli(), Count: a.N, Rules: a.Rules}
		}, nil)
	keyed.ToSink(windows, "results", sink)
	return j, sink.(interface{ Close() error })
}

// TestScaledPipeline: the pipeline the issue of joins and the hop asks
// for, on three processes of one job on the real broker. Events with
// increasing timestamps are tagged by a stage keyed by partition with the
// number of rules its process holds (broadcast state from a compacted
// rules topic, read whole by every process), cross the hop keyed by user,
// and are counted in one-second windows per user. Rules are written
// before the start and two more midway; one process is SIGKILLed midway
// and started again. At the end a record far ahead in every input
// partition closes the events' windows. A read_committed reader finds
// every window once, with the model's count; a user's windows never meet
// fewer rules than the one before, nor fewer than were written before the
// start; and the rules written midway reach the windows.
func TestScaledPipeline(t *testing.T) {
	c := kafkatest.Broker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	f := newFixture(t, c, 6, 40)
	rules := c.CreateTopic(t, 2, map[string]string{"cleanup.policy": "compact"})
	kc := c.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	written := 0
	writeRules := func(n int) {
		for range n {
			require.NoError(t, kc.ProduceSync(ctx, &kgo.Record{Topic: rules, Partition: int32(written % 2), Key: []byte(strconv.Itoa(written)), Value: []byte(strconv.Itoa(written))}).FirstErr())
			written++
		}
	}
	writeRules(3)
	before := written

	base := time.UnixMilli(1_700_000_000_000)
	const events, step = 9000, 20 * time.Millisecond
	want := map[string]int64{}
	var recs []*kgo.Record
	for i := range events {
		e := f.next(f.keys[i%len(f.keys)], false)
		at := base.Add(time.Duration(i) * step)
		v, _ := json.Marshal(e)
		recs = append(recs, &kgo.Record{Topic: f.in, Partition: partitioner.KeyPartition([]byte(e.UUID), int(f.parts)), Key: []byte(e.UUID), Value: v, Timestamp: at})
		want[fmt.Sprintf("%s/%d", e.UUID, at.UnixMilli()/1000*1000)]++
	}

	ps := f.procs(6 * time.Second)
	ps.env = []string{"KORD_JOB_RULES=" + rules, "KORD_JOB_RESTARTS=10"}
	ps.start("p0", "p1", "p2")
	ps.waitCommits(2, "every process commits")
	for i := 0; i < len(recs); i += 100 {
		require.NoError(t, kc.ProduceSync(ctx, recs[i:min(i+100, len(recs))]...).FirstErr())
		time.Sleep(100 * time.Millisecond)
		if i == len(recs)/2 {
			writeRules(2)
			ps.kill("p1")
			ps.start("p1")
		}
	}
	var ahead []*kgo.Record
	for p := range f.parts {
		ahead = append(ahead, &kgo.Record{Topic: f.in, Partition: p, Key: []byte(fmt.Sprintf("ahead-%d", p)), Value: []byte(`{"uuid":"ahead","seq":0}`), Timestamp: base.Add(time.Hour)})
	}
	require.NoError(t, kc.ProduceSync(ctx, ahead...).FirstErr())
	out := f.c.ReadAll(t, f.out, len(want), true, 3*time.Minute)
	ps.stopAll()
	require.Equal(t, len(want), len(out), "windows fired\n%s", ps.logs())

	got := map[string]int64{}
	met := map[string]int{}
	most := 0
	for _, r := range f.c.ReadAll(t, f.out, len(want)+1, true, 5*time.Second) {
		var w ruledWindow
		require.NoError(t, json.Unmarshal(r.Value, &w))
		k := fmt.Sprintf("%s/%d", w.User, w.Start)
		require.NotContains(t, got, k, "window %s fired twice", k)
		got[k] = w.Count
		// A user's windows are in one output partition, in order.
		require.GreaterOrEqual(t, w.Rules, met[w.User], "user %s's window at %d met fewer rules than the one before", w.User, w.Start)
		require.GreaterOrEqual(t, w.Rules, before, "window %s met fewer rules than were written before the start", k)
		require.LessOrEqual(t, w.Rules, written)
		met[w.User] = w.Rules
		most = max(most, w.Rules)
	}
	require.Equal(t, want, got, "the windows against the model\n%s", ps.logs())
	require.Equal(t, written, most, "the rules written midway reached no window")
}
