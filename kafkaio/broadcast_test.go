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
	"github.com/kordproject/kord/partitioner"
	"github.com/kordproject/kord/serde"
)

// ruledResult is a counting result that says how many rules its event
// met.
type ruledResult struct {
	UUID  string `json:"uuid"`
	Seq   int64  `json:"seq"`
	Count int64  `json:"count"`
	Rules int    `json:"rules"`
}

// ruledCounter counts each user's events (refusing one out of order) and
// keeps the rules of a rules topic as broadcast state, by rule number.
type ruledCounter struct {
	count *keyed.ValueState[int64]
	rules *keyed.BroadcastState[string, int64]
}

func (c *ruledCounter) Open(b *keyed.Backend) (err error) {
	if c.count, err = keyed.Value(b, "count", serde.Int64()); err != nil {
		return err
	}
	c.rules, err = keyed.BroadcastMap(b, "rules", serde.String(), serde.Int64())
	return err
}

func (c *ruledCounter) Process(_ []byte, e event, out *keyed.Collector[ruledResult]) error {
	n, _ := c.count.Get()
	if e.Seq != n {
		return fmt.Errorf("key %s: event seq %d after %d events: out of order", e.UUID, e.Seq, n)
	}
	c.count.Set(n + 1)
	out.Emit(ruledResult{UUID: e.UUID, Seq: e.Seq, Count: n + 1, Rules: c.rules.Len()})
	return nil
}

func (c *ruledCounter) ProcessBroadcast(n int64, _ *keyed.Collector[ruledResult]) error {
	c.rules.Put(strconv.FormatInt(n, 10), n)
	return nil
}

// TestScaledBroadcast: broadcast state on a job of several processes.
// Three processes of one job (instances in this test process, each its
// own group member, producer and run) count users' events by partition,
// and read a compacted rules topic of two partitions whole, as an
// auxiliary broadcast input. Rules are written before the start and while
// the events flow; one process stops midway and its partitions move to
// the others. The output is exactly-once and in order; every event meets
// the rules written before the start; a user's events never meet fewer
// rules than the event before, across the move; the rules written during
// the run reach every partition's owner; and the commit group holds no
// offset of the rules topic. On kfake and on the real broker.
func TestScaledBroadcast(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
		defer cancel()
		f := newFixture(t, c, 6, 40)
		rules := c.CreateTopic(t, 2, map[string]string{"cleanup.policy": "compact"})
		kc := c.Client(t)
		written := 0
		writeRules := func(n int) {
			for range n {
				v, _ := json.Marshal(written)
				require.NoError(t, kc.ProduceSync(ctx, &kgo.Record{Topic: rules, Key: []byte(strconv.Itoa(written)), Value: v}).FirstErr())
				written++
			}
		}
		writeRules(5)
		before := written

		log := &syncbuf.Buffer{}
		start := func(id string) *instanceJob {
			bi := &instanceJob{id: id, done: make(chan error, 1)}
			j := keyed.NewJob(f.name, keyed.Dir(f.dir), keyed.CheckpointInterval(f.interval), keyed.Instance(id), keyed.CheckpointTimeout(10*time.Second),
				keyed.Logger(logTo(log, slog.LevelInfo, nil).With("instance", id)))
			cl := client(c)
			sink := kafkaio.NewSink(cl, f.out, serde.JSON[ruledResult](), kafkaio.Key(func(r ruledResult) string { return r.UUID }, serde.String()),
				kafkaio.SessionTimeout(6*time.Second))
			bi.sink = sink.(interface{ Close() error })
			es := keyed.FromSource(j, "events", 2, kafkaio.NewSource(cl, f.in, serde.JSON[event]()))
			rs := keyed.FromSource(j, "rules", 1, kafkaio.NewSource(cl, rules, serde.JSON[int64]())).Auxiliary()
			out := keyed.ProcessBroadcast(keyed.ByPartition(es), keyed.Broadcast(rs), "count", 2,
				func() keyed.BroadcastOperator[event, int64, ruledResult] { return &ruledCounter{} })
			keyed.ToSink(out, "results", sink)
			rctx, stop := context.WithCancel(ctx)
			bi.stop = stop
			t.Cleanup(stop)
			go func() { bi.done <- j.Run(rctx) }()
			return bi
		}
		a, b, d := start("a"), start("b"), start("d")
		produced := f.produceInBackground(3000, 600, 3*time.Minute)
		time.Sleep(2 * time.Second)
		writeRules(3)
		time.Sleep(time.Second)
		b.end(t, log) // its partitions move to a and d
		writeRules(2)
		require.NoError(t, <-produced)

		// More events until every partition's owner answered one with
		// every rule: the rules written while the job ran reach it.
		perPartition := func() map[int32]int {
			most := map[int32]int{}
			for _, r := range c.ReadAll(t, f.out, f.total(), true, 2*time.Minute) {
				var res ruledResult
				require.NoError(t, json.Unmarshal(r.Value, &res))
				p := partitioner.KeyPartition([]byte(res.UUID), int(f.parts))
				most[p] = max(most[p], res.Rules)
			}
			return most
		}
		for round := 0; ; round++ {
			most := perPartition()
			all := len(most) == int(f.parts)
			for _, n := range most {
				all = all && n == written
			}
			if all {
				break
			}
			require.Less(t, round, 30, "the rules written during the run did not reach every partition's owner: the most rules met per partition %v, of %d\n%s", most, written, log)
			f.fill(60)
			time.Sleep(time.Second)
		}
		a.end(t, log)
		d.end(t, log)
		f.verify()

		// Per user: in order, never fewer rules than the event before,
		// never fewer than were written before the start.
		met := map[string]int{}
		for _, r := range c.ReadAll(t, f.out, f.total(), true, time.Minute) {
			var res ruledResult
			require.NoError(t, json.Unmarshal(r.Value, &res))
			require.GreaterOrEqual(t, res.Rules, before, "user %s event %d met %d rules, fewer than the %d written before the start", res.UUID, res.Seq, res.Rules, before)
			require.GreaterOrEqual(t, res.Rules, met[res.UUID], "user %s event %d met fewer rules than the event before", res.UUID, res.Seq)
			require.LessOrEqual(t, res.Rules, written)
			met[res.UUID] = res.Rules
		}

		// The rules topic's offsets are every process's own: none is
		// committed in the job's group, which keeps the partitions'
		// records.
		ad, err := admin.New(admin.Brokers(strings.Split(c.Brokers, ",")...))
		require.NoError(t, err)
		defer ad.Close()
		offs, err := ad.GroupOffsets(ctx, kafkaio.CommitGroup(f.name), []admin.TopicPartition{{Topic: rules, Partition: 0}, {Topic: rules, Partition: 1}, {Topic: f.in, Partition: 0}})
		require.NoError(t, err)
		for _, o := range offs {
			if o.Topic == rules {
				require.Negative(t, o.Offset, "the commit group holds an offset of the rules topic: %+v", o)
			} else {
				require.Positive(t, o.Offset, "the events' partition 0 has no record: %+v", o)
			}
		}
	})
}
