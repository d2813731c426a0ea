package filesink

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Column is one element of a Hive partition path, name=value: the value
// comes from the record's event time (TimeColumn) or from the record
// (FieldColumn).
type Column[T any] struct {
	name   string
	layout string         // a time column's Go time layout
	field  func(T) string // a field column's
}

// TimeColumn is a partition column whose value is the record's event time
// (the Kafka timestamp, or keyed's Stream.Timestamps) in UTC, formatted
// with Go's time layout: TimeColumn[T]("dt", "2006-01-02") and
// TimeColumn[T]("hr", "15") give dt=2026-12-03/hr=08. The time columns,
// parsed back together, give the partition's time: the start of the span
// they name (2026-12-03 08:00 UTC), which the partition commit compares
// with the watermark.
func TimeColumn[T any](name, layout string) Column[T] {
	return Column[T]{name: name, layout: layout}
}

// FieldColumn is a partition column whose value f takes from the record.
func FieldColumn[T any](name string, f func(T) string) Column[T] {
	return Column[T]{name: name, field: f}
}

// Hourly is the columns dt (2006-01-02) and hr (15): Hive's usual hourly
// partitions, by event time.
func Hourly[T any]() []Column[T] {
	return []Column[T]{TimeColumn[T]("dt", "2006-01-02"), TimeColumn[T]("hr", "15")}
}

// PartitionBy makes each record's bucket its Hive partition: an element
// name=value per column, in order, the names lowercased (Hive's column
// names are) and the values escaped as Hive escapes them, an empty value
// being Hive's default partition (__HIVE_DEFAULT_PARTITION__). It replaces
// BucketBy; both are refused.
func PartitionBy[T any](cols ...Column[T]) Opt {
	return func(c *config) { c.partitions = cols }
}

// partitioning is PartitionBy's columns, resolved for T.
type partitioning[T any] struct {
	cols   []Column[T]
	names  []string // lowercased
	layout string   // the time columns' layouts joined by timeSep; "" if none
}

// timeSep joins the time columns' layouts, and their values, to parse the
// partition's time back.
const timeSep = "\x00"

func newPartitioning[T any](cols []Column[T]) (*partitioning[T], error) {
	if len(cols) == 0 {
		return nil, errors.New("PartitionBy has no column")
	}
	p := &partitioning[T]{cols: cols}
	var layouts []string
	seen := map[string]bool{}
	for _, c := range cols {
		n := strings.ToLower(c.name)
		if n == "" || escapePath(n) != n {
			return nil, fmt.Errorf("partition column %q: a name must be non-empty and need no escaping", c.name)
		}
		if seen[n] {
			return nil, fmt.Errorf("partition column %q twice", n)
		}
		seen[n] = true
		p.names = append(p.names, n)
		switch {
		case c.field == nil && c.layout == "":
			return nil, fmt.Errorf("partition column %q has neither a layout nor a field", n)
		case c.field == nil:
			layouts = append(layouts, c.layout)
		}
	}
	p.layout = strings.Join(layouts, timeSep)
	if p.layout != "" {
		if err := p.checkSpan(); err != nil {
			return nil, fmt.Errorf("partition columns' layouts %q: %w", layouts, err)
		}
	}
	return p, nil
}

// checkSpan checks that the time columns name one span of time: for a
// few times, their values parse back to a start no later, and every time
// between that start and it has the same values (hr=15 alone, an hour of
// every day, does not).
func (p *partitioning[T]) checkSpan() error {
	for _, t := range []time.Time{
		time.Date(2026, 12, 3, 8, 17, 42, 123e6, time.UTC),
		time.Date(2025, 2, 28, 23, 59, 59, 999e6, time.UTC),
	} {
		vs := p.timeValues(t)
		start, err := time.Parse(p.layout, vs)
		if err != nil {
			return fmt.Errorf("%q does not parse back: %w", vs, err)
		}
		if start.After(t) || p.timeValues(start) != vs {
			return fmt.Errorf("%q parses back to %v, not the start of a span holding %v", vs, start, t)
		}
		for k := int64(1); k < 16; k++ {
			if u := start.Add(time.Duration(int64(t.Sub(start)) / 16 * k)); p.timeValues(u) != vs {
				return fmt.Errorf("%v and %v, in one span, have values %q and %q: the columns do not name a span of time", start, t, p.timeValues(u), vs)
			}
		}
	}
	return nil
}

func (p *partitioning[T]) timeValues(t time.Time) string {
	var vs []string
	for _, c := range p.cols {
		if c.field == nil {
			vs = append(vs, t.UTC().Format(c.layout))
		}
	}
	return strings.Join(vs, timeSep)
}

// of returns v's partition path, its values, and its time (Unix
// milliseconds; noTime without time columns). ts is v's event time.
func (p *partitioning[T]) of(v T, ts int64) (string, []string, int64, error) {
	if p.layout != "" && ts == noTime {
		return "", nil, 0, errors.New("the record has no event time, and the partition columns need one")
	}
	t := time.UnixMilli(ts).UTC()
	values := make([]string, len(p.cols))
	var b strings.Builder
	for i, c := range p.cols {
		if c.field != nil {
			values[i] = c.field(v)
		} else {
			values[i] = t.Format(c.layout)
		}
		if i > 0 {
			b.WriteByte('/')
		}
		b.WriteString(p.names[i])
		b.WriteByte('=')
		b.WriteString(escapeValue(values[i]))
	}
	start := noTime
	if p.layout != "" {
		st, err := time.Parse(p.layout, p.timeValues(t))
		if err != nil {
			return "", nil, 0, err
		}
		start = st.UnixMilli()
	}
	return b.String(), values, start, nil
}

// hiveDefaultPartition is Hive's name for an empty or null partition value
// (hive.exec.default.partition.name).
const hiveDefaultPartition = "__HIVE_DEFAULT_PARTITION__"

func escapeValue(v string) string {
	if v == "" {
		return hiveDefaultPartition
	}
	return escapePath(v)
}

// escapePath escapes a partition name or value as Hive does
// (org.apache.hadoop.hive.common.FileUtils.escapePathName and its
// charToEscape set): every control character, DEL, and " # % ' * / : = ?
// \ { [ ] ^ become %XX, in upper-case hex. Other bytes, UTF-8 included,
// stay.
func escapePath(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c == 0x7f || strings.IndexByte(`"#%'*/:=?\{[]^`, c) >= 0 {
			fmt.Fprintf(&b, "%%%02X", c)
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

// Partition is a partition the sink commits: the policies of
// CommitPartitions receive it.
type Partition struct {
	// Path is its directory under the target, escaped:
	// "dt=2026-12-03/hr=08".
	Path string
	// Columns and Values are its columns' names and values, unescaped.
	Columns []string
	Values  []string
	// Time is the start of its span of event time (zero without time
	// columns).
	Time time.Time
	t    target
}

// Put writes a small file whole, name in the partition's directory, in one
// atomic step (a file and a rename, or one PUT).
func (p Partition) Put(ctx context.Context, name string, data []byte) error {
	return p.t.put(ctx, p.Path+"/"+name, data)
}

// CommitPolicy is one step of a partition's commit, run when the job's
// watermark has passed the partition (CommitPartitions), after every file
// of it then committed is visible. It must be idempotent: a crash, an
// error or a late record (LateRecommit) runs it again on the same
// partition. An error is retried, with backoff, in the background; one
// marked keyed.Permanent (a table whose schema does not match) fails the
// job.
type CommitPolicy interface {
	CommitPartition(ctx context.Context, p Partition) error
}

// CommitFunc is a CommitPolicy of the user's.
type CommitFunc func(ctx context.Context, p Partition) error

// CommitPartition calls f.
func (f CommitFunc) CommitPartition(ctx context.Context, p Partition) error { return f(ctx, p) }

// SuccessFile is the commit policy that writes an empty _SUCCESS file in
// the partition's directory (Hadoop's and Flink's success-file), in one
// atomic step.
func SuccessFile() CommitPolicy { return successFile{} }

type successFile struct{}

func (successFile) CommitPartition(ctx context.Context, p Partition) error {
	return p.Put(ctx, "_SUCCESS", nil)
}

func (successFile) String() string { return "success-file" }

// CommitPartitions commits each partition once the watermark at the sink
// (connector.Timed: the oldest of its inputs', as of the checkpoint that
// committed) has passed the partition's time plus delay: Flink's
// sink.partition-commit.trigger=partition-time with its delay. For hourly
// partitions delay is at least an hour (the partition's span), plus what
// the job's watermark lateness does not cover. A commit runs the policies
// in order, in the background, off the checkpoint's commit: an error (a
// Metastore outage) is retried with backoff and reported, and never holds
// the job's commits back. The partitions waiting are in every checkpoint,
// so a crash or a stop before they are committed commits them after the
// restore. Needs PartitionBy with a time column.
func CommitPartitions(delay time.Duration, policies ...CommitPolicy) Opt {
	return func(c *config) {
		c.commitDelay, c.policies, c.commitOn = delay, policies, true
	}
}

// LatePolicy is what the sink does with a late record: one whose
// partition the watermark has already passed (its time plus the commit's
// delay), so that the partition may be committed.
type LatePolicy struct{ dir string }

var (
	// LateRecommit writes a late record into its partition, in a new file
	// visible when its checkpoint commits, and commits the partition again
	// (Flink's behaviour). A partition's _SUCCESS then says only that it
	// was complete once: later files may join it.
	LateRecommit = LatePolicy{}
)

// LateInto writes each late record, exactly once, under dir followed by
// its partition's path ("_late/dt=2026-12-03/hr=08/part-…"), which no
// partition commit covers: a partition's files are then final once it is
// committed, and _SUCCESS means complete. A dir whose first element starts
// with "_" is hidden from Hive, Spark and Trino, which skip such names.
func LateInto(dir string) LatePolicy { return LatePolicy{dir: dir} }

// Late chooses what the sink does with late records. Default:
// LateRecommit.
func Late(p LatePolicy) Opt { return func(c *config) { c.late = p } }
