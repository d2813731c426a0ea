package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kordproject/kord/admin"
)

// ErrNoCommittedOffset means a source group has no committed offset for a
// partition and the start's Reset is ResetNone (Kafka's consumer throws
// NoOffsetForPartitionException in that case).
var ErrNoCommittedOffset = errors.New("consumer: no committed offset")

// Start is where a source begins reading a topic when no checkpoint
// exists. Resolve turns it into a concrete offset for every partition;
// the caller records those offsets as checkpoint 0, so a restart never
// resolves a Start again.
//
// Starts are values: Earliest, Latest, AtTime, AtOffsets and FromGroup
// make them, Otherwise and OrReset return modified copies. The zero Start
// is Earliest.
type Start struct {
	kind    startKind
	at      time.Time
	offsets map[int32]int64
	others  *Start
	group   string
	reset   Reset
}

type startKind uint8

const (
	startEarliest startKind = iota
	startLatest
	startTime
	startOffsets
	startGroup
)

var (
	// Earliest starts every partition at its log start offset (Kafka's
	// ListOffsets with timestamp -2; auto.offset.reset=earliest).
	Earliest = Start{kind: startEarliest}

	// Latest starts every partition at its end, reading only records
	// written from now on: the offset Kafka's ListOffsets (timestamp -1)
	// returns at the source's isolation level. Under read_committed, the
	// default, that is the last stable offset (LSO), not the high
	// watermark: a read_committed consumer started with
	// auto.offset.reset=latest starts there too (KIP-98; Java's
	// KafkaConsumer.endOffsets documents the LSO as the end under
	// read_committed). Starting at the high watermark instead would
	// silently skip the records of transactions still open at start
	// that commit afterwards. With isolation.level=read_uncommitted (see
	// Set), Latest is the high watermark.
	Latest = Start{kind: startLatest}
)

// AtTime starts every partition at the earliest offset whose record
// timestamp is at or after t, as Kafka's ListOffsets by timestamp
// (librdkafka's offsets_for_times, Java's KafkaConsumer.offsetsForTimes)
// finds it: the first such offset in log order, even when an earlier
// offset holds an exactly matching timestamp further on. A partition with
// no such record (Kafka answers offset -1; Java's offsetsForTimes, null)
// starts at its end, as Latest, as Flink's Kafka source does for
// OffsetsInitializer.timestamp. The end is read before the timestamps are
// looked up, as Flink's TimestampOffsetsInitializer does, so that a record
// written between the two requests is not skipped. t must be at or after
// the Unix epoch (negative timestamps are ListOffsets' special values).
func AtTime(t time.Time) Start { return Start{kind: startTime, at: t} }

// AtOffsets starts the named partitions at the given offsets (partition →
// offset) and every other partition as Otherwise says (Earliest unless
// set). An offset outside its partition's log fails with ErrOutOfRange,
// naming the topic, partition, offset and the log's range, unless OrReset
// chose a reset. An offset equal to the end (see Latest) is valid: it
// starts after the last record. The map is copied.
func AtOffsets(offsets map[int32]int64) Start {
	m := make(map[int32]int64, len(offsets))
	for p, o := range offsets {
		m[p] = o
	}
	return Start{kind: startOffsets, offsets: m}
}

// FromGroup starts every partition at the offset group has committed for
// it, reading the group's offsets without ever committing to it or
// joining it, with an admin client configured as the source is (the read
// requires stable offsets: see admin.Client.GroupOffsets). A
// partition the group has no offset for, or whose committed offset is no
// longer in the log, is handled as Kafka's consumer handles it under
// auto.offset.reset: OrReset chooses earliest or latest, and the default,
// ResetNone, fails. Every partition that is reset is logged.
func FromGroup(group string) Start { return Start{kind: startGroup, group: group} }

// Otherwise sets how AtOffsets starts the partitions its map does not
// name. Default Earliest. Only AtOffsets takes it.
func (s Start) Otherwise(others Start) Start {
	o := others
	s.others = &o
	return s
}

// OrReset sets what AtOffsets and FromGroup do with a partition whose
// offset is not in the log or, for FromGroup, that has no committed
// offset: the values of Kafka's auto.offset.reset. Default ResetNone.
func (s Start) OrReset(r Reset) Start {
	s.reset = r
	return s
}

// String describes s, e.g. `group "billing" or reset earliest`.
func (s Start) String() string {
	switch s.kind {
	case startEarliest:
		return "earliest"
	case startLatest:
		return "latest"
	case startTime:
		return "time >= " + s.at.UTC().Format(time.RFC3339Nano)
	case startOffsets:
		parts := make([]int32, 0, len(s.offsets))
		for p := range s.offsets {
			parts = append(parts, p)
		}
		sort.Slice(parts, func(i, j int) bool { return parts[i] < parts[j] })
		var b strings.Builder
		b.WriteString("offsets {")
		for i, p := range parts {
			if i > 0 {
				b.WriteByte(' ')
			}
			fmt.Fprintf(&b, "%d:%d", p, s.offsets[p])
		}
		fmt.Fprintf(&b, "} otherwise %s, or reset %s", s.otherwise(), s.reset)
		return b.String()
	case startGroup:
		return fmt.Sprintf("group %q or reset %s", s.group, s.reset)
	}
	return fmt.Sprintf("Start(%d)", s.kind)
}

func (s Start) otherwise() Start {
	if s.others == nil {
		return Earliest
	}
	return *s.others
}

func (s Start) validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: start %s: %s", ErrConfig, s, fmt.Sprintf(format, args...))
	}
	if s.others != nil && s.kind != startOffsets {
		return bad("Otherwise applies to AtOffsets only")
	}
	if s.reset != ResetNone && s.kind != startOffsets && s.kind != startGroup {
		return bad("OrReset applies to AtOffsets and FromGroup only")
	}
	if s.reset > ResetLatest {
		return bad("unknown reset %d", s.reset)
	}
	switch s.kind {
	case startEarliest, startLatest:
	case startTime:
		if s.at.UnixMilli() < 0 {
			return bad("the time is before the Unix epoch")
		}
	case startOffsets:
		for p, o := range s.offsets {
			if o < 0 {
				return bad("partition %d: offset %d is not a concrete offset", p, o)
			}
		}
		if err := s.otherwise().validate(); err != nil {
			return err
		}
	case startGroup:
		if s.group == "" {
			return bad("no group named")
		}
	default:
		return bad("unknown start")
	}
	return nil
}

// Reset is what AtOffsets and FromGroup do with a partition whose offset
// is missing or no longer in the log. The values are those of Kafka's
// consumer setting auto.offset.reset: "What to do when there is no
// initial offset in Kafka or if the current offset does not exist any
// more on the server (e.g. because that data has been deleted)".
type Reset uint8

const (
	// ResetNone fails, naming the partition (auto.offset.reset=none).
	ResetNone Reset = iota
	// ResetEarliest starts the partition at its log start
	// (auto.offset.reset=earliest).
	ResetEarliest
	// ResetLatest starts the partition at its end, as Latest
	// (auto.offset.reset=latest).
	ResetLatest
)

func (r Reset) String() string {
	switch r {
	case ResetNone:
		return "none"
	case ResetEarliest:
		return "earliest"
	case ResetLatest:
		return "latest"
	}
	return fmt.Sprintf("Reset(%d)", uint8(r))
}

// logRange is a partition's log as a consumer of the source's isolation
// level sees it: its log start and its end (where Latest starts: the LSO
// under read_committed, else the high watermark).
type logRange struct{ start, end int64 }

// resolution is one Resolve call's state.
type resolution struct {
	s      *Source
	topic  string
	ranges map[int32]logRange
	out    map[int32]int64
}

// Resolve turns start into a concrete offset for every partition of
// topic, in ascending partition order. Every returned offset lies in its
// partition's log, so Assign accepts it while the log keeps it.
func (s *Source) Resolve(ctx context.Context, topic string, start Start) ([]Position, error) {
	if err := start.validate(); err != nil {
		return nil, err
	}
	parts, err := s.Partitions(ctx, topic)
	if err != nil {
		return nil, err
	}
	// Every partition's range is read first: AtTime needs the ends
	// before it looks timestamps up (see AtTime).
	r := &resolution{s: s, topic: topic, ranges: make(map[int32]logRange, len(parts)), out: make(map[int32]int64, len(parts))}
	for _, p := range parts {
		low, end, err := s.Watermarks(ctx, TopicPartition{topic, p})
		if err != nil {
			return nil, err
		}
		r.ranges[p] = logRange{low, end}
	}
	if err := r.resolve(ctx, parts, start); err != nil {
		return nil, err
	}
	out := make([]Position, len(parts))
	for i, p := range parts {
		out[i] = Position{Topic: topic, Partition: p, Offset: r.out[p]}
	}
	return out, nil
}

// resolve resolves st for parts into r.out.
func (r *resolution) resolve(ctx context.Context, parts []int32, st Start) error {
	if len(parts) == 0 {
		return nil
	}
	switch st.kind {
	case startEarliest:
		for _, p := range parts {
			r.out[p] = r.ranges[p].start
		}
		return nil
	case startLatest:
		for _, p := range parts {
			r.out[p] = r.ranges[p].end
		}
		return nil
	case startTime:
		return r.atTime(ctx, parts, st.at)
	case startOffsets:
		return r.atOffsets(ctx, parts, st)
	case startGroup:
		return r.fromGroup(ctx, parts, st)
	}
	return fmt.Errorf("%w: unknown start %s", ErrConfig, st)
}

func (r *resolution) atTime(ctx context.Context, parts []int32, t time.Time) error {
	ms := t.UnixMilli()
	req := make([]kafka.TopicPartition, len(parts))
	for i, p := range parts {
		topic := r.topic
		req[i] = kafka.TopicPartition{Topic: &topic, Partition: p, Offset: kafka.Offset(ms)}
	}
	var res []kafka.TopicPartition
	what := fmt.Sprintf("offsets of topic %q at time %s", r.topic, t.UTC().Format(time.RFC3339Nano))
	err := r.s.retry(ctx, what, func(ctx context.Context) error {
		var err error
		res, err = r.s.c.OffsetsForTimes(req, r.s.timeoutMs(ctx))
		if err != nil {
			return err
		}
		for _, tp := range res {
			if tp.Error != nil {
				return fmt.Errorf("partition %d: %w", tp.Partition, tp.Error)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	found := make(map[int32]bool, len(res))
	for _, tp := range res {
		if tp.Topic == nil || *tp.Topic != r.topic {
			continue
		}
		found[tp.Partition] = true
		if tp.Offset < 0 {
			// No record at or after t: the end (see AtTime).
			r.out[tp.Partition] = r.ranges[tp.Partition].end
		} else {
			r.out[tp.Partition] = int64(tp.Offset)
		}
	}
	for _, p := range parts {
		if !found[p] {
			return fmt.Errorf("consumer: %s: no answer for partition %d", what, p)
		}
	}
	return nil
}

func (r *resolution) atOffsets(ctx context.Context, parts []int32, st Start) error {
	for p := range st.offsets {
		if _, ok := r.ranges[p]; !ok {
			return fmt.Errorf("%w: start %s names partition %d, which topic %q does not have (%d partitions)", ErrConfig, st, p, r.topic, len(r.ranges))
		}
	}
	var rest []int32
	var errs []error
	for _, p := range parts {
		off, named := st.offsets[p]
		if !named {
			rest = append(rest, p)
			continue
		}
		hi, ok, err := r.s.inLog(ctx, TopicPartition{r.topic, p}, off, r.ranges[p])
		if err != nil {
			return err
		}
		if ok {
			r.out[p] = off
			continue
		}
		why := fmt.Sprintf("offset %d is not in the log, which holds offsets %d to %d", off, r.ranges[p].start, hi)
		if st.reset == ResetNone {
			errs = append(errs, &OffsetError{Topic: r.topic, Partition: p, Offset: off,
				Err: fmt.Errorf("%w: the log holds offsets %d to %d (start %s)", ErrOutOfRange, r.ranges[p].start, hi, st)})
			continue
		}
		r.reset(ctx, p, st, slog.Int64("requested", off), why, slog.LevelWarn)
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	return r.resolve(ctx, rest, st.otherwise())
}

func (r *resolution) fromGroup(ctx context.Context, parts []int32, st Start) error {
	tps := make([]admin.TopicPartition, len(parts))
	for i, p := range parts {
		tps[i] = admin.TopicPartition{Topic: r.topic, Partition: p}
	}
	a, err := r.s.admin()
	if err != nil {
		return err
	}
	defer a.Close()
	committed, err := a.GroupOffsets(ctx, st.group, tps)
	if err != nil {
		return err
	}
	got := make(map[int32]int64, len(committed))
	for _, c := range committed {
		if c.Topic == r.topic {
			got[c.Partition] = c.Offset
		}
	}
	var errs []error
	for _, p := range parts {
		off, ok := got[p]
		if !ok || off < 0 {
			if st.reset == ResetNone {
				errs = append(errs, &OffsetError{Topic: r.topic, Partition: p, Offset: -1,
					Err: fmt.Errorf("%w for group %q (start %s)", ErrNoCommittedOffset, st.group, st)})
				continue
			}
			r.reset(ctx, p, st, slog.Attr{}, fmt.Sprintf("group %q has no committed offset", st.group), slog.LevelInfo)
			continue
		}
		hi, in, err := r.s.inLog(ctx, TopicPartition{r.topic, p}, off, r.ranges[p])
		if err != nil {
			return err
		}
		if in {
			r.out[p] = off
			continue
		}
		if st.reset == ResetNone {
			errs = append(errs, &OffsetError{Topic: r.topic, Partition: p, Offset: off,
				Err: fmt.Errorf("%w: group %q committed it, the log holds offsets %d to %d (start %s)", ErrOutOfRange, st.group, r.ranges[p].start, hi, st)})
			continue
		}
		why := fmt.Sprintf("committed offset %d is not in the log, which holds offsets %d to %d", off, r.ranges[p].start, hi)
		r.reset(ctx, p, st, slog.Int64("committed", off), why, slog.LevelWarn)
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	return nil
}

// reset starts p as st's Reset says and logs it with the partition, the
// offset it was asked to start at (attr, if any) and the offset it starts
// at. Kafka's consumer likewise logs every reset ("Resetting offset for
// partition ..."). st.reset is not ResetNone.
func (r *resolution) reset(ctx context.Context, p int32, st Start, attr slog.Attr, why string, lvl slog.Level) {
	to := r.ranges[p].start
	if st.reset == ResetLatest {
		to = r.ranges[p].end
	}
	r.out[p] = to
	attrs := []slog.Attr{slog.String("topic", r.topic), slog.Int("partition", int(p))}
	if st.kind == startGroup {
		attrs = append(attrs, slog.String("group", st.group))
	}
	if attr.Key != "" {
		attrs = append(attrs, attr)
	}
	attrs = append(attrs, slog.Int64("offset", to), slog.String("reset", st.reset.String()), slog.String("reason", why))
	r.s.log.LogAttrs(ctx, lvl, "kord source: start offset reset", attrs...)
}

// inLog reports whether off lies in tp's log: rg.start ≤ off ≤ rg.end,
// or, under read_committed, rg.end < off ≤ the high watermark. An offset
// between the LSO and the high watermark (inside a transaction still
// open) is in the log: a read_committed fetch from it is not out of range,
// it waits for the LSO to pass it. hi is the upper bound it checked
// against.
func (s *Source) inLog(ctx context.Context, tp TopicPartition, off int64, rg logRange) (hi int64, ok bool, err error) {
	if off < rg.start {
		return rg.end, false, nil
	}
	if off <= rg.end {
		return rg.end, true, nil
	}
	if !s.readCommitted {
		return rg.end, false, nil
	}
	hw, err := s.highWatermark(ctx, tp)
	if err != nil {
		return 0, false, err
	}
	hi = max(hw, rg.end)
	return hi, off <= hi, nil
}

// highWatermark reads tp's high watermark whatever the source's isolation
// level (Watermarks reads the LSO under read_committed, as librdkafka
// sends ListOffsets with the consumer's isolation.level).
func (s *Source) highWatermark(ctx context.Context, tp TopicPartition) (int64, error) {
	a, err := kafka.NewAdminClientFromConsumer(s.c)
	if err != nil {
		return 0, fmt.Errorf("consumer: admin client: %w", err)
	}
	defer a.Close()
	var hw int64
	err = s.retry(ctx, "high watermark of "+tp.String(), func(ctx context.Context) error {
		topic := tp.Topic
		res, err := a.ListOffsets(ctx, map[kafka.TopicPartition]kafka.OffsetSpec{{Topic: &topic, Partition: tp.Partition}: kafka.LatestOffsetSpec},
			kafka.SetAdminIsolationLevel(kafka.IsolationLevelReadUncommitted))
		if err != nil {
			return err
		}
		for k, info := range res.ResultInfos {
			if k.Topic == nil || *k.Topic != tp.Topic || k.Partition != tp.Partition {
				continue
			}
			if info.Error.Code() != kafka.ErrNoError {
				return info.Error
			}
			hw = int64(info.Offset)
			return nil
		}
		return fmt.Errorf("no answer")
	})
	return hw, err
}

// admin returns an admin client of the source's cluster, configured as the
// source is (brokers, settings, log, request timeout): FromGroup reads the
// group's committed offsets with it, as Flink's Kafka source does with
// Kafka's admin client. Its Close ends its goroutines.
func (s *Source) admin() (*admin.Client, error) {
	opts := []admin.Opt{admin.Brokers(s.cfg.brokers...), admin.Logger(s.log)}
	if s.cfg.timeout > 0 {
		opts = append(opts, admin.RequestTimeout(s.cfg.timeout))
	}
	for k, v := range s.cfg.settings {
		opts = append(opts, admin.Set(k, v))
	}
	a, err := admin.New(opts...)
	if errors.Is(err, admin.ErrConfig) {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return a, err
}
