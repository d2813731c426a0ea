package kafkaio_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kordproject/kord/checkpoint"
	"github.com/kordproject/kord/internal/rig/kafkatest"
	"github.com/kordproject/kord/internal/rig/syncbuf"
	"github.com/kordproject/kord/internal/rig/testjob"
	"github.com/kordproject/kord/kafkaio"
	"github.com/kordproject/kord/keyed"
	"github.com/kordproject/kord/keyed/connector"
	"github.com/kordproject/kord/producer"
	"github.com/kordproject/kord/serde"
)

// The counting job the tests run (internal/rig/testjob).
type (
	event           = testjob.Event
	result          = testjob.Result
	counter         = testjob.Counter
	tolerantCounter = testjob.TolerantCounter
)

// jobSpec describes the counting job between an input and an output
// topic, in the test process or in a child (see childMain).
type jobSpec struct {
	brokers, in, out, name, dir string
	interval                    time.Duration
	byPartition                 bool
	parallelism                 int
	mode                        checkpoint.Mode
	logger                      *slog.Logger
	opts                        []keyed.Opt   // more job options
	srcOpts                     []kafkaio.Opt // the source's options
	sinkOpts                    []kafkaio.Opt // the sink's options
	// echo, when set, is a second output topic: the results of even seq,
	// as echoes, through kafkaio.Output in the sink's transactions.
	echo string
}

// echo is a result sent on through a second sink.
type echo struct {
	Of    string `json:"of"` // uuid/seq
	Count int64  `json:"count"`
}

// byUUID keys each result by its uuid.
var byUUID = kafkaio.Key(func(r result) string { return r.UUID }, serde.String())

// client is the kafkaio client of cluster c.
func client(c *kafkatest.Cluster) *kafkaio.Client {
	return mustClient(kafkaio.Brokers(strings.Split(c.Brokers, ",")...))
}

// mustClient is kafkaio.NewClient for settings that cannot fail.
func mustClient(opts ...kafkaio.Opt) *kafkaio.Client {
	c, err := kafkaio.NewClient(opts...)
	if err != nil {
		panic(err)
	}
	return c
}

// newJob builds the job: a Kafka source of JSON events, keyed by
// partition or by uuid, a counter, and a Kafka sink of JSON results keyed
// by uuid.
func newJob(s jobSpec) (*keyed.Job, *kafkaio.Source[event], *kafkaio.Sink[result]) {
	opts := []keyed.Opt{keyed.Dir(s.dir), keyed.CheckpointInterval(s.interval)}
	if s.mode == checkpoint.AtLeastOnce {
		opts = append(opts, keyed.AtLeastOnce())
	}
	if s.logger != nil {
		opts = append(opts, keyed.Logger(s.logger))
	}
	j := keyed.NewJob(s.name, append(opts, s.opts...)...)
	client := mustClient(kafkaio.Brokers(strings.Split(s.brokers, ",")...))
	src := kafkaio.NewSource(client, s.in, serde.JSON[event](), s.srcOpts...).(*kafkaio.Source[event])
	sink := kafkaio.NewSink(client, s.out, serde.JSON[result](), append([]kafkaio.Opt{byUUID}, s.sinkOpts...)...).(*kafkaio.Sink[result])
	st := keyed.FromSource(j, "events", s.parallelism, connector.Source[event](src))
	newOp := func() keyed.Operator[event, result] { return &counter{} }
	if s.mode == checkpoint.AtLeastOnce {
		newOp = func() keyed.Operator[event, result] { return &tolerantCounter{} }
	}
	var out *keyed.Stream[result]
	if s.byPartition {
		out = keyed.Process(keyed.ByPartition(st), "count", s.parallelism, newOp)
	} else {
		out = keyed.Process(keyed.KeyByString("uuid", func(e event) string { return e.UUID }, st), "count", s.parallelism, newOp)
	}
	keyed.ToSink(out, "results", connector.Sink[result](sink))
	if s.echo != "" {
		even := keyed.MapValues(out.Filter(func(r result) bool { return r.Seq%2 == 0 }), func(r result) echo {
			return echo{Of: fmt.Sprintf("%s/%d", r.UUID, r.Seq), Count: r.Count}
		})
		keyed.ToSink(even, "echoes", kafkaio.Output(connector.Sink[result](sink), s.echo, serde.JSON[echo]()))
	}
	return j, src, sink
}

// fixture is an input and an output topic, the keys (user uuids) whose
// events go to the input, numbered per key, and the job between them.
type fixture struct {
	t        *testing.T
	c        *kafkatest.Cluster
	in, out  string
	parts    int32
	name     string // the job's name: transactional.id kord.<name>
	dir      string
	interval time.Duration
	keys     []string

	adminOnce sync.Once
	adminCl   *kgo.Client // admin requests (ends, diagnose, abortHanging): one per fixture

	// prodLog keeps the input producers' log (kord's and librdkafka's
	// lines at info and above), for a test whose input stalled.
	prodLog syncbuf.Buffer

	mu      sync.Mutex
	want    map[string]int64 // events produced per key
	n       int              // events produced
	planned int              // events produced or being produced
	r       *rand.Rand
}

func newFixture(t *testing.T, c *kafkatest.Cluster, parts int32, keys int) *fixture {
	f := &fixture{t: t, c: c, parts: parts, in: c.CreateTopic(t, parts, nil), out: c.CreateTopic(t, parts, nil),
		name: strings.ReplaceAll(kafkatest.TopicName(t), "/", "."), dir: t.TempDir(), interval: 150 * time.Millisecond,
		want: map[string]int64{}, r: rand.New(rand.NewPCG(11, uint64(keys)))}
	r := rand.New(rand.NewPCG(7, uint64(keys)))
	for i := 0; i < keys; i++ {
		f.keys = append(f.keys, fmt.Sprintf("%08x-%04x-4%03x-8%03x-%012x", r.Uint32(), r.Uint32()&0xffff, r.Uint32()&0xfff, r.Uint32()&0xfff, r.Uint64()&0xffffffffffff))
	}
	return f
}

func (f *fixture) spec(dir string) jobSpec {
	return jobSpec{brokers: f.c.Brokers, in: f.in, out: f.out, name: f.name, dir: dir, interval: f.interval, byPartition: true, parallelism: 2}
}

// build builds the job on the fixture's checkpoint directory.
func (f *fixture) build(edit func(*jobSpec)) (*keyed.Job, *kafkaio.Source[event], *kafkaio.Sink[result]) {
	s := f.spec(f.dir)
	if edit != nil {
		edit(&s)
	}
	return newJob(s)
}

// produce writes n more events at about rate per second (0: at once),
// through kord's producer, continuing each key's sequence.
func (f *fixture) produce(ctx context.Context, n, rate int) error {
	f.mu.Lock()
	f.planned += n
	f.mu.Unlock()
	return f.producePlanned(ctx, n, rate)
}

// producePlanned is produce for n events already counted in planned.
func (f *fixture) producePlanned(ctx context.Context, n, rate int) error {
	p, err := producer.New(serde.String(), serde.JSON[event](), producer.Brokers(f.c.Brokers),
		producer.Logger(slog.New(slog.NewTextHandler(&f.prodLog, &slog.HandlerOptions{Level: slog.LevelInfo}))))
	if err != nil {
		return err
	}
	defer p.Close()
	start := time.Now()
	for i := 0; i < n; i++ {
		f.mu.Lock()
		k := f.keys[f.r.IntN(len(f.keys))]
		f.mu.Unlock()
		ev := f.next(k, false)
		if err := p.Produce(ctx, producer.Record[string, event]{Topic: f.in, Key: k, Value: ev}, nil); err != nil {
			return err
		}
		if rate > 0 && i%100 == 99 {
			if ahead := time.Duration(i+1)*time.Second/time.Duration(rate) - time.Since(start); ahead > 0 {
				time.Sleep(ahead)
			}
		}
	}
	return p.Flush(ctx)
}

// next returns key's next event and counts it as produced (and, with
// plan, as planned).
func (f *fixture) next(key string, plan bool) event {
	f.mu.Lock()
	defer f.mu.Unlock()
	ev := event{UUID: key, Seq: f.want[key]}
	f.want[key]++
	f.n++
	if plan {
		f.planned++
	}
	return ev
}

// fill produces n events at once.
func (f *fixture) fill(n int) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	require.NoError(f.t, f.produce(ctx, n, 0))
}

// produceInBackground produces n events at rate a second on another
// goroutine, under a context that ends after timeout (or with the test),
// and returns the channel that gets produce's result.
func (f *fixture) produceInBackground(n, rate int, timeout time.Duration) <-chan error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	f.t.Cleanup(cancel)
	f.mu.Lock()
	f.planned += n
	f.mu.Unlock()
	errc := make(chan error, 1)
	go func() { errc <- f.producePlanned(ctx, n, rate) }()
	return errc
}

// total returns how many events were produced.
func (f *fixture) total() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n
}

// expected returns how many events were produced or are being produced
// (produceInBackground).
func (f *fixture) expected() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.planned
}

// runUntil runs j in this process until every expected event's result is
// visible to read_committed readers, then stops it gracefully and closes
// its sink.
func (f *fixture) runUntil(ctx context.Context, j *keyed.Job, sink *kafkaio.Sink[result]) {
	t := f.t
	t.Helper()
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	go func() { done <- j.Run(rctx) }()
	recs := f.c.ReadAll(t, f.out, f.expected(), true, 2*time.Minute)
	stop()
	require.NoError(t, <-done)
	require.NoError(t, sink.Close())
	require.Equal(t, f.expected(), len(recs))
}

// verify reads the output with read_committed, checks every event's result
// is there exactly once, in per-key order, with the right count, and that
// no transaction is left open.
func (f *fixture) verify() {
	f.t.Helper()
	if problems := f.check(); len(problems) > 0 {
		f.t.Fatalf("output (read_committed) is not exactly-once:\n%s", strings.Join(problems, "\n"))
	}
	f.requireNoOpenTransaction()
}

// check reads the output with read_committed and returns what is wrong
// with it (at most 20 findings, then a count): a result lost, duplicated,
// out of per-key order, or with the wrong count.
func (f *fixture) check() []string {
	t := f.t
	n := f.total()
	recs := f.c.ReadAll(t, f.out, n+1, true, 3*time.Second)
	if len(recs) < n {
		recs = f.c.ReadAll(t, f.out, n+1, true, 2*time.Minute)
	}
	var problems []string
	add := func(format string, args ...any) {
		problems = append(problems, fmt.Sprintf(format, args...))
	}
	if len(recs) != n {
		add("%d results for %d input events", len(recs), n)
	}
	next := map[string]int64{}
	dups := 0
	for _, r := range recs {
		var res result
		if err := json.Unmarshal(r.Value, &res); err != nil || res.UUID != string(r.Key) {
			add("%s[%d]@%d: bad result %q (%v)", r.Topic, r.Partition, r.Offset, r.Value, err)
			continue
		}
		// A key lives in one partition, read in order: per-key order.
		switch w := next[res.UUID]; {
		case res.Seq < w:
			dups++
			add("key %s: result for seq %d again (duplicate) at %s[%d]@%d", res.UUID, res.Seq, r.Topic, r.Partition, r.Offset)
			continue
		case res.Seq > w:
			add("key %s: result for seq %d, want %d (loss or reorder) at %s[%d]@%d", res.UUID, res.Seq, w, r.Topic, r.Partition, r.Offset)
		}
		if res.Count != res.Seq+1 {
			add("key %s seq %d: count %d: state and output disagree", res.UUID, res.Seq, res.Count)
		}
		next[res.UUID] = res.Seq + 1
	}
	f.mu.Lock()
	for k, w := range f.want {
		if next[k] != w {
			add("key %s: results up to seq %d, want %d", k, next[k], w)
		}
	}
	f.mu.Unlock()
	if dups > 0 {
		add("%d duplicates in all", dups)
	}
	if len(problems) > 20 {
		problems = append(problems[:20], fmt.Sprintf("... %d findings in all", len(problems)))
	}
	return problems
}

// requireNoOpenTransaction checks that every output partition's last
// stable offset equals its high watermark: no transaction is left open to
// stall read_committed readers.
func (f *fixture) requireNoOpenTransaction() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	hw, err := f.ends(ctx, f.out, 0)
	require.NoError(f.t, err)
	lso, err := f.ends(ctx, f.out, 1)
	require.NoError(f.t, err)
	require.Equal(f.t, hw, lso, "high watermark vs last stable offset: a transaction is open")
}

// admin returns the fixture's client for admin requests, made once: a
// client per request (polled every few milliseconds) piled up until the
// test ended and, under the race detector, ran the test binary out of
// memory.
func (f *fixture) admin() *kgo.Client {
	f.adminOnce.Do(func() { f.adminCl = f.c.Client(f.t) })
	return f.adminCl
}

// ends returns every partition's end of topic: the high watermark
// (isolation 0) or the last stable offset (isolation 1).
func (f *fixture) ends(ctx context.Context, topic string, isolation int8) (map[int32]int64, error) {
	return f.listOffsets(ctx, topic, isolation, -1)
}

// logStarts returns every partition's log start offset of topic.
func (f *fixture) logStarts(ctx context.Context, topic string) (map[int32]int64, error) {
	return f.listOffsets(ctx, topic, 0, -2)
}

// listOffsets is Kafka's ListOffsets of every partition of topic at
// timestamp (-1 the end, -2 the log start).
func (f *fixture) listOffsets(ctx context.Context, topic string, isolation int8, timestamp int64) (map[int32]int64, error) {
	req := kmsg.NewPtrListOffsetsRequest()
	req.IsolationLevel = isolation
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	for p := int32(0); p < f.parts; p++ {
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition = p
		rp.Timestamp = timestamp
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, f.admin())
	if err != nil {
		return nil, err
	}
	out := map[int32]int64{}
	for _, p := range resp.Topics[0].Partitions {
		if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
			return nil, fmt.Errorf("list offsets %s[%d]: %w", topic, p.Partition, err)
		}
		out[p.Partition] = p.Offset
	}
	return out, nil
}

// diagnose describes, for a test whose output fell short, where each
// partition stands: the input's end, the offset the commit group recorded
// (and its record), and the output's high watermark against its last stable
// offset (an open transaction holds read_committed readers back). done is
// true when Kafka shows the job finished: every input partition's
// committed offset at its end, and no output transaction open.
func (f *fixture) diagnose() (report string, done bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var b strings.Builder
	done = true
	inEnd, err := f.ends(ctx, f.in, 0)
	if err != nil {
		fmt.Fprintf(&b, "input ends: %v\n", err)
		done = false
	}
	hw, err := f.ends(ctx, f.out, 0)
	if err != nil {
		fmt.Fprintf(&b, "output high watermarks: %v\n", err)
		done = false
	}
	lso, err := f.ends(ctx, f.out, 1)
	if err != nil {
		fmt.Fprintf(&b, "output last stable offsets: %v\n", err)
		done = false
	}
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Group = kafkaio.CommitGroup(f.name)
	req.RequireStable = true
	committed := map[int32]int64{}
	records := map[int32]string{}
	if resp, err := req.RequestWith(ctx, f.admin()); err != nil {
		fmt.Fprintf(&b, "commit group %s: %v\n", req.Group, err)
		done = false
	} else if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		fmt.Fprintf(&b, "commit group %s: %v\n", req.Group, err)
		done = false
	} else {
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if t.Topic == f.in {
					committed[p.Partition] = p.Offset
					records[p.Partition] = ptrString(p.Metadata)
					if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
						records[p.Partition] = err.Error()
					}
				}
			}
		}
	}
	for p := int32(0); p < f.parts; p++ {
		fmt.Fprintf(&b, "partition %d: input end %d, committed %d %q; output high watermark %d, last stable %d\n",
			p, inEnd[p], committed[p], records[p], hw[p], lso[p])
		if committed[p] != inEnd[p] || hw[p] != lso[p] {
			done = false
		}
	}
	return b.String(), done
}

// abortHanging looks for transactions the broker left hanging (KIP-664's
// find-hanging): an open transaction on an output or __consumer_offsets
// partition whose producer is not the one the transaction coordinator has
// ongoing for the job's transactional.id (another producer id, or an
// older epoch). It aborts each, as kafka-transactions.sh abort does
// (WriteTxnMarkers to the partition's leader), and reports what it found.
// Call it only long after the transaction timeout: then no open
// transaction of an older epoch can be a live one.
func (f *fixture) abortHanging() (report string, aborted int) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl := f.admin()
	var b strings.Builder
	dt := kmsg.NewPtrDescribeTransactionsRequest()
	tid := kafkaio.TransactionalID(f.name)
	dt.TransactionalIDs = []string{tid}
	var live struct {
		state string
		pid   int64
		epoch int16
	}
	if resp, err := dt.RequestWith(ctx, cl); err != nil {
		fmt.Fprintf(&b, "describe transaction %s: %v\n", tid, err)
		return b.String(), 0
	} else if len(resp.TransactionStates) == 1 {
		ts := resp.TransactionStates[0]
		live.state, live.pid, live.epoch = ts.State, ts.ProducerID, ts.ProducerEpoch
		fmt.Fprintf(&b, "coordinator: %s is %s, producer %d epoch %d (error %v)\n", tid, ts.State, ts.ProducerID, ts.ProducerEpoch, kerr.ErrorForCode(ts.ErrorCode))
	}
	dp := kmsg.NewPtrDescribeProducersRequest()
	for topic, n := range map[string]int32{f.out: f.parts, "__consumer_offsets": 4} {
		rt := kmsg.NewDescribeProducersRequestTopic()
		rt.Topic = topic
		for p := int32(0); p < n; p++ {
			rt.Partitions = append(rt.Partitions, p)
		}
		dp.Topics = append(dp.Topics, rt)
	}
	resp, err := dp.RequestWith(ctx, cl)
	if err != nil {
		fmt.Fprintf(&b, "describe producers: %v\n", err)
		return b.String(), 0
	}
	for _, rt := range resp.Topics {
		for _, rp := range rt.Partitions {
			if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
				fmt.Fprintf(&b, "%s[%d]: describe producers: %v\n", rt.Topic, rp.Partition, err)
				continue
			}
			for _, ap := range rp.ActiveProducers {
				if ap.CurrentTxnStartOffset < 0 {
					continue
				}
				hanging := ap.ProducerID != live.pid || int16(ap.ProducerEpoch) < live.epoch
				owner := ""
				if hanging && ap.ProducerID != live.pid {
					// __consumer_offsets is the broker's: another test's
					// job (CI runs several on one broker) may have a live
					// transaction in it. A producer id a coordinator knows
					// under another transactional id is that job's.
					owner = f.transactionalIDOf(ctx, ap.ProducerID)
					hanging = owner == "" || owner == tid
				}
				fmt.Fprintf(&b, "%s[%d]: open transaction from offset %d, producer %d epoch %d (transactional id %q), coordinator epoch %d: hanging %v\n",
					rt.Topic, rp.Partition, ap.CurrentTxnStartOffset, ap.ProducerID, ap.ProducerEpoch, owner, ap.CoordinatorEpoch, hanging)
				if !hanging {
					continue
				}
				wm := kmsg.NewPtrWriteTxnMarkersRequest()
				m := kmsg.NewWriteTxnMarkersRequestMarker()
				m.ProducerID, m.ProducerEpoch, m.Committed, m.CoordinatorEpoch = ap.ProducerID, int16(ap.ProducerEpoch), false, ap.CoordinatorEpoch
				mt := kmsg.NewWriteTxnMarkersRequestMarkerTopic()
				mt.Topic, mt.Partitions = rt.Topic, []int32{rp.Partition}
				m.Topics = append(m.Topics, mt)
				wm.Markers = append(wm.Markers, m)
				wresp, err := wm.RequestWith(ctx, cl)
				if err != nil {
					fmt.Fprintf(&b, "  abort: %v\n", err)
					continue
				}
				for _, wmk := range wresp.Markers {
					for _, wt := range wmk.Topics {
						for _, wp := range wt.Partitions {
							if err := kerr.ErrorForCode(wp.ErrorCode); err != nil {
								fmt.Fprintf(&b, "  abort %s[%d]: %v\n", wt.Topic, wp.Partition, err)
							} else {
								fmt.Fprintf(&b, "  aborted %s[%d]\n", wt.Topic, wp.Partition)
								aborted++
							}
						}
					}
				}
			}
		}
	}
	return b.String(), aborted
}

// transactionalIDOf returns the transactional id a transaction
// coordinator holds producer id pid under (Kafka's ListTransactions,
// KIP-664), "" when none does.
func (f *fixture) transactionalIDOf(ctx context.Context, pid int64) string {
	lt := kmsg.NewPtrListTransactionsRequest()
	lt.ProducerIDFilters = []int64{pid}
	shards := f.admin().RequestSharded(ctx, lt)
	for _, sh := range shards {
		if sh.Err != nil {
			continue
		}
		for _, ts := range sh.Resp.(*kmsg.ListTransactionsResponse).TransactionStates {
			if ts.ProducerID == pid {
				return ts.TransactionalID
			}
		}
	}
	return ""
}

func ptrString(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// logTo returns a text logger at level writing to buf, which also calls
// each (if not nil) with every record's message and attributes, on the
// logging goroutine.
func logTo(buf *syncbuf.Buffer, level slog.Level, each func(msg string, attrs map[string]string)) *slog.Logger {
	return slog.New(&hookHandler{Handler: slog.NewTextHandler(buf, &slog.HandlerOptions{Level: level}), each: each})
}

type hookHandler struct {
	slog.Handler
	attrs []slog.Attr
	each  func(msg string, attrs map[string]string)
}

func (h *hookHandler) Handle(ctx context.Context, r slog.Record) error {
	if h.each != nil {
		m := map[string]string{}
		for _, a := range h.attrs {
			m[a.Key] = a.Value.String()
		}
		r.Attrs(func(a slog.Attr) bool {
			m[a.Key] = a.Value.String()
			return true
		})
		h.each(r.Message, m)
	}
	return h.Handler.Handle(ctx, r)
}

func (h *hookHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &hookHandler{Handler: h.Handler.WithAttrs(as), attrs: append(append([]slog.Attr(nil), h.attrs...), as...), each: h.each}
}

func (h *hookHandler) WithGroup(name string) slog.Handler {
	return &hookHandler{Handler: h.Handler.WithGroup(name), attrs: h.attrs, each: h.each}
}

// instanceJob is one process's job of a job on several processes: the
// fixture's job, as instance id, on the fixture's shared directory.
type instanceJob struct {
	id      string
	j       *keyed.Job
	sink    interface{ Close() error }
	commits atomic.Int64
	slow    atomic.Bool // each commit waits 2 s before it sends its offsets
	stop    context.CancelFunc
	done    chan error
}

// end stops the instance gracefully (a final checkpoint) and closes its
// sink.
func (ij *instanceJob) end(t *testing.T, log *syncbuf.Buffer) {
	t.Helper()
	ij.stop()
	select {
	case err := <-ij.done:
		require.NoError(t, err, "instance %s\n%s", ij.id, log)
	case <-time.After(2 * time.Minute):
		t.Fatalf("instance %s did not stop\n%s", ij.id, log)
	}
	require.NoError(t, ij.sink.Close())
}
