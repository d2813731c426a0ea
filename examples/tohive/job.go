package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/kordproject/kord/examples/accesslog"
	"github.com/kordproject/kord/filesink"
	"github.com/kordproject/kord/filesink/hive"
	"github.com/kordproject/kord/kafkaio"
	"github.com/kordproject/kord/keyed"
	"github.com/kordproject/kord/kordhttp"
	"github.com/kordproject/kord/serde"
	"github.com/kordproject/kord/vfs"
)

// Row is what the table holds: an access event with its pattern.
type Row struct {
	ID        string  `json:"id" parquet:"id"`
	Pattern   string  `json:"pattern" parquet:"pattern"`
	URI       string  `json:"uri" parquet:"uri"`
	Status    int32   `json:"status" parquet:"status"`
	LatencyMs float64 `json:"latency_ms" parquet:"latency_ms"`
	TimeMs    int64   `json:"time_ms" parquet:"time_ms"` // event time, Unix ms
}

// Count is what the counts topic gets, keyed by the pattern: the
// pattern's running count, one per event.
type Count struct {
	Pattern string `json:"pattern"`
	Count   int64  `json:"count"`
	ID      string `json:"id"` // the event counted
}

// commitDelay is the partition commit's delay: an hour's partition
// commits once the watermark has passed its end (Flink's partition-time
// trigger with a delay of the partition's span).
const commitDelay = time.Hour

// lateness is the watermark's bound on disorder.
const lateness = 5 * time.Second

// table is where the table's files are: <lake>/<table>.
func (o options) tableDir() string { return filepath.Join(o.lake, o.table) }

// lakeSink lands rows in the table's directory as Parquet (zstd),
// partitioned by event day and hour, each partition committed once the
// watermark passed it: a _SUCCESS file, and with -metastore the
// partition in the Metastore's table.
func (o options) lakeSink() (*filesink.Sink[Row], *hive.Policy) {
	policies := []filesink.CommitPolicy{filesink.SuccessFile()}
	var ms *hive.Policy
	if o.metastore != "" {
		ms = hive.Table[Row](o.metastore, o.db, o.table, "file://"+o.tableDir())
		policies = append(policies, ms)
	}
	late := filesink.LateInto("_late")
	if o.late == "recommit" {
		late = filesink.LateRecommit
	}
	return filesink.New(filesink.Dir(vfs.Default(), o.tableDir()), filesink.Parquet[Row](filesink.Zstd),
		filesink.PartitionBy(filesink.Hourly[Row]()...),
		filesink.CommitPartitions(commitDelay, policies...),
		filesink.Late(late),
		filesink.Logger(o.logger())), ms
}

// process runs the job over the input as it stands when it starts (a
// bounded source: its end passes every partition, which then commits),
// or with -follow until it is stopped (SIGTERM: a final checkpoint; the
// hours the watermark has not passed stay uncommitted until a later run's
// watermark passes them).
// Two sinks, one checkpoint: the counts' Kafka transaction decides each
// commit, and the lake's files and partitions follow it.
func process(ctx context.Context, o options, norm accesslog.Normalizer) (*filesink.Sink[Row], error) {
	opts := []keyed.Opt{keyed.CheckpointInterval(o.interval), keyed.RestartStrategy(keyed.FixedDelay(3, time.Second)), keyed.Logger(o.logger())}
	if o.dir != "" {
		opts = append(opts, keyed.Dir(o.dir))
	}
	if o.txnMax > 0 {
		opts = append(opts, keyed.TransactionMaxTimeout(o.txnMax))
	}
	j := keyed.NewJob(strings.NewReplacer(".", "-").Replace("tohive-"+o.topic), opts...)
	// A record that is not an access event goes to the dead-letter topic
	// (the counts' sink takes them).
	var bounded []kafkaio.Opt
	if !o.follow {
		bounded = append(bounded, kafkaio.Bounded())
	}
	src := kafkaio.NewSource(o.client, o.topic, serde.JSON[accesslog.Access](), bounded...)
	events := keyed.FromSource(j, "access", 2, src).
		Timestamps(func(a accesslog.Access, _ time.Time) time.Time { return a.Time }).
		Watermarks(lateness)
	rows := keyed.MapValues(events, func(a accesslog.Access) Row {
		return Row{ID: a.ID, Pattern: norm.Pattern(a.IdentityURI), URI: a.IdentityURI, Status: int32(a.Status), LatencyMs: a.LatencyMs, TimeMs: a.Time.UnixMilli()}
	})
	counts := keyed.ProcessValue(keyed.KeyByString("pattern", func(r Row) string { return r.Pattern }, rows), "count", 2, serde.Int64(),
		func(pattern string, r Row, n *keyed.ValueState[int64], out *keyed.Collector[Count]) error {
			c, _ := n.Get()
			n.Set(c + 1)
			out.Emit(Count{Pattern: strings.Clone(pattern), Count: c + 1, ID: r.ID})
			return nil
		})
	keyed.ToSink(counts, "counts", kafkaio.NewSink(o.client, o.countsTopic(), serde.JSON[Count](),
		kafkaio.Key(func(c Count) string { return c.Pattern }, serde.String()),
		kafkaio.DeadLetterTopic(o.dlqTopic())))
	lake, _ := o.lakeSink()
	keyed.ToSink(rows, "lake", lake)
	if err := os.MkdirAll(o.tableDir(), 0o755); err != nil {
		return nil, err
	}
	if o.http != "" {
		srv, err := kordhttp.Serve(o.http, []*keyed.Job{j}, kordhttp.ReadyWithin(10*o.interval+30*time.Second))
		if err != nil {
			return nil, fmt.Errorf("-http: %w", err)
		}
		defer srv.Close()
		o.say("status page, metrics, health and readiness on http://%s/\n", srv.Addr())
	}
	return lake, j.Run(ctx)
}
