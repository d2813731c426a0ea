package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kordproject/kord/examples/accesslog"
	"github.com/kordproject/kord/kafkaio"
	"github.com/kordproject/kord/keyed"
	"github.com/kordproject/kord/kordhttp"
	"github.com/kordproject/kord/serde"
)

// Out is what the job writes: a window's result (Kind "window") to the
// windows topic, or a late event (Kind "late") to the late topic, keyed
// by the pattern in both.
type Out struct {
	Kind         string    `json:"kind"`
	Pattern      string    `json:"pattern"`
	WindowStart  time.Time `json:"windowStart,omitzero"`
	WindowEnd    time.Time `json:"windowEnd,omitzero"`
	Count        int64     `json:"count,omitzero"`
	Errors       int64     `json:"errors,omitzero"` // status 500 and above
	P99LatencyMs float64   `json:"p99LatencyMs,omitzero"`
	Late         *Access   `json:"late,omitempty"`
}

const (
	kindWindow = "window"
	kindLate   = "late"
)

// windowSize is the length of the job's tumbling windows.
const windowSize = time.Minute

type summary struct {
	processed   bool // the process phase ran in this invocation
	checkpoints int
	crashed     bool
	recovery    time.Duration
	lateCounted int64 // keyed.Job.LateRecords, over every incarnation
	deadCounted int64 // keyed.Job.DeadLetters, over every incarnation
	elapsed     time.Duration
}

// windowResult is a window's result from its events: their count, the
// server errors among them, and the 99th percentile of their latency.
func windowResult(pattern string, win keyed.Window, events []Access) Out {
	out := Out{Kind: kindWindow, Pattern: pattern, WindowStart: win.Start.UTC(), WindowEnd: win.End.UTC(), Count: int64(len(events))}
	latencies := make([]float64, len(events))
	for i, a := range events {
		latencies[i] = a.LatencyMs
		if a.Status >= 500 {
			out.Errors++
		}
	}
	out.P99LatencyMs = p99(latencies)
	return out
}

// p99 returns the 99th percentile of xs by the nearest-rank method: the
// smallest value such that at least 99% of xs are at or below it, the
// ceil(0.99*n)-th in ascending order (Hyndman and Fan's definition 1, as
// in NIST's Engineering Statistics Handbook, 7.2.6.2). It sorts xs; 0 for
// none.
func p99(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	slices.Sort(xs)
	// ceil(99n/100) in integers, exact for every n with no argument about
	// how 0.99*n rounds in floating point.
	return xs[(99*len(xs)+99)/100-1]
}

// accessSerde reads access events as JSON, and refuses one that the job
// could not window: without a time (keyed fails the job on a record whose
// timestamp extractor gives the zero time, keyed/job.go, Stream.Timestamps)
// or without a URI. A refused record goes to the dead-letter topic, as
// one that is not JSON does.
type accessSerde struct{ serde.Serde[Access] }

func newAccessSerde() accessSerde { return accessSerde{serde.JSON[Access]()} }

func (s accessSerde) Decode(b []byte) (Access, error) {
	a, err := s.Serde.Decode(b)
	switch {
	case err != nil:
		return a, err
	case a.Time.Before(time.Unix(0, 0)):
		return a, fmt.Errorf("access event %q: no time (or one before 1970)", a.ID)
	case a.IdentityURI == "":
		return a, fmt.Errorf("access event %q: no identityUri", a.ID)
	}
	return a, nil
}

// errOnPurpose is the failure -crash causes after the second commit.
var errOnPurpose = errors.New("failed on purpose, after the second checkpoint committed")

// process runs the keyed job over the input as it stands when the job
// starts (a bounded source), failing it once after its second committed
// checkpoint when o.crash is set.
//
// Which events are late is not fixed by the input: it depends on the
// watermark when each event comes, so on how the source tasks' reads of
// the partitions interleave, and on where a restore resumes. The check
// (verify) takes the late events from the late topic and requires every
// other one in its window.
func process(ctx context.Context, o options, norm Normalizer, sum *summary) error {
	// The checkpoints of a job on topics named with -input go where the
	// job's name says (keyed.DefaultDir), so that a later -phase process
	// on the same input resumes; a run on fresh topics uses a temporary
	// directory.
	dir := o.dir
	if dir == "" && o.freshTopics {
		d, err := os.MkdirTemp("", "kord-urinormalize-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	// The job's name gives the sink its transactional.id and commit group:
	// one per input topic, so that runs on fresh topics never meet.
	name := strings.NewReplacer(".", "-").Replace("urinormalize-" + o.topic)
	var commits atomic.Int64
	var crashedAt atomic.Int64 // unix nanos
	var recovered atomic.Int64
	crash := o.crash
	// onCommit sees every committed checkpoint (keyed.OnCommit): it counts
	// them, measures the recovery, and fails the job once, after the
	// second commit, as a failing task would. The restart strategy then
	// restarts it from the checkpoint Kafka recorded.
	// runCtx is the jobs' context: done when the output is complete (or
	// the program is stopped), and the job then stops with a final
	// checkpoint, which is not failed on purpose.
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	onCommit := func(uint64) error {
		n := commits.Add(1)
		if at := crashedAt.Load(); at != 0 && recovered.Load() == 0 {
			recovered.Store(time.Now().UnixNano() - at)
		}
		if crash && n == 2 && runCtx.Err() == nil && crashedAt.CompareAndSwap(0, time.Now().UnixNano()) {
			sum.crashed = true
			o.say("\njob failed on purpose after its second commit; the restart strategy restarts it from the checkpoint Kafka recorded\n")
			return errOnPurpose
		}
		return nil
	}
	lateTopic := o.lateTopic()
	build := func() *keyed.Job {
		opts := []keyed.Opt{keyed.CheckpointInterval(o.interval), keyed.RestartStrategy(keyed.FixedDelay(3, time.Second)), keyed.OnCommit(onCommit)}
		if dir != "" {
			opts = append(opts, keyed.Dir(dir))
		}
		j := keyed.NewJob(name, opts...)
		src := kafkaio.NewSource(o.client, o.topic, newAccessSerde(), kafkaio.Bounded())
		sink := kafkaio.NewSink(o.client, o.windowsTopic(), serde.JSON[Out](),
			kafkaio.Key(func(v Out) string { return v.Pattern }, serde.String()),
			kafkaio.SideOutput(func(v Out) string {
				if v.Kind == kindLate {
					return lateTopic
				}
				return ""
			}, lateTopic),
			kafkaio.DeadLetterTopic(o.dlqTopic()))
		s := keyed.FromSource(j, "access", 2, src).
			Timestamps(func(a Access, _ time.Time) time.Time { return a.Time }).
			Watermarks(o.lateness).
			Idleness(o.idleness)
		if o.rulesTopic != "" {
			keyed.ToSink(normalizedWindows(o, j, s, norm), "results", sink)
			return j
		}
		// The key is the pattern: normalizing in the key function is all
		// the rewriting there is, and each window's result takes its
		// pattern from the key.
		k := keyed.KeyByString("pattern", func(a Access) string { return norm.Pattern(a.IdentityURI) }, s)
		out := keyed.WindowApply(k, "windows", 2, keyed.Tumbling(windowSize).AllowedLateness(o.allowedLateness), serde.JSON[Access](),
			func(pattern string, win keyed.Window, events []Access) Out {
				// The key is valid during the call only (keyed.Operator),
				// and the result outlives it.
				return windowResult(strings.Clone(pattern), win, events)
			},
			func(pattern string, a Access) (Out, bool) {
				return Out{Kind: kindLate, Pattern: strings.Clone(pattern), Late: &a}, true
			})
		keyed.ToSink(out, "results", sink)
		return j
	}

	watched := make(chan struct{})
	if o.quiet {
		close(watched)
	} else {
		go func() {
			defer close(watched)
			watch(runCtx, o)
		}()
	}
	// One Job for the whole process: a Run after another resets it, and
	// its figures (-http's) and counts go on across them.
	j := build()
	if o.http != "" {
		srv, err := kordhttp.Serve(o.http, []*keyed.Job{j}, kordhttp.ReadyWithin(10*o.interval+30*time.Second))
		if err != nil {
			stop()
			<-watched
			return fmt.Errorf("-http: %w", err)
		}
		defer srv.Close()
		o.say("status page, metrics, health and readiness on http://%s/\n", srv.Addr())
	}
	start := time.Now()
	for {
		err := j.Run(runCtx)
		sum.lateCounted = j.LateRecords()
		sum.deadCounted = j.DeadLetters()
		if errors.Is(err, errOnPurpose) {
			// The failure met the end of the bounded input: a stopping
			// job is not restarted by its strategy, so start it again
			// here, as a supervisor would.
			continue
		}
		if err != nil {
			stop()
			<-watched
			return err
		}
		break
	}
	stop()
	<-watched
	if ctx.Err() != nil {
		return fmt.Errorf("stopped (%w) after a final checkpoint, before the end of %s", ctx.Err(), o.topic)
	}
	sum.processed = true
	sum.checkpoints = int(commits.Load())
	sum.recovery = time.Duration(recovered.Load())
	sum.elapsed = time.Since(start)
	o.say("processed in %v\n", sum.elapsed.Round(time.Millisecond))
	return nil
}

// watch shows progress until ctx is done: how far event time has come in
// the committed window results, and how many results, late events and
// dead letters are committed, as a read_committed reader sees them.
func watch(ctx context.Context, o options) {
	show := func(format string, args ...any) { fmt.Fprintf(o.out(), "\r"+format, args...) }
	c, err := o.newReader(kafka.ConfigMap{
		"group.id": "urinormalize-watch", "enable.auto.commit": false, "isolation.level": "read_committed",
	})
	if err != nil {
		show("progress not shown: %v\n", err)
		return
	}
	defer c.Close()
	var tps []kafka.TopicPartition
	for _, topic := range []string{o.windowsTopic(), o.lateTopic(), o.dlqTopic()} {
		md, err := c.GetMetadata(&topic, false, 10_000)
		if err != nil {
			show("progress not shown: %s: %v\n", topic, err)
			return
		}
		for _, p := range md.Topics[topic].Partitions {
			tps = append(tps, kafka.TopicPartition{Topic: &topic, Partition: p.ID, Offset: kafka.OffsetBeginning})
		}
	}
	if err := c.Assign(tps); err != nil {
		show("progress not shown: %v\n", err)
		return
	}
	span := time.Duration(o.minutes) * time.Minute
	var reached time.Duration
	results, late, dead := 0, 0, 0
	line := func() {
		done := min(max(40*int(reached/time.Second)/max(int(span/time.Second), 1), 0), 40)
		show("[%-40s] event time %v of %v in committed windows; %d window results, %d late, %d dead letters",
			strings.Repeat("#", done), reached, span, results, late, dead)
	}
	last := time.Now()
	for ctx.Err() == nil {
		if m, ok := c.Poll(100).(*kafka.Message); ok && m.TopicPartition.Error == nil {
			switch *m.TopicPartition.Topic {
			case o.windowsTopic():
				results++
				var v Out
				if json.Unmarshal(m.Value, &v) == nil {
					reached = max(reached, v.WindowEnd.Sub(base))
				}
			case o.lateTopic():
				late++
			default:
				dead++
			}
		}
		if time.Since(last) > 200*time.Millisecond {
			last = time.Now()
			line()
		}
	}
	line()
	fmt.Fprintln(o.out())
}

// normalized is an access event with its URI's pattern: what the
// normalize stage of a job with -rules-topic sends to the windows.
type normalized struct {
	Pattern string `json:"pattern"`
	Access
}

// normalizeOp rewrites each event's URI with the rules of -rules-topic
// (broadcast state: the topic's latest rule file, the same in every task)
// tried before base's.
type normalizeOp struct {
	base  Normalizer
	topic string
	log   *slog.Logger
	rules *keyed.BroadcastState[string, string]
	norm  Normalizer // base with the topic's rules first; rebuilt when they change
	text  string     // the rule file norm was built from
	built bool
}

func (n *normalizeOp) Open(b *keyed.Backend) (err error) {
	n.rules, err = keyed.BroadcastMap(b, "rules", serde.String(), serde.String())
	return err
}

func (n *normalizeOp) Process(_ []byte, a Access, out *keyed.Collector[normalized]) error {
	text, _ := n.rules.Get("rules")
	if !n.built || text != n.text {
		rules, err := accesslog.ParseRules(n.topic, strings.NewReader(text))
		if err != nil {
			// Checked when it came (ProcessBroadcast): not reached.
			return err
		}
		n.norm = Normalizer{Rules: append(rules, n.base.Rules...)}
		n.text, n.built = text, true
	}
	out.Emit(normalized{Pattern: n.norm.Pattern(a.IdentityURI), Access: a})
	return nil
}

// ProcessBroadcast takes a new rule file from the topic; a null value (a
// tombstone) removes the topic's rules. A file that does not parse is
// refused with a warning naming the topic, and the rules in force stay.
func (n *normalizeOp) ProcessBroadcast(v *string, _ *keyed.Collector[normalized]) error {
	if v == nil {
		n.rules.Delete("rules")
		return nil
	}
	if _, err := accesslog.ParseRules(n.topic, strings.NewReader(*v)); err != nil {
		n.log.Warn("urinormalize: a rule file from the rules topic does not parse; the rules in force stay", "topic", n.topic, "err", err)
		return nil
	}
	n.rules.Put("rules", *v)
	return nil
}

// latestRules reads the rules topic to its end and parses its latest
// value: the rules a run on it ended with.
func latestRules(ctx context.Context, o options) ([]Rule, error) {
	read, err := readAll(ctx, o, []string{o.rulesTopic})
	if err != nil {
		return nil, err
	}
	var last *kafka.Message
	for _, m := range read[o.rulesTopic] {
		if last == nil || m.Timestamp.After(last.Timestamp) || m.Timestamp.Equal(last.Timestamp) && m.TopicPartition.Offset > last.TopicPartition.Offset {
			last = m
		}
	}
	if last == nil || last.Value == nil {
		return nil, nil
	}
	return accesslog.ParseRules(o.rulesTopic, strings.NewReader(string(last.Value)))
}

// normalizedWindows is the job of -rules-topic: a normalize stage keyed by
// URI, with the rules topic as its broadcast input (auxiliary: it never
// ends, and the job still ends with its access input), then the windows
// per pattern as without it.
func normalizedWindows(o options, j *keyed.Job, s *keyed.Stream[Access], norm Normalizer) *keyed.Stream[Out] {
	rules := keyed.FromSource(j, "rules", 1, kafkaio.NewSource(o.client, o.rulesTopic, serde.Nullable(serde.String()))).Auxiliary()
	byURI := keyed.KeyByString("uri", func(a Access) string { return a.IdentityURI }, s)
	ns := keyed.ProcessBroadcast(byURI, keyed.Broadcast(rules), "normalize", 2, func() keyed.BroadcastOperator[Access, *string, normalized] {
		return &normalizeOp{base: norm, topic: o.rulesTopic, log: o.log}
	})
	k := keyed.KeyByString("pattern", func(n normalized) string { return n.Pattern }, ns)
	return keyed.WindowApply(k, "windows", 2, keyed.Tumbling(windowSize).AllowedLateness(o.allowedLateness), serde.JSON[normalized](),
		func(pattern string, win keyed.Window, ns []normalized) Out {
			events := make([]Access, len(ns))
			for i, n := range ns {
				events[i] = n.Access
			}
			return windowResult(strings.Clone(pattern), win, events)
		},
		func(pattern string, n normalized) (Out, bool) {
			a := n.Access
			return Out{Kind: kindLate, Pattern: strings.Clone(pattern), Late: &a}, true
		})
}
