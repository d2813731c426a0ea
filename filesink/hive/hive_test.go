package hive_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kordproject/kord/filesink"
	"github.com/kordproject/kord/filesink/hive"
	"github.com/kordproject/kord/internal/rig/hivetest"
	"github.com/kordproject/kord/keyed"
	"github.com/kordproject/kord/keyed/connector"
	"github.com/kordproject/kord/vfs"
)

// visit is a landed record.
type visit struct {
	User   string `parquet:"user" json:"user"`
	Seq    int64  `parquet:"seq" json:"seq"`
	Action string `parquet:"action" json:"action"`
}

func tableName(t *testing.T) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return "t_" + strings.ToLower(strings.NewReplacer("/", "_", "-", "_").Replace(t.Name())) + "_" + hex.EncodeToString(b[:])
}

// TestTable: the policy creates the table (EXTERNAL, columns from the
// struct, partition keys from the sink's), adds partitions idempotently,
// and refuses, permanently and by name, a table that exists with other
// columns.
func TestTable(t *testing.T) {
	addr := hivetest.Addr(t)
	ctx := context.Background()
	tbl := tableName(t)
	dir := t.TempDir()
	pol := hive.Table[visit](addr, "kord_test", tbl, "file://"+dir)
	part := func(a, path string) filesink.Partition {
		return filesink.Partition{Path: path, Columns: []string{"action"}, Values: []string{a}}
	}
	for _, a := range [][2]string{{"click", "action=click"}, {"view", "action=view"}, {"click", "action=click"},
		{"a/b", "action=a%2Fb"}, {"", "action=__HIVE_DEFAULT_PARTITION__"}} {
		require.NoError(t, pol.CommitPartition(ctx, part(a[0], a[1])))
	}
	got, err := pol.Partitions(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"action=__HIVE_DEFAULT_PARTITION__", "action=a%2Fb", "action=click", "action=view"}, got)

	// The same table seen by a policy of another record type.
	type other struct {
		User string `parquet:"user"`
		Seq  string `parquet:"seq"`
	}
	err = hive.Table[other](addr, "kord_test", tbl, "file://"+dir).CommitPartition(ctx, part("x", "action=x"))
	require.ErrorIs(t, err, keyed.ErrPermanent)
	require.ErrorContains(t, err, "column seq is bigint, the records' is string")
	require.ErrorContains(t, err, "column action (string) is not in the records")
	require.ErrorContains(t, err, tbl)
}

// TestTableDown: a Metastore that does not answer is an error, not
// permanent, that names it; a cancelled context ends the call.
func TestTableDown(t *testing.T) {
	ctx := context.Background()
	pol := hive.Table[visit]("127.0.0.1:1", "kord_test", "t", "file:///tmp/x")
	err := pol.CommitPartition(ctx, filesink.Partition{Path: "action=x", Columns: []string{"action"}, Values: []string{"x"}})
	require.Error(t, err)
	require.NotErrorIs(t, err, keyed.ErrPermanent)
	require.ErrorContains(t, err, "127.0.0.1:1")
}

// hourlyJob lands visits in hourly partitions by event time, committed
// to the Metastore and with a _SUCCESS, as the job's only sink.
func hourlyJob(fsys vfs.FS, ckpt string, src *keyed.MemorySource[visit], sink *filesink.Sink[visit]) *keyed.Job {
	j := keyed.NewJob("tohive", keyed.FS(fsys), keyed.Dir(ckpt), keyed.CheckpointInterval(20*time.Millisecond))
	rows := keyed.ProcessFunc(keyed.ByPartition(keyed.FromSource(j, "visits", 2, connector.Source[visit](src)).Watermarks(0)), "pass", 2,
		func(_ []byte, v visit, out *keyed.Collector[visit]) error {
			out.Emit(v)
			return nil
		})
	keyed.ToSink(rows, "lake", connector.Sink[visit](sink))
	return j
}

var base = time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)

// appendHour adds hour h of visits to src: a visit a minute of each of
// three users, one per source partition.
func appendHour(src *keyed.MemorySource[visit], h int) {
	for m := range 60 {
		for u := range 3 {
			v := visit{User: fmt.Sprintf("u%d", u), Seq: int64(h*60 + m), Action: "click"}
			src.AppendAt(int32(u), []byte(v.User), v, base.Add(time.Duration(h*60+m)*time.Minute))
		}
	}
}

// successDirs lists the directories under dir with a _SUCCESS.
func successDirs(t *testing.T, dir string) []string {
	var out []string
	require.NoError(t, filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Name() == "_SUCCESS" {
			rel, _ := filepath.Rel(dir, filepath.Dir(p))
			out = append(out, filepath.ToSlash(rel))
		}
		return err
	}))
	sort.Strings(out)
	return out
}

func hours(from, to int) []string {
	var out []string
	for h := from; h < to; h++ {
		out = append(out, fmt.Sprintf("dt=2026-12-03/hr=%02d", h))
	}
	return out
}

// TestMetastoreOutage: the Metastore is stopped while the job runs. The
// job's checkpoints go on committing; the partitions due wait, and are
// added when it is back. A partition whose commit still waited when the
// job stopped is added by the next run, from the checkpoint. The
// Metastore lists exactly the directories with a _SUCCESS: each hour the
// watermark passed.
func TestMetastoreOutage(t *testing.T) {
	addr := hivetest.Addr(t)
	ctx := context.Background()
	dir, ckpt := t.TempDir(), t.TempDir()
	pol := hive.Table[visit](addr, "kord_test", tableName(t), "file://"+dir, hive.Timeout(2*time.Second))
	mk := func() *filesink.Sink[visit] {
		return filesink.New(filesink.Dir(vfs.Default(), dir), filesink.Parquet[visit](filesink.Uncompressed),
			filesink.PartitionBy(filesink.Hourly[visit]()...),
			filesink.CommitPartitions(time.Hour, filesink.SuccessFile(), pol))
	}
	src := keyed.NewMemorySource[visit]("visits", 3, false)
	run := func(sink *filesink.Sink[visit]) (stop func()) {
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- hourlyJob(vfs.Default(), ckpt, src, sink).Run(rctx) }()
		return func() {
			cancel()
			require.NoError(t, <-done)
		}
	}
	listed := func() []string {
		got, err := pol.Partitions(ctx)
		require.NoError(t, err)
		return got
	}
	committedID := func(sink *filesink.Sink[visit]) uint64 {
		r, err := sink.Recorded(ctx)
		require.NoError(t, err)
		if r == nil {
			return 0
		}
		return r.Ref.ID
	}
	resumed := true
	defer func() {
		if !resumed {
			hivetest.Script(t, "resume")
		}
	}()
	outage := func() {
		hivetest.Script(t, "stop")
		resumed = false
	}

	sink := mk()
	stop := run(sink)
	appendHour(src, 0)
	appendHour(src, 1)
	require.Eventually(t, func() bool { return len(listed()) == 1 }, 20*time.Second, 20*time.Millisecond)
	outage()
	for h := 2; h < 5; h++ {
		appendHour(src, h)
	}
	// Hours 1 to 3 wait; checkpoints commit meanwhile.
	require.Eventually(t, func() bool { return len(sink.Uncommitted()) == 3 }, 20*time.Second, 10*time.Millisecond)
	first := committedID(sink)
	require.Eventually(t, func() bool { return committedID(sink) > first+3 }, 20*time.Second, 10*time.Millisecond,
		"checkpoints commit while the Metastore is down")
	hivetest.Script(t, "resume")
	resumed = true
	require.Eventually(t, func() bool { return len(sink.Uncommitted()) == 0 }, 60*time.Second, 20*time.Millisecond)
	require.Equal(t, hours(0, 4), listed())

	// Down again when the job stops with hour 4 due: the next run adds it.
	outage()
	appendHour(src, 5)
	require.Eventually(t, func() bool { return len(sink.Uncommitted()) == 1 }, 20*time.Second, 10*time.Millisecond)
	stop()
	hivetest.Script(t, "resume")
	resumed = true
	sink = mk()
	stop = run(sink)
	require.Eventually(t, func() bool { return len(listed()) == 5 }, 60*time.Second, 20*time.Millisecond)
	stop()
	require.Equal(t, hours(0, 5), listed())
	require.Equal(t, hours(0, 5), successDirs(t, dir))
}
