package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kordproject/kord/examples/accesslog"
	"github.com/kordproject/kord/filesink/hive"
	"github.com/kordproject/kord/internal/rig/duckdb"
	"github.com/kordproject/kord/internal/rig/hivetest"
	"github.com/kordproject/kord/internal/rig/kafkatest"
)

func TestMain(m *testing.M) {
	if os.Getenv("TOHIVE_CHILD") == "1" {
		os.Exit(child())
	}
	os.Exit(m.Run())
}

func uniqueTable() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return "access_log_" + hex.EncodeToString(b[:])
}

// requireLakeByDuckDB reads the table with DuckDB, a reader no one here
// wrote: the committed partitions through the glob a user gives it
// (hive_partitioning, so dt and hr come from the paths), and the late
// rows under _late/. Every event is there once, in its hour.
func requireLakeByDuckDB(t *testing.T, dir string, events int) {
	t.Helper()
	types := "hive_types = {'dt': VARCHAR, 'hr': VARCHAR}"
	from := "SELECT id, time_ms, dt, hr FROM " + duckdb.ReadParquet(dir+"/*/*/*.parquet", "hive_partitioning = true", types)
	if late, _ := filepath.Glob(dir + "/_late/*/*/*.parquet"); len(late) > 0 {
		from += " UNION ALL SELECT id, time_ms, dt, hr FROM " + duckdb.ReadParquet(dir+"/_late/*/*/*.parquet", "hive_partitioning = true", types)
	}
	rows := duckdb.Query(t, `WITH rows AS (`+from+`)
		SELECT count(*) AS n, count(DISTINCT id) AS distinct_ids,
			count(*) FILTER (WHERE strftime(make_timestamp(time_ms * 1000), '%Y-%m-%d/%H') != dt || '/' || hr) AS misplaced
		FROM rows`)
	require.Len(t, rows, 1)
	r := rows[0]
	require.Equal(t, fmt.Sprint(events), fmt.Sprint(r["n"]), "rows in the table: %v", r)
	require.Equal(t, fmt.Sprint(events), fmt.Sprint(r["distinct_ids"]), "%v", r)
	require.Equal(t, "0", fmt.Sprint(r["misplaced"]), "rows in another hour's partition: %v", r)
}

// TestRunEmbedded: with no cluster named, the job runs on the embedded
// default, lands every event in its hour's partition (or under _late/),
// commits every partition (a _SUCCESS, and in the real Metastore), and
// counts each pattern's events once; DuckDB reads the table back.
func TestRunEmbedded(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	o := options{events: 6_000, hours: 4, partitions: 4, seed: 3, phase: "all", interval: 200 * time.Millisecond, quiet: true,
		lake: t.TempDir(), table: uniqueTable(), db: "kord_test", late: "into", metastore: hivetest.Addr(t)}
	var out bytes.Buffer
	o.stdout = &out
	require.NoError(t, run(ctx, o))
	require.Contains(t, out.String(), "verified: events=6000 lake_rows=6000 ")
	requireLakeByDuckDB(t, filepath.Join(o.lake, o.table), o.events)
	listed, err := hive.Table[Row](o.metastore, o.db, o.table, "").Partitions(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"dt=2026-12-03/hr=00", "dt=2026-12-03/hr=01", "dt=2026-12-03/hr=02", "dt=2026-12-03/hr=03"}, listed)
}

// TestMetastoreOutage: the job follows its input on a real broker while
// the Metastore is down for longer than the job's transaction timeout
// (capped at 10 s here). Kafka commits go on (the counts topic grows,
// read_committed), the hours the watermark passes wait, and are added
// when the Metastore is back; the stop then leaves nothing lost or
// landed twice, and the Metastore lists exactly the committed hours.
func TestMetastoreOutage(t *testing.T) {
	c := kafkatest.Broker(t)
	addr := hivetest.Addr(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	o := options{brokers: c.Brokers, topic: kafkatest.TopicName(t), events: 24_000, hours: 8, partitions: 3, seed: 5, rate: 1_000,
		interval: 200 * time.Millisecond, quiet: true, lake: t.TempDir(), table: uniqueTable(), db: "kord_test", late: "into",
		metastore: addr, dir: t.TempDir(), txnMax: 10 * time.Second, follow: true}
	var err error
	o.client, err = o.newClient()
	require.NoError(t, err)
	_, err = o.topics(ctx)
	require.NoError(t, err)
	produced := make(chan error, 1)
	go func() { produced <- produce(ctx, o, 3) }()
	jctx, stop := context.WithCancel(ctx)
	processed := make(chan error, 1)
	go func() {
		_, err := process(jctx, o, accessNormalizer())
		processed <- err
	}()
	pol := hive.Table[Row](addr, o.db, o.table, "")
	listed := func() []string {
		l, err := pol.Partitions(ctx)
		require.NoError(t, err)
		return l
	}
	require.Eventually(t, func() bool { return len(listed()) >= 1 }, time.Minute, 100*time.Millisecond)
	hivetest.Script(t, "stop")
	down := time.Now()
	before := stable(t, c, o.countsTopic(), 3)
	time.Sleep(12 * time.Second) // past the 10 s transaction timeout
	during := stable(t, c, o.countsTopic(), 3)
	hivetest.Script(t, "resume")
	t.Logf("Metastore down %v; counts committed meanwhile: %d to %d", time.Since(down).Round(time.Second), before, during)
	require.Greater(t, during, before+5_000, "Kafka commits went on while the Metastore was down (the last stable offsets moved)")
	require.NoError(t, <-produced)
	// The last hour the watermark passes is 06 (hour 07 holds the newest
	// events): wait for it in the Metastore, then stop.
	require.Eventually(t, func() bool { return len(listed()) == 7 }, time.Minute, 100*time.Millisecond)
	stop()
	require.NoError(t, <-processed)
	o.phase = "verify"
	var out bytes.Buffer
	o.stdout = &out
	require.NoError(t, verify(ctx, o, accessNormalizer()))
	require.Contains(t, out.String(), "verified: events=24000 lake_rows=24000 ")
	require.Contains(t, strings.Join(listed(), ","), "hr=06")
}

// stable sums topic's last stable offsets (ListOffsets, read_committed):
// what read_committed readers can read, which moves only as
// transactions commit.
func stable(t *testing.T, c *kafkatest.Cluster, topic string, partitions int32) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req := kmsg.NewPtrListOffsetsRequest()
	req.IsolationLevel = 1
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	for p := range partitions {
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition, rp.Timestamp = p, -1
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	shards := c.Client(t).RequestSharded(ctx, req)
	var sum int64
	for _, sh := range shards {
		require.NoError(t, sh.Err)
		for _, rt := range sh.Resp.(*kmsg.ListOffsetsResponse).Topics {
			for _, rp := range rt.Partitions {
				require.NoError(t, kerr.ErrorForCode(rp.ErrorCode), "%s[%d]", topic, rp.Partition)
				sum += rp.Offset
			}
		}
	}
	return sum
}

func accessNormalizer() accesslog.Normalizer { return accesslog.Normalizer{} }
