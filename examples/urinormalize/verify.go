package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// winKey names one window of one pattern.
type winKey struct {
	pattern string
	start   int64 // Unix ms
}

// problems collects what the check finds wrong, keeping the first few to
// show.
type problems struct {
	n     int
	shown []string
}

func (p *problems) add(format string, args ...any) {
	p.n++
	if len(p.shown) < 10 {
		p.shown = append(p.shown, fmt.Sprintf(format, args...))
	}
}

// verify reads the windows, late and dead-letter topics to their end as
// a read_committed consumer sees them, with confluent-kafka-go and none
// of kord's code, and checks them against a model of the input, generated
// again from the seed:
//
//   - every malformed record is in the dead-letter topic exactly once,
//     with the kord.dlq.topic header naming the input, and nothing else is;
//   - every late event is an event of the input, exactly as generated,
//     under its pattern, and none is there twice;
//   - the last result of each window (a window fires again when an event
//     comes within its allowed lateness, and the results of one pattern
//     are in one partition, in order) has the count, the errors and the
//     99th percentile of the window's events that are not in the late
//     topic, and no window without such events has a result.
//
// Which events are late depends on the watermark when each came, so the
// model takes the late set from the late topic; the checks above then
// require every event in exactly one of the two places.
func verify(ctx context.Context, o options, norm Normalizer, sum *summary) error {
	var valid []*Access
	byID := map[string]*Access{}
	farBehind := map[string]bool{}
	malformed := map[string]int{} // value -> times read back
	for in := range generate(o.gen()) {
		if in.event == nil {
			malformed[string(in.value)] = 0
			continue
		}
		valid = append(valid, in.event)
		byID[in.event.ID] = in.event
		if in.farBehind {
			farBehind[in.event.ID] = true
		}
	}

	topics := []string{o.windowsTopic(), o.lateTopic(), o.dlqTopic()}
	read, err := readAll(ctx, o, topics)
	if err != nil {
		return err
	}
	var bad problems
	where := func(m *kafka.Message) string {
		return fmt.Sprintf("%s[%d]@%d", *m.TopicPartition.Topic, m.TopicPartition.Partition, m.TopicPartition.Offset)
	}

	// Dead letters.
	dead := 0
	for _, m := range read[o.dlqTopic()] {
		dead++
		if src := header(m, "kord.dlq.topic"); src != o.topic {
			bad.add("%s: dead letter from topic %q (header kord.dlq.topic), want %s", where(m), src, o.topic)
		}
		n, ok := malformed[string(m.Value)]
		switch {
		case !ok:
			bad.add("%s: dead letter %.60q is no malformed record of the input", where(m), m.Value)
		case n > 0:
			bad.add("%s: dead letter %.60q is there again (this one of %s[%s]@%s)", where(m), m.Value,
				header(m, "kord.dlq.topic"), header(m, "kord.dlq.partition"), header(m, "kord.dlq.offset"))
		}
		if ok {
			malformed[string(m.Value)] = n + 1
		}
	}
	for v, n := range malformed {
		if n == 0 {
			bad.add("malformed record %.60q of %s is not in the dead-letter topic %s", v, o.topic, o.dlqTopic())
		}
	}

	// Late events.
	late := map[string]bool{}
	lateFar := 0
	for _, m := range read[o.lateTopic()] {
		var v Out
		if err := json.Unmarshal(m.Value, &v); err != nil {
			bad.add("%s: %v", where(m), err)
			continue
		}
		if v.Kind != kindLate || v.Late == nil {
			bad.add("%s: kind %q, late event %v: want a late event", where(m), v.Kind, v.Late)
			continue
		}
		want, ok := byID[v.Late.ID]
		switch {
		case !ok:
			bad.add("%s: late event %q is no event of the input", where(m), v.Late.ID)
			continue
		case late[v.Late.ID]:
			bad.add("%s: late event %q is there again", where(m), v.Late.ID)
			continue
		case !sameAccess(*v.Late, *want):
			bad.add("%s: late event %+v, want %+v as generated", where(m), *v.Late, *want)
		}
		if p := norm.Pattern(want.IdentityURI); v.Pattern != p || string(m.Key) != p {
			bad.add("%s: late event %q under pattern %q (record key %q), want %q", where(m), v.Late.ID, v.Pattern, m.Key, p)
		}
		late[v.Late.ID] = true
		if farBehind[v.Late.ID] {
			lateFar++
		}
	}

	// Window results: the last of each window.
	last := map[winKey]Out{}
	results := 0
	for _, m := range read[o.windowsTopic()] {
		results++
		var v Out
		if err := json.Unmarshal(m.Value, &v); err != nil {
			bad.add("%s: %v", where(m), err)
			continue
		}
		k := winKey{v.Pattern, v.WindowStart.UnixMilli()}
		switch {
		case v.Kind != kindWindow:
			bad.add("%s: kind %q in the windows topic", where(m), v.Kind)
			continue
		case string(m.Key) != v.Pattern:
			bad.add("%s: record key %q, result for pattern %q", where(m), m.Key, v.Pattern)
		case k.start%windowSize.Milliseconds() != 0 || v.WindowEnd.Sub(v.WindowStart) != windowSize:
			bad.add("%s: window [%v, %v): want a whole minute", where(m), v.WindowStart, v.WindowEnd)
		}
		last[k] = v
	}

	// The model: every event not late, in its window.
	expected := map[winKey][]float64{}
	errs := map[winKey]int64{}
	for _, a := range valid {
		if late[a.ID] {
			continue
		}
		ms := a.Time.UnixMilli()
		k := winKey{norm.Pattern(a.IdentityURI), ms - ms%windowSize.Milliseconds()}
		expected[k] = append(expected[k], a.LatencyMs)
		if a.Status >= 500 {
			errs[k]++
		}
	}
	for _, k := range sortedKeys(expected) {
		lat := expected[k]
		want := Out{Kind: kindWindow, Pattern: k.pattern, Count: int64(len(lat)), Errors: errs[k], P99LatencyMs: nearestRank(lat, 0.99)}
		got, ok := last[k]
		if !ok {
			bad.add("window %s of %q: no result, want count %d", time.UnixMilli(k.start).UTC().Format(time.DateTime), k.pattern, want.Count)
			continue
		}
		if got.Count != want.Count || got.Errors != want.Errors || got.P99LatencyMs != want.P99LatencyMs {
			bad.add("window %s of %q: count %d, errors %d, p99 %v ms; want %d, %d, %v ms", time.UnixMilli(k.start).UTC().Format(time.DateTime), k.pattern,
				got.Count, got.Errors, got.P99LatencyMs, want.Count, want.Errors, want.P99LatencyMs)
		}
	}
	for _, k := range sortedKeys(last) {
		if _, ok := expected[k]; !ok {
			bad.add("window %s of %q: a result (count %d) for a window with no events that are not late", time.UnixMilli(k.start).UTC().Format(time.DateTime), k.pattern, last[k].Count)
		}
	}
	if sum.processed {
		// kord's counters count again what a replay after the crash did
		// again: at least what the topics hold.
		if sum.lateCounted < int64(len(late)) {
			bad.add("the job counted %d late events (keyed.Job.LateRecords), the late topic holds %d", sum.lateCounted, len(late))
		}
		if sum.deadCounted < int64(dead) {
			bad.add("the job counted %d dead letters (keyed.Job.DeadLetters), the dead-letter topic holds %d", sum.deadCounted, dead)
		}
	}

	patterns := map[string]*patternStats{}
	for k, v := range last {
		p := patterns[k.pattern]
		if p == nil {
			p = &patternStats{pattern: k.pattern}
			patterns[k.pattern] = p
		}
		p.windows++
		p.requests += v.Count
		p.errors += v.Errors
		p.maxP99 = max(p.maxP99, v.P99LatencyMs)
	}
	for id := range late {
		p := norm.Pattern(byID[id].IdentityURI)
		if patterns[p] == nil {
			patterns[p] = &patternStats{pattern: p}
		}
		patterns[p].late++
	}
	report(o, sum, reportCounts{malformed: len(malformed), dead: dead, farBehind: len(farBehind), late: len(late), lateFar: lateFar,
		windows: len(last), results: results, patterns: patterns}, &bad)
	if bad.n > 0 {
		return fmt.Errorf("verification failed: %d mismatches; the first: %s", bad.n, bad.shown[0])
	}
	return nil
}

type patternStats struct {
	pattern                string
	windows                int
	requests, errors, late int64
	maxP99                 float64
}

type reportCounts struct {
	malformed, dead, farBehind, late, lateFar, windows, results int
	patterns                                                    map[string]*patternStats
}

// report prints the summary: key=value pairs with -quiet, else a table.
func report(o options, sum *summary, c reportCounts, bad *problems) {
	w := o.out()
	if o.quiet {
		fmt.Fprintf(w, "events_in=%d malformed=%d dead_letters=%d far_behind=%d late=%d windows_out=%d results_out=%d patterns=%d mismatches=%d",
			o.events, c.malformed, c.dead, c.farBehind, c.late, c.windows, c.results, len(c.patterns), bad.n)
		if sum.processed {
			fmt.Fprintf(w, " late_counted=%d dead_counted=%d checkpoints_committed=%d crashed=%v recovery_ms=%d processing_ms=%d",
				sum.lateCounted, sum.deadCounted, sum.checkpoints, sum.crashed, sum.recovery.Milliseconds(), sum.elapsed.Milliseconds())
		}
		fmt.Fprintln(w)
		return
	}
	fmt.Fprintf(w, "\nevents in:                  %d\n", o.events)
	fmt.Fprintf(w, "malformed -> dead letters:  %d -> %d\n", c.malformed, c.dead)
	fmt.Fprintf(w, "late -> side output:        %d (%d of the %d stamped far in the past, %d others)\n", c.late, c.lateFar, c.farBehind, c.late-c.lateFar)
	fmt.Fprintf(w, "windows out:                %d (%d results: %d fired again for an event within the allowed lateness)\n", c.windows, c.results, c.results-c.windows)
	fmt.Fprintf(w, "patterns:                   %d\n", len(c.patterns))
	fmt.Fprintf(w, "mismatches:                 %d\n", bad.n)
	if sum.processed {
		fmt.Fprintf(w, "kord counted:               %d late, %d dead letters (replays after the crash included)\n", sum.lateCounted, sum.deadCounted)
		fmt.Fprintf(w, "checkpoints committed:      %d", sum.checkpoints)
		if sum.crashed {
			fmt.Fprintf(w, " (failed on purpose once; the first commit after it came %v later)", sum.recovery.Round(time.Millisecond))
		}
		fmt.Fprintln(w)
	}
	ps := make([]*patternStats, 0, len(c.patterns))
	for _, p := range c.patterns {
		ps = append(ps, p)
	}
	slices.SortFunc(ps, func(a, b *patternStats) int {
		return cmp.Or(cmp.Compare(b.requests, a.requests), strings.Compare(a.pattern, b.pattern))
	})
	fmt.Fprintf(w, "\n%-28s %8s %9s %7s %5s %14s\n", "pattern", "windows", "requests", "errors", "late", "max p99 (ms)")
	for _, p := range ps {
		fmt.Fprintf(w, "%-28s %8d %9d %7d %5d %14.1f\n", p.pattern, p.windows, p.requests, p.errors, p.late, p.maxP99)
	}
	for _, s := range bad.shown {
		fmt.Fprintln(w, "mismatch:", s)
	}
}

// nearestRank is the model's percentile q (0 < q <= 1) of xs, by the
// nearest-rank method: the ceil(q*n)-th smallest.
func nearestRank(xs []float64, q float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[int(math.Ceil(q*float64(len(s))))-1]
}

// sameAccess reports whether a and b are the same event (times compared
// as instants).
func sameAccess(a, b Access) bool {
	return a.ID == b.ID && a.IdentityURI == b.IdentityURI && a.Status == b.Status && a.LatencyMs == b.LatencyMs && a.Time.Equal(b.Time)
}

func sortedKeys[V any](m map[winKey]V) []winKey {
	ks := make([]winKey, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.SortFunc(ks, func(a, b winKey) int {
		return cmp.Or(strings.Compare(a.pattern, b.pattern), cmp.Compare(a.start, b.start))
	})
	return ks
}

func header(m *kafka.Message, key string) string {
	for _, h := range m.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// readAll reads every partition of topics from the beginning to its end
// (its last stable offset: read_committed), and returns each topic's
// records, each partition's in order.
func readAll(ctx context.Context, o options, topics []string) (map[string][]*kafka.Message, error) {
	c, err := o.newReader(kafka.ConfigMap{
		"group.id":             "urinormalize-verify",
		"enable.auto.commit":   false,
		"isolation.level":      "read_committed",
		"enable.partition.eof": true,
	})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	var tps []kafka.TopicPartition
	for _, topic := range topics {
		md, err := c.GetMetadata(&topic, false, 10_000)
		if err != nil {
			return nil, fmt.Errorf("topic %s: %w", topic, err)
		}
		t, ok := md.Topics[topic]
		if !ok || len(t.Partitions) == 0 {
			return nil, fmt.Errorf("topic %s: no partitions (%v)", topic, t.Error)
		}
		for _, p := range t.Partitions {
			tps = append(tps, kafka.TopicPartition{Topic: &topic, Partition: p.ID, Offset: kafka.OffsetBeginning})
		}
	}
	if err := c.Assign(tps); err != nil {
		return nil, err
	}
	type tp struct {
		topic     string
		partition int32
	}
	ended := map[tp]bool{}
	out := map[string][]*kafka.Message{}
	const quiet = 30 * time.Second
	heard := time.Now()
	for len(ended) < len(tps) {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if time.Since(heard) > quiet {
			var left []string
			for _, p := range tps {
				if !ended[tp{*p.Topic, p.Partition}] {
					left = append(left, fmt.Sprintf("%s[%d]", *p.Topic, p.Partition))
				}
			}
			return nil, fmt.Errorf("reading the output: nothing from %s for %v, and their end not reached", strings.Join(left, ", "), quiet)
		}
		switch e := c.Poll(100).(type) {
		case *kafka.Message:
			heard = time.Now()
			if e.TopicPartition.Error != nil {
				return nil, fmt.Errorf("%s[%d]@%d: %w", *e.TopicPartition.Topic, e.TopicPartition.Partition, e.TopicPartition.Offset, e.TopicPartition.Error)
			}
			out[*e.TopicPartition.Topic] = append(out[*e.TopicPartition.Topic], e)
		case kafka.PartitionEOF:
			heard = time.Now()
			ended[tp{*e.Topic, e.Partition}] = true
		case kafka.Error:
			if e.IsFatal() || e.Code() == kafka.ErrUnknownTopicOrPart {
				return nil, fmt.Errorf("reading the output: %w", e)
			}
		}
	}
	return out, nil
}
