package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/parquet-go/parquet-go"

	"github.com/kordproject/kord/examples/accesslog"
	"github.com/kordproject/kord/filesink/hive"
)

// readTopic reads every record of topic, read_committed, with a
// confluent-kafka-go consumer of the run's settings (not kord's clients).
func readTopic(ctx context.Context, o options, topic string) ([]*kafka.Message, error) {
	cm := kafka.ConfigMap{"group.id": "tohive-verify", "enable.auto.commit": false, "isolation.level": "read_committed",
		"auto.offset.reset": "earliest", "go.logs.channel.enable": true}
	for k, v := range o.client.Cluster().Settings() {
		cm[k] = v
	}
	c, err := kafka.NewConsumer(&cm)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	go func() { // librdkafka's log, to the run's log, until Close
		for l := range c.Logs() {
			o.logger().Debug("librdkafka: "+l.Message, "tag", l.Tag)
		}
	}()
	md, err := c.GetMetadata(&topic, false, 10_000)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", topic, err)
	}
	var tps []kafka.TopicPartition
	ends := map[int32]int64{}
	for _, p := range md.Topics[topic].Partitions {
		_, hi, err := c.QueryWatermarkOffsets(topic, p.ID, 10_000)
		if err != nil {
			return nil, fmt.Errorf("%s[%d]: %w", topic, p.ID, err)
		}
		if hi > 0 {
			ends[p.ID] = hi
			tps = append(tps, kafka.TopicPartition{Topic: &topic, Partition: p.ID, Offset: kafka.OffsetBeginning})
		}
	}
	if err := c.Assign(tps); err != nil {
		return nil, err
	}
	var out []*kafka.Message
	idle := time.Now()
	for len(ends) > 0 && time.Since(idle) < 5*time.Second {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		m, err := c.ReadMessage(200 * time.Millisecond)
		if err != nil {
			if kerr, ok := err.(kafka.Error); ok && kerr.IsTimeout() {
				continue
			}
			return nil, err
		}
		idle = time.Now()
		out = append(out, m)
		if int64(m.TopicPartition.Offset)+1 >= ends[m.TopicPartition.Partition] {
			delete(ends, m.TopicPartition.Partition)
		}
	}
	return out, nil
}

// lakeRow is a row of the lake with where it is: its partition's
// directory under the table ("_late/" first for a late one).
type lakeRow struct {
	Row
	dir string
}

// readLake reads every published Parquet file of the table, and lists
// the directories with a _SUCCESS.
func readLake(dir string) ([]lakeRow, []string, error) {
	var rows []lakeRow
	var success []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, filepath.Dir(p))
		rel = filepath.ToSlash(rel)
		switch name := d.Name(); {
		case name == "_SUCCESS":
			success = append(success, rel)
		case strings.HasPrefix(name, ".") || !strings.HasSuffix(name, ".parquet"):
		default:
			rs, err := parquet.ReadFile[Row](p)
			if err != nil {
				return fmt.Errorf("%s: %w", p, err)
			}
			for _, r := range rs {
				rows = append(rows, lakeRow{r, rel})
			}
		}
		return nil
	})
	sort.Strings(success)
	return rows, success, err
}

// partitionOf is the hourly partition of an event time.
func partitionOf(t time.Time) string {
	return "dt=" + t.UTC().Format("2006-01-02") + "/hr=" + t.UTC().Format("15")
}

// problems collects what the check found wrong, a few of each kind.
type problems map[string][]string

func (p problems) add(kind, format string, args ...any) {
	p[kind] = append(p[kind], fmt.Sprintf(format, args...))
}

func (p problems) err() error {
	if len(p) == 0 {
		return nil
	}
	var b strings.Builder
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range p {
			if !yield(k) {
				return
			}
		}
	}) {
		fmt.Fprintf(&b, "\n  %s: %d, e.g. %s", k, len(p[k]), strings.Join(p[k][:min(3, len(p[k]))], "; "))
	}
	return fmt.Errorf("check failed:%s", b.String())
}

// verify checks the lake, the counts and the Metastore against the input,
// each read independently of the job:
//   - every event is in the lake once, in its hour's partition, or under
//     _late/ in it;
//   - every partition holding rows is committed (a _SUCCESS: the bounded
//     run's end passed every hour), and holds every event of its hour that
//     is not under _late/ (-late into) or every event of its hour
//     (-late recommit);
//   - the Metastore (with -metastore) lists exactly the committed
//     partitions;
//   - each pattern's counts are 1..n once each, n its events in the input.
func verify(ctx context.Context, o options, norm accesslog.Normalizer) error {
	input, err := readTopic(ctx, o, o.topic)
	if err != nil {
		return err
	}
	counts, err := readTopic(ctx, o, o.countsTopic())
	if err != nil {
		return err
	}
	rows, success, err := readLake(o.tableDir())
	if err != nil {
		return err
	}
	bad := problems{}
	events := map[string]accesslog.Access{}
	perPattern := map[string]int64{}
	for _, m := range input {
		var a accesslog.Access
		if err := json.Unmarshal(m.Value, &a); err != nil {
			bad.add("input not JSON", "%s[%d]@%d", o.topic, m.TopicPartition.Partition, m.TopicPartition.Offset)
			continue
		}
		events[a.ID] = a
		perPattern[norm.Pattern(a.IdentityURI)]++
	}
	seen := map[string]int{}
	late, byDir := 0, map[string]int{}
	for _, r := range rows {
		seen[r.ID]++
		a, ok := events[r.ID]
		part := strings.TrimPrefix(r.dir, "_late/")
		switch {
		case !ok:
			bad.add("rows not in the input", "%s in %s", r.ID, r.dir)
		case part != partitionOf(a.Time):
			bad.add("rows in another hour's partition", "%s (%v) in %s", r.ID, a.Time, r.dir)
		}
		if part != r.dir {
			late++
		} else {
			byDir[r.dir]++
		}
	}
	for id := range events {
		if seen[id] != 1 {
			bad.add("events not landed once", "%s landed %d times", id, seen[id])
		}
	}
	wantPart := map[string]int{}
	for _, a := range events {
		wantPart[partitionOf(a.Time)]++
	}
	var newest time.Time
	for _, a := range events {
		if a.Time.After(newest) {
			newest = a.Time
		}
	}
	for p, n := range byDir {
		// Every partition with rows is committed, the hours a followed
		// input's watermark may not have passed apart.
		end, _ := time.Parse("dt=2006-01-02/hr=15", p)
		open := o.follow && !end.Add(commitDelay).Before(newest.Add(-lateness-3*time.Second))
		if !slices.Contains(success, p) && !open {
			bad.add("partitions with rows and no _SUCCESS", "%s (%d rows)", p, n)
		}
		if o.late == "recommit" && n != wantPart[p] {
			bad.add("partitions without all their events", "%s has %d of %d", p, n, wantPart[p])
		}
	}
	if o.metastore != "" {
		listed, err := hive.Table[Row](o.metastore, o.db, o.table, "file://"+o.tableDir()).Partitions(ctx)
		if err != nil {
			return err
		}
		if !slices.Equal(listed, success) {
			bad.add("Metastore partitions other than the committed ones", "Metastore %v, _SUCCESS in %v", listed, success)
		}
	}
	checkCounts(o, counts, perPattern, bad)
	o.say("lake %s: %d rows (%d late, under _late/) in %d partitions, %d committed; counts: %d in %s for %d patterns\n",
		o.tableDir(), len(rows), late, len(byDir), len(success), len(counts), o.countsTopic(), len(perPattern))
	if err := bad.err(); err != nil {
		return err
	}
	fmt.Fprintf(o.out(), "verified: events=%d lake_rows=%d late=%d partitions=%d committed=%d counts=%d\n", len(events), len(rows), late, len(byDir), len(success), len(counts))
	if !o.quiet {
		o.query()
	}
	return nil
}

// checkCounts checks each pattern's counts: 1..n, each once.
func checkCounts(o options, counts []*kafka.Message, perPattern map[string]int64, bad problems) {
	got := map[string]map[int64]bool{}
	for _, m := range counts {
		var c Count
		if err := json.Unmarshal(m.Value, &c); err != nil {
			bad.add("counts not JSON", "%s[%d]@%d", o.countsTopic(), m.TopicPartition.Partition, m.TopicPartition.Offset)
			continue
		}
		if got[c.Pattern] == nil {
			got[c.Pattern] = map[int64]bool{}
		}
		if got[c.Pattern][c.Count] {
			bad.add("counts twice", "%s %d", c.Pattern, c.Count)
		}
		got[c.Pattern][c.Count] = true
	}
	for p, n := range perPattern {
		for i := int64(1); i <= n; i++ {
			if !got[p][i] {
				bad.add("counts missing", "%s %d of %d", p, i, n)
				break
			}
		}
		if int64(len(got[p])) != n {
			bad.add("patterns with other counts than events", "%s: %d counts, %d events", p, len(got[p]), n)
		}
	}
}

// query prints a query over the table and, when a python with duckdb is
// at hand, its result: what a reader sees of the committed hours.
func (o options) query() {
	q := fmt.Sprintf("SELECT dt, hr, count(*) AS events, count(DISTINCT pattern) AS patterns, round(avg(latency_ms), 1) AS avg_ms\n"+
		"FROM read_parquet('%s/*/*/*.parquet', hive_partitioning = true)\nGROUP BY dt, hr ORDER BY dt, hr", o.tableDir())
	fmt.Fprintf(o.out(), "\nquery (DuckDB):\n%s\n", q)
	py := o.duckdb
	if py == "" {
		py = "python3"
	}
	out, err := exec.Command(py, "-c", "import duckdb, sys; print(duckdb.sql(sys.argv[1]))", q).CombinedOutput()
	if err != nil {
		fmt.Fprintf(o.out(), "(no DuckDB here: pip install duckdb, or give -duckdb PYTHON, to see its result; %v)\n", err)
		return
	}
	fmt.Fprintf(o.out(), "%s", out)
	if o.metastore != "" {
		fmt.Fprintf(o.out(), "in Hive: SELECT dt, hr, count(*) FROM %s.%s GROUP BY dt, hr;\n", o.db, o.table)
	}
}
