package consumer_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kordproject/kord/admin"
	"github.com/kordproject/kord/consumer"
	"github.com/kordproject/kord/internal/rig/kafkatest"
	"github.com/kordproject/kord/internal/rig/syncbuf"
	"github.com/kordproject/kord/partitioner"
	"github.com/kordproject/kord/producer"
	"github.com/kordproject/kord/serde"
)

// rec is a record to produce to one partition, with an optional timestamp.
type rec struct {
	p  int32
	ts time.Time
}

// produce writes recs in order, each acknowledged before the next, through
// kord's producer. Values count per partition from "0".
func produce(t *testing.T, c *kafkatest.Cluster, topic string, recs ...rec) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The key names the partition.
	byKey := partitioner.Func(func(_ string, key []byte, _ int, _ []int32) int32 {
		p, err := strconv.Atoi(string(key))
		if err != nil {
			panic(err)
		}
		return int32(p)
	})
	p, err := producer.New(serde.String(), serde.String(), producer.Brokers(c.Brokers), producer.Partitioner(byKey))
	require.NoError(t, err)
	defer p.Close()
	n := map[int32]int{}
	for _, r := range recs {
		d, err := p.ProduceSync(ctx, producer.Record[string, string]{Topic: topic, Key: strconv.Itoa(int(r.p)), Value: strconv.Itoa(n[r.p]), Timestamp: r.ts})
		require.NoError(t, err)
		require.Equal(t, r.p, d.Partition)
		n[r.p]++
	}
}

// many returns n records for partition p.
func many(p int32, n int) []rec {
	out := make([]rec, n)
	for i := range out {
		out[i] = rec{p: p}
	}
	return out
}

func kafkaAdmin(t *testing.T, c *kafkatest.Cluster) *kafka.AdminClient {
	t.Helper()
	a, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": c.Brokers})
	require.NoError(t, err)
	t.Cleanup(a.Close)
	return a
}

// deleteRecords moves partition p's log start to before (Kafka's
// DeleteRecords).
func deleteRecords(t *testing.T, c *kafkatest.Cluster, topic string, p int32, before int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := kafkaAdmin(t, c).DeleteRecords(ctx, []kafka.TopicPartition{{Topic: &topic, Partition: p, Offset: kafka.Offset(before)}})
	require.NoError(t, err)
	require.Len(t, res.DeleteRecordsResults, 1)
	require.NoError(t, res.DeleteRecordsResults[0].TopicPartition.Error)
	require.Equal(t, before, int64(res.DeleteRecordsResults[0].DeletedRecords.LowWatermark))
}

// commitGroup commits offsets (partition → offset) of topic for group, as
// an admin would (OffsetCommit from outside the group).
func commitGroup(t *testing.T, c *kafkatest.Cluster, group, topic string, offsets map[int32]int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var tps []kafka.TopicPartition
	for p, o := range offsets {
		tps = append(tps, kafka.TopicPartition{Topic: &topic, Partition: p, Offset: kafka.Offset(o)})
	}
	res, err := kafkaAdmin(t, c).AlterConsumerGroupOffsets(ctx, []kafka.ConsumerGroupTopicPartitions{{Group: group, Partitions: tps}})
	require.NoError(t, err)
	for _, g := range res.ConsumerGroupsTopicPartitions {
		for _, tp := range g.Partitions {
			require.NoError(t, tp.Error, "commit %s[%d]", *tp.Topic, tp.Partition)
		}
	}
}

// logBuffer collects a source's JSON log lines; the source writes from its
// own goroutine (librdkafka's log) too.
type logBuffer struct{ syncbuf.Buffer }

// lines returns the decoded log lines whose message is msg.
func (l *logBuffer) lines(t *testing.T, msg string) []map[string]any {
	t.Helper()
	data := l.Bytes()
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var m map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &m), sc.Text())
		if m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

func newSource(t *testing.T, c *kafkatest.Cluster, opts ...consumer.Opt) *consumer.Source {
	t.Helper()
	s, err := consumer.New(append([]consumer.Opt{consumer.Brokers(c.Brokers)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func offsetsOf(ps []consumer.Position) []int64 {
	out := make([]int64, len(ps))
	for i, p := range ps {
		out[i] = p.Offset
	}
	return out
}

// resolve resolves st and returns the offsets in partition order, checking
// that every partition of topic is there once, in order.
func resolve(t *testing.T, ctx context.Context, s *consumer.Source, topic string, st consumer.Start) []int64 {
	t.Helper()
	ps, err := s.Resolve(ctx, topic, st)
	require.NoError(t, err, "start %s", st)
	for i, p := range ps {
		require.Equal(t, topic, p.Topic)
		require.Equal(t, int32(i), p.Partition)
	}
	return offsetsOf(ps)
}

func TestStartValidation(t *testing.T) {
	s, err := consumer.New(consumer.Brokers("127.0.0.1:1"))
	require.NoError(t, err)
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, tc := range []struct {
		start consumer.Start
		want  string
	}{
		{consumer.AtTime(time.Time{}), "before the Unix epoch"},
		{consumer.AtTime(time.UnixMilli(-1)), "before the Unix epoch"},
		{consumer.AtOffsets(map[int32]int64{0: 3, 1: -2}), "partition 1: offset -2 is not a concrete offset"},
		{consumer.FromGroup(""), "no group named"},
		{consumer.Latest.OrReset(consumer.ResetEarliest), "OrReset applies to AtOffsets and FromGroup only"},
		{consumer.AtTime(time.Now()).OrReset(consumer.ResetLatest), "OrReset applies"},
		{consumer.FromGroup("g").Otherwise(consumer.Latest), "Otherwise applies to AtOffsets only"},
		{consumer.FromGroup("g").OrReset(consumer.Reset(7)), "unknown reset 7"},
		{consumer.AtOffsets(nil).Otherwise(consumer.AtTime(time.Time{})), "before the Unix epoch"},
	} {
		// Refused before any request: the broker address is not even
		// reachable.
		_, err := s.Resolve(ctx, "topic", tc.start)
		require.ErrorIs(t, err, consumer.ErrConfig, tc.start.String())
		require.ErrorContains(t, err, tc.want)
	}

	require.Equal(t, "earliest", consumer.Start{}.String(), "the zero Start is Earliest")
	m := map[int32]int64{1: 5, 0: 7}
	st := consumer.AtOffsets(m).Otherwise(consumer.Latest).OrReset(consumer.ResetEarliest)
	m[0] = 99 // AtOffsets copied the map
	require.Equal(t, "offsets {0:7 1:5} otherwise latest, or reset earliest", st.String())
	require.Equal(t, "offsets {} otherwise earliest, or reset none", consumer.AtOffsets(nil).String())
	require.Equal(t, `group "billing" or reset none`, consumer.FromGroup("billing").String())
	require.Equal(t, `group "billing" or reset latest`, consumer.FromGroup("billing").OrReset(consumer.ResetLatest).String())
	require.Equal(t, "time >= 2024-05-01T10:00:00.5Z", consumer.AtTime(time.Date(2024, 5, 1, 12, 0, 0, 5e8, time.FixedZone("x", 7200))).String())
}

func TestStartEarliestLatest(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		topic := c.CreateTopic(t, 3, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		produce(t, c, topic, append(many(0, 10), many(1, 3)...)...)
		deleteRecords(t, c, topic, 0, 4)

		s := newSource(t, c)
		// Earliest is the log start, not offset 0.
		require.Equal(t, []int64{4, 0, 0}, resolve(t, ctx, s, topic, consumer.Earliest))
		require.Equal(t, []int64{4, 0, 0}, resolve(t, ctx, s, topic, consumer.Start{}))
		require.Equal(t, []int64{10, 3, 0}, resolve(t, ctx, s, topic, consumer.Latest))

		// An open transaction on partition 2: its two records are below
		// the high watermark (2) but not below the LSO (0).
		txn := c.Client(t, kgo.TransactionalID(kafkatest.TopicName(t)), kgo.RecordPartitioner(kgo.ManualPartitioner()))
		require.NoError(t, txn.BeginTransaction())
		for i := 0; i < 2; i++ {
			require.NoError(t, txn.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: 2, Value: []byte("t")}).FirstErr())
		}
		uncommitted := newSource(t, c, consumer.Set("isolation.level", "read_uncommitted"))
		// read_committed (the default): Latest is the LSO, where a
		// read_committed reader sees the transaction's records if it
		// commits.
		require.Equal(t, []int64{10, 3, 0}, resolve(t, ctx, s, topic, consumer.Latest))
		// read_uncommitted: the high watermark.
		require.Equal(t, []int64{10, 3, 2}, resolve(t, ctx, uncommitted, topic, consumer.Latest))

		// Between the LSO and the high watermark is in the log: accepted
		// by Resolve and by Assign. Past the high watermark is not.
		require.Equal(t, []int64{4, 0, 2}, resolve(t, ctx, s, topic, consumer.AtOffsets(map[int32]int64{2: 2})))
		require.NoError(t, s.Assign(ctx, []consumer.Position{{Topic: topic, Partition: 2, Offset: 2}}))
		for _, src := range []*consumer.Source{s, uncommitted} {
			_, err := src.Resolve(ctx, topic, consumer.AtOffsets(map[int32]int64{2: 3}))
			require.ErrorIs(t, err, consumer.ErrOutOfRange)
			require.ErrorContains(t, err, topic+"[2] offset 3")
			require.ErrorContains(t, err, "the log holds offsets 0 to 2")
		}

		// Committed: the records and the commit marker are below the LSO.
		// The coordinator writes the markers after it answers EndTxn, so
		// the LSO moves shortly after.
		require.NoError(t, txn.EndTransaction(ctx, kgo.TryCommit))
		require.Eventually(t, func() bool {
			return slices.Equal([]int64{10, 3, 3}, resolve(t, ctx, s, topic, consumer.Latest))
		}, 10*time.Second, 50*time.Millisecond)
	})
}

func TestStartAtTime(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		topic := c.CreateTopic(t, 3, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		base := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
		at := func(d time.Duration) time.Time { return base.Add(d) }
		// Partition 0's timestamps are out of order: 10s, 30s, 20s, 40s at
		// offsets 0 to 3. Partition 1: 1s, 2s, 3s. Partition 2: empty.
		produce(t, c, topic,
			rec{0, at(10 * time.Second)}, rec{0, at(30 * time.Second)}, rec{0, at(20 * time.Second)}, rec{0, at(40 * time.Second)},
			rec{1, at(time.Second)}, rec{1, at(2 * time.Second)}, rec{1, at(3 * time.Second)})

		s := newSource(t, c)
		for _, tc := range []struct {
			t    time.Duration
			want []int64
		}{
			{0, []int64{0, 0, 0}},
			{10 * time.Second, []int64{0, 3, 0}}, // at or after: 10s itself
			{10*time.Second + time.Millisecond, []int64{1, 3, 0}},
			{20 * time.Second, []int64{1, 3, 0}}, // the first offset with ts >= t (30s), not the exact match at offset 2
			{2 * time.Second, []int64{0, 1, 0}},  // partition 1: exact match
			{31 * time.Second, []int64{3, 3, 0}},
			{41 * time.Second, []int64{4, 3, 0}}, // nothing at or after t: the end
			{24 * time.Hour, []int64{4, 3, 0}},
		} {
			require.Equal(t, tc.want, resolve(t, ctx, s, topic, consumer.AtTime(at(tc.t))), "t = base+%v", tc.t)
		}

		// Deleted records are not answered: partition 1 from offset 1.
		deleteRecords(t, c, topic, 1, 1)
		require.Equal(t, []int64{0, 1, 0}, resolve(t, ctx, s, topic, consumer.AtTime(base)))

		// Reading from the resolved offsets starts at the first record at
		// or after t.
		ps, err := s.Resolve(ctx, topic, consumer.AtTime(at(20*time.Second)))
		require.NoError(t, err)
		require.NoError(t, s.Assign(ctx, ps))
		recs, err := s.Poll(ctx, 1, 10*time.Second)
		require.NoError(t, err)
		require.Len(t, recs, 1)
		require.Equal(t, int64(1), recs[0].Offset)
		require.True(t, at(30*time.Second).Equal(recs[0].Timestamp), "timestamp %v", recs[0].Timestamp)
	})
}

func TestStartAtOffsets(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		topic := c.CreateTopic(t, 3, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		produce(t, c, topic, append(append(many(0, 10), many(1, 5)...), many(2, 3)...)...)
		deleteRecords(t, c, topic, 1, 2) // partition 1 holds offsets 2 to 5

		var logs logBuffer
		s := newSource(t, c, consumer.Logger(slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))))
		const resetMsg = "kord source: start offset reset"

		// Partitions not named: Earliest unless Otherwise says.
		require.Equal(t, []int64{7, 2, 0}, resolve(t, ctx, s, topic, consumer.AtOffsets(map[int32]int64{0: 7})))
		require.Equal(t, []int64{7, 5, 3}, resolve(t, ctx, s, topic, consumer.AtOffsets(map[int32]int64{0: 7}).Otherwise(consumer.Latest)))
		require.Equal(t, []int64{7, 3, 3}, resolve(t, ctx, s, topic,
			consumer.AtOffsets(map[int32]int64{0: 7}).Otherwise(consumer.AtOffsets(map[int32]int64{0: 1, 1: 3}).Otherwise(consumer.Latest))))
		// Both ends of the log are valid.
		require.Equal(t, []int64{10, 2, 0}, resolve(t, ctx, s, topic, consumer.AtOffsets(map[int32]int64{0: 10, 1: 2})))

		// Outside the log: every such partition named, with its range.
		_, err := s.Resolve(ctx, topic, consumer.AtOffsets(map[int32]int64{0: 11, 1: 1}))
		require.ErrorIs(t, err, consumer.ErrOutOfRange)
		var oe *consumer.OffsetError
		require.ErrorAs(t, err, &oe)
		require.ErrorContains(t, err, topic+"[0] offset 11: consumer: offset out of range: the log holds offsets 0 to 10")
		require.ErrorContains(t, err, topic+"[1] offset 1: consumer: offset out of range: the log holds offsets 2 to 5")
		require.Empty(t, logs.lines(t, resetMsg))

		// Unless a reset was chosen; each reset is logged.
		require.Equal(t, []int64{10, 5, 0}, resolve(t, ctx, s, topic, consumer.AtOffsets(map[int32]int64{0: 11, 1: 1}).OrReset(consumer.ResetLatest)))
		lines := logs.lines(t, resetMsg)
		require.Len(t, lines, 2)
		for i, want := range []struct{ p, requested, offset float64 }{{0, 11, 10}, {1, 1, 5}} {
			require.Equal(t, topic, lines[i]["topic"])
			require.Equal(t, want.p, lines[i]["partition"])
			require.Equal(t, want.requested, lines[i]["requested"])
			require.Equal(t, want.offset, lines[i]["offset"])
			require.Equal(t, "latest", lines[i]["reset"])
			require.Equal(t, "WARN", lines[i]["level"])
		}
		require.Equal(t, []int64{0, 2, 0}, resolve(t, ctx, s, topic, consumer.AtOffsets(map[int32]int64{0: 11, 1: 1}).OrReset(consumer.ResetEarliest)))
		require.Len(t, logs.lines(t, resetMsg), 4)

		// A partition the topic does not have.
		_, err = s.Resolve(ctx, topic, consumer.AtOffsets(map[int32]int64{3: 0}))
		require.ErrorIs(t, err, consumer.ErrConfig)
		require.ErrorContains(t, err, "names partition 3")

		// The positions are usable as they are: read from them.
		ps, err := s.Resolve(ctx, topic, consumer.AtOffsets(map[int32]int64{0: 7, 1: 4}))
		require.NoError(t, err)
		require.NoError(t, s.Assign(ctx, ps))
		got := map[int32][]string{}
		for n := 0; n < 3+1+3; {
			recs, err := s.Poll(ctx, 100, 100*time.Millisecond)
			require.NoError(t, err)
			for _, r := range recs {
				got[r.Partition] = append(got[r.Partition], string(r.Value))
			}
			n += len(recs)
		}
		require.Equal(t, map[int32][]string{0: {"7", "8", "9"}, 1: {"4"}, 2: {"0", "1", "2"}}, got)
	})
}

func TestStartFromGroup(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		topic := c.CreateTopic(t, 4, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		produce(t, c, topic, append(append(append(many(0, 10), many(1, 10)...), many(2, 4)...), many(3, 5)...)...)
		deleteRecords(t, c, topic, 1, 5) // partition 1 holds offsets 5 to 10

		// The source group: partition 0 in range, partition 1 below the
		// log start, partition 2 without an offset, partition 3 past the
		// end.
		group := kafkatest.TopicName(t)
		commitGroup(t, c, group, topic, map[int32]int64{0: 6, 1: 2, 3: 9})

		var logs logBuffer
		s := newSource(t, c, consumer.Logger(slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))))
		const resetMsg = "kord source: start offset reset"

		require.Equal(t, []int64{6, 5, 0, 0}, resolve(t, ctx, s, topic, consumer.FromGroup(group).OrReset(consumer.ResetEarliest)))
		lines := logs.lines(t, resetMsg)
		require.Len(t, lines, 3, "partitions 1, 2, 3 reset; 0 not")
		for i, want := range []struct {
			p         float64
			committed any // nil: no committed offset
			offset    float64
			level     string
		}{{1, 2.0, 5, "WARN"}, {2, nil, 0, "INFO"}, {3, 9.0, 0, "WARN"}} {
			l := lines[i]
			require.Equal(t, topic, l["topic"])
			require.Equal(t, group, l["group"])
			require.Equal(t, want.p, l["partition"])
			require.Equal(t, want.committed, l["committed"])
			require.Equal(t, want.offset, l["offset"])
			require.Equal(t, "earliest", l["reset"])
			require.Equal(t, want.level, l["level"])
		}
		require.Contains(t, lines[0]["reason"], "committed offset 2 is not in the log, which holds offsets 5 to 10")
		require.Contains(t, lines[1]["reason"], "has no committed offset")
		require.Contains(t, lines[2]["reason"], "committed offset 9 is not in the log, which holds offsets 0 to 5")

		require.Equal(t, []int64{6, 10, 4, 5}, resolve(t, ctx, s, topic, consumer.FromGroup(group).OrReset(consumer.ResetLatest)))
		require.Len(t, logs.lines(t, resetMsg), 6)

		// ResetNone (the default): every partition that would reset is an
		// error, and nothing is reset.
		_, err := s.Resolve(ctx, topic, consumer.FromGroup(group))
		require.ErrorIs(t, err, consumer.ErrOutOfRange)
		require.ErrorIs(t, err, consumer.ErrNoCommittedOffset)
		require.ErrorContains(t, err, topic+"[1] offset 2: consumer: offset out of range: group "+strconv.Quote(group)+" committed it, the log holds offsets 5 to 10")
		require.ErrorContains(t, err, topic+"[2]: consumer: no committed offset for group "+strconv.Quote(group))
		require.ErrorContains(t, err, topic+"[3] offset 9: consumer: offset out of range")
		require.NotContains(t, err.Error(), topic+"[0]")
		require.Len(t, logs.lines(t, resetMsg), 6)

		// A group that never committed anything.
		none := group + ".none"
		require.Equal(t, []int64{10, 10, 4, 5}, resolve(t, ctx, s, topic, consumer.FromGroup(none).OrReset(consumer.ResetLatest)))
		_, err = s.Resolve(ctx, topic, consumer.FromGroup(none))
		require.ErrorIs(t, err, consumer.ErrNoCommittedOffset)
		require.Equal(t, 4, strings.Count(err.Error(), "no committed offset"))

		// Read-only: the source group's offsets are as committed, and the
		// group that never committed still has none.
		tps := []admin.TopicPartition{{Topic: topic, Partition: 0}, {Topic: topic, Partition: 1}, {Topic: topic, Partition: 2}, {Topic: topic, Partition: 3}}
		after, err := groupOffsets(t, c).GroupOffsets(ctx, group, tps)
		require.NoError(t, err)
		require.Equal(t, []int64{6, 2, -1, 9}, committedOffsets(after))
		after, err = groupOffsets(t, c).GroupOffsets(ctx, none, tps)
		require.NoError(t, err)
		require.Equal(t, []int64{-1, -1, -1, -1}, committedOffsets(after))

		// Reading from the group's offset.
		ps, err := s.Resolve(ctx, topic, consumer.FromGroup(group).OrReset(consumer.ResetLatest))
		require.NoError(t, err)
		require.NoError(t, s.Assign(ctx, ps))
		recs, err := s.Poll(ctx, 1, 10*time.Second)
		require.NoError(t, err)
		require.Len(t, recs, 1)
		require.Equal(t, consumer.Position{Topic: topic, Partition: 0, Offset: 6}, consumer.Position{Topic: recs[0].Topic, Partition: recs[0].Partition, Offset: recs[0].Offset})
	})
}

// groupOffsets returns a kord admin client of c, closed when t ends: what
// reads a group's committed offsets.
func groupOffsets(t *testing.T, c *kafkatest.Cluster) *admin.Client {
	t.Helper()
	a, err := admin.New(admin.Brokers(c.Brokers))
	require.NoError(t, err)
	t.Cleanup(func() { a.Close() })
	return a
}

func committedOffsets(cs []admin.Committed) []int64 {
	out := make([]int64, len(cs))
	for i, c := range cs {
		out[i] = c.Offset
	}
	return out
}

// The fetch queue bounds are kord's unless set: librdkafka's
// configuration log (debug=conf lists the settings that differ from its
// defaults) shows the queue bounds, and the Fetch requests kfake receives
// show fetch.max.bytes, which librdkafka derives from the queue bound unless
// it is set, and max.partition.fetch.bytes.
func TestFetchQueueDefaults(t *testing.T) {
	c := kafkatest.Fake(t)
	topic := c.CreateTopic(t, 2, nil)
	produce(t, c, topic, rec{p: 0}, rec{p: 1})
	type sizes struct{ max, partition int32 }
	var (
		mu    sync.Mutex
		fetch *sizes
	)
	c.Fake.ControlKey(int16(kmsg.Fetch), func(req kmsg.Request) (kmsg.Response, error, bool) {
		f := req.(*kmsg.FetchRequest)
		mu.Lock()
		defer mu.Unlock()
		for _, ft := range f.Topics {
			for _, fp := range ft.Partitions {
				fetch = &sizes{f.MaxBytes, fp.PartitionMaxBytes}
			}
		}
		return nil, nil, false // observe only
	})

	for _, tc := range []struct {
		name  string
		opts  []consumer.Opt
		conf  []string
		fetch sizes
	}{
		{"defaults", nil, []string{"queued.max.messages.kbytes = 2048", "queued.min.messages = 10000", "fetch.queue.backoff.ms = 10", "isolation.level = read_committed"}, sizes{2 << 20, 1 << 20}},
		{"queue set", []consumer.Opt{consumer.Set("queued.max.messages.kbytes", "8192"), consumer.Set("queued.min.messages", "500")},
			[]string{"queued.max.messages.kbytes = 8192", "queued.min.messages = 500"}, sizes{8 << 20, 1 << 20}},
		{"fetch set", []consumer.Opt{consumer.Set("fetch.max.bytes", "4000000"), consumer.Set("max.partition.fetch.bytes", "65536")},
			[]string{"queued.max.messages.kbytes = 2048", "fetch.max.bytes = 4000000"}, sizes{4000000, 65536}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mu.Lock()
			fetch = nil
			mu.Unlock()
			var logs logBuffer
			s := newSource(t, c, append([]consumer.Opt{consumer.Set("debug", "conf"),
				consumer.Logger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))}, tc.opts...)...)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			ps, err := s.Resolve(ctx, topic, consumer.Earliest)
			require.NoError(t, err)
			require.NoError(t, s.Assign(ctx, ps))
			for n := 0; n < 2; {
				recs, err := s.Poll(ctx, 10, 100*time.Millisecond)
				require.NoError(t, err)
				n += len(recs)
			}
			mu.Lock()
			got := fetch
			mu.Unlock()
			require.NotNil(t, got, "no Fetch request seen")
			require.Equal(t, tc.fetch, *got, "Fetch MaxBytes, PartitionMaxBytes")
			text := logs.String()
			for _, w := range tc.conf {
				require.Contains(t, text, "librdkafka: [thrd:app]:   "+w)
			}
		})
	}
	_, err := consumer.New(consumer.Brokers("127.0.0.1:1"), consumer.Set("queued.min.messages", "0"))
	require.ErrorIs(t, err, consumer.ErrConfig)
	require.ErrorContains(t, err, "queued.min.messages")
}
