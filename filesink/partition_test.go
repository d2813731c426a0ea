package filesink_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kordproject/kord/checkpoint"
	"github.com/kordproject/kord/filesink"
	"github.com/kordproject/kord/internal/rig/crashfs"
	"github.com/kordproject/kord/keyed"
	"github.com/kordproject/kord/keyed/connector"
	"github.com/kordproject/kord/vfs"
)

// TestEscape: partition values are escaped as Hive escapes them
// (FileUtils.escapePathName), and an empty one is Hive's default
// partition.
func TestEscape(t *testing.T) {
	type v struct{ S string }
	sink := filesink.New(filesink.Dir(vfs.NewMem(), "/t"), filesink.JSONLines[v](filesink.Uncompressed),
		filesink.PartitionBy(filesink.FieldColumn("Action", func(x v) string { return x.S })))
	for in, want := range map[string]string{
		"click":     "action=click",
		"a/b":       "action=a%2Fb",
		"k=v:w":     "action=k%3Dv%3Aw",
		`"#%'*?\`:   "action=%22%23%25%27%2A%3F%5C",
		"{[x]}^":    "action=%7B%5Bx%5D}%5E",
		"\x01\x1f":  "action=%01%1F",
		"\x7f":      "action=%7F",
		"":          "action=__HIVE_DEFAULT_PARTITION__",
		"é and ~ !": "action=é and ~ !",
	} {
		got, err := filesink.PartitionOf(sink, v{S: in}, 0)
		require.NoError(t, err)
		require.Equal(t, want, got, "%q", in)
	}
}

// TestPartitionLayouts: time columns give the path and, parsed back, the
// partition's time; layouts that do not name a span are refused.
func TestPartitionLayouts(t *testing.T) {
	type v struct{}
	at := time.Date(2026, 12, 3, 8, 17, 42, 0, time.UTC).UnixMilli()
	sink := filesink.New(filesink.Dir(vfs.NewMem(), "/t"), filesink.JSONLines[v](filesink.Uncompressed),
		filesink.PartitionBy(filesink.Hourly[v]()...))
	got, err := filesink.PartitionOf(sink, v{}, at)
	require.NoError(t, err)
	require.Equal(t, "dt=2026-12-03/hr=08", got)
	_, err = filesink.PartitionOf(sink, v{}, connector.NoTime)
	require.ErrorContains(t, err, "no event time")

	for _, cols := range [][]filesink.Column[v]{
		{filesink.TimeColumn[v]("hr", "15")}, // an hour of which day?
		{filesink.TimeColumn[v]("dt", "2006-01-02"), filesink.TimeColumn[v]("DT", "15")},
		{filesink.TimeColumn[v]("a=b", "2006")},
	} {
		s := filesink.New(filesink.Dir(vfs.NewMem(), "/t"), filesink.JSONLines[v](filesink.Uncompressed), filesink.PartitionBy(cols...))
		require.Error(t, s.ValidateSink(connector.SinkInfo{}), "%v", cols)
	}
	s := filesink.New(filesink.Dir(vfs.NewMem(), "/t"), filesink.JSONLines[v](filesink.Uncompressed),
		filesink.PartitionBy(filesink.FieldColumn("a", func(v) string { return "" })), filesink.CommitPartitions(time.Hour))
	require.ErrorContains(t, s.ValidateSink(connector.SinkInfo{}), "needs PartitionBy with a time column")
}

// hit is a record with its own event time, landed in minute partitions.
type hit struct {
	User string `json:"user"`
	Seq  int    `json:"seq"`
	At   int64  `json:"at"`
}

func (h hit) id() string { return fmt.Sprintf("%s/%d", h.User, h.Seq) }

var minutes = []filesink.Column[hit]{filesink.TimeColumn[hit]("dt", "2006-01-02"), filesink.TimeColumn[hit]("mi", "1504")}

const minute = int64(time.Minute / time.Millisecond)

var epoch0 = time.Date(2026, 12, 3, 8, 0, 0, 0, time.UTC).UnixMilli()

// partitionOf is the expected partition of a time.
func partitionOf(at int64) string {
	t := time.UnixMilli(at).UTC()
	return "dt=" + t.Format("2006-01-02") + "/mi=" + t.Format("1504")
}

// hits fills a bounded source: users' events over six minutes of event
// time, each partition's in order, and, when late, some events of the
// first minute again at the end (late by any watermark past it).
func hits(users, n int, late bool) (*keyed.MemorySource[hit], []hit) {
	src := keyed.NewMemorySource[hit]("events", 3, true)
	var all []hit
	for seq := range n {
		for u := range users {
			h := hit{User: fmt.Sprintf("u%02d", u), Seq: seq, At: epoch0 + int64(seq)*6*minute/int64(n) + int64(u)}
			src.AppendAt(int32(u%3), []byte(h.User), h, time.UnixMilli(h.At))
			all = append(all, h)
		}
	}
	if late {
		for u := range users {
			h := hit{User: fmt.Sprintf("u%02d", u), Seq: n, At: epoch0 + 1}
			src.AppendAt(int32(u%3), []byte(h.User), h, time.UnixMilli(h.At))
			all = append(all, h)
		}
	}
	return src, all
}

func hitJob(fsys vfs.FS, src *keyed.MemorySource[hit], files connector.Sink[hit]) *keyed.Job {
	j := keyed.NewJob("hive", keyed.FS(fsys), keyed.Dir("/ckpt"), keyed.CheckpointInterval(2*time.Millisecond))
	rows := keyed.ProcessFunc(keyed.ByPartition(keyed.FromSource(j, "events", 2, connector.Source[hit](src)).Watermarks(0)), "pass", 2,
		func(_ []byte, r hit, out *keyed.Collector[hit]) error { out.Emit(r); return nil })
	keyed.ToSink(rows, "files", files)
	return j
}

// visible reads the published rows under dir, by the directory that
// holds them (relative to dir), and the directories with a _SUCCESS.
func visible(t *testing.T, fsys vfs.FS, dir string) (map[string][]string, map[string]bool) {
	t.Helper()
	rows, success := map[string][]string{}, map[string]bool{}
	var walk func(d string)
	walk = func(d string) {
		names, err := fsys.ReadDir(d)
		require.NoError(t, err)
		rel := strings.TrimPrefix(strings.TrimPrefix(d, dir), "/")
		for _, n := range names {
			p := path.Join(d, n)
			if _, err := fsys.ReadDir(p); err == nil {
				walk(p)
				continue
			}
			if n == "_SUCCESS" {
				success[rel] = true
			}
			if strings.HasPrefix(n, ".") || !strings.HasSuffix(n, ".jsonl") {
				continue
			}
			data, err := fsys.ReadFile(p)
			require.NoError(t, err)
			sc := bufio.NewScanner(bytes.NewReader(data))
			for sc.Scan() {
				var h hit
				require.NoError(t, json.Unmarshal(sc.Bytes(), &h), "%s: %q", p, sc.Text())
				rows[rel] = append(rows[rel], h.id())
			}
		}
	}
	walk(dir)
	for _, r := range rows {
		sort.Strings(r)
	}
	return rows, success
}

// commitLog is a commit policy noting, at each commit of a partition, the
// rows then visible in it.
type commitLog struct {
	mu     sync.Mutex
	fsys   vfs.FS
	dir    string
	t      *testing.T
	seen   map[string][][]string // partition -> the rows visible at each commit
	before map[string]bool       // a commit came before the partition's time + delay passed
}

func (c *commitLog) policy() filesink.CommitPolicy {
	return filesink.CommitFunc(func(ctx context.Context, p filesink.Partition) error {
		rows, _ := visible(c.t, c.fsys, c.dir)
		c.mu.Lock()
		defer c.mu.Unlock()
		require.Equal(c.t, partitionOf(p.Time.UnixMilli()), p.Path)
		require.Equal(c.t, []string{"dt", "mi"}, p.Columns)
		c.seen[p.Path] = append(c.seen[p.Path], rows[p.Path])
		return nil
	})
}

// TestPartitionCommitCrashEverywhere: rows land in minute partitions by
// event time, and each partition commits (a _SUCCESS and a policy that
// looks at what is visible) once the watermark has passed its minute. A
// crash at each file-system operation in turn, the partition commits'
// included, then a run on what the disk kept:
//   - every row lands exactly once, in its partition, or, late, under
//     _late (LateInto);
//   - every partition has its _SUCCESS, and at each of its commits held
//     exactly the rows it holds at the end (it was complete, and nothing
//     joined it after);
//   - the late rows counted are those under _late.
func TestPartitionCommitCrashEverywhere(t *testing.T) {
	const users, n = 4, 100
	crashes := 0
	for k := 1; ; k++ {
		mem := vfs.NewMem()
		rig, fsys := crashfs.New(mem)
		src, all := hits(users, n, true)
		log := &commitLog{fsys: mem, dir: "/lake", t: t, seen: map[string][][]string{}}
		mk := func(fsys vfs.FS) *filesink.Sink[hit] {
			return filesink.New(filesink.Dir(fsys, "/lake"), filesink.JSONLines[hit](filesink.Uncompressed), filesink.PartitionBy(minutes...),
				filesink.CommitPartitions(time.Minute, filesink.SuccessFile(), log.policy()), filesink.Late(filesink.LateInto("_late")))
		}
		sink := mk(fsys)
		rig.CrashIn(k)
		err := hitJob(fsys, src, sink).Run(context.Background())
		late := sink.LateRecords()
		final := mem
		if rig.Crashed() {
			crashes++
			after := rig.After()
			sink = mk(after)
			log.fsys = after
			require.NoError(t, hitJob(after, src, sink).Run(context.Background()), "crash at operation %d", k)
			final, late = after, sink.LateRecords()
		} else {
			require.NoError(t, err)
		}
		checkPartitions(t, final, all, log, true)
		if !rig.Crashed() {
			rows, _ := visible(t, final, "/lake")
			lateRows := 0
			for p, r := range rows {
				if strings.HasPrefix(p, "_late/") {
					lateRows += len(r)
				}
			}
			require.Equal(t, int64(lateRows), late, "late rows counted")
			t.Logf("%d crash points, %d late rows", crashes, lateRows)
			break
		}
	}
	require.Greater(t, crashes, 50, "crashes at the file system's operations")
}

// checkPartitions checks the landed rows and the commits of the
// partitions against the input all. strict: no row may join a partition
// after its commit (LateInto); otherwise (LateRecommit) the last commit
// of each must have seen all its rows.
func checkPartitions(t *testing.T, fsys vfs.FS, all []hit, log *commitLog, strict bool) {
	t.Helper()
	rows, success := visible(t, fsys, "/lake")
	count := map[string]int{}
	for p, ids := range rows {
		for _, id := range ids {
			count[id]++
		}
		part := strings.TrimPrefix(p, "_late/")
		if part == p {
			require.True(t, success[p], "partition %s has no _SUCCESS", p)
		}
		seen := log.seen[part]
		if part != p {
			continue
		}
		require.NotEmpty(t, seen, "partition %s was never committed", p)
		if strict {
			for i, s := range seen {
				require.Equal(t, ids, s, "partition %s: commit %d saw other rows than it holds", p, i)
			}
		} else {
			require.Equal(t, ids, seen[len(seen)-1], "partition %s: its last commit did not see every row", p)
		}
	}
	for _, h := range all {
		require.Equal(t, 1, count[h.id()], "row %s landed %d times", h.id(), count[h.id()])
		if !strict {
			require.Contains(t, rows[partitionOf(h.At)], h.id())
		}
	}
	require.Len(t, count, len(all))
}

// TestPartitionRecommit: with LateRecommit, late rows join their
// partition in a new file and the partition is committed again, its last
// commit seeing every row.
func TestPartitionRecommit(t *testing.T) {
	const users, n = 4, 600
	mem := vfs.NewMem()
	src, all := hits(users, n, true)
	log := &commitLog{fsys: mem, dir: "/lake", t: t, seen: map[string][][]string{}}
	sink := filesink.New(filesink.Dir(mem, "/lake"), filesink.JSONLines[hit](filesink.Uncompressed), filesink.PartitionBy(minutes...),
		filesink.CommitPartitions(time.Minute, filesink.SuccessFile(), log.policy()))
	require.NoError(t, hitJob(mem, src, sink).Run(context.Background()))
	checkPartitions(t, mem, all, log, false)
	require.Empty(t, sink.Uncommitted())
	t.Logf("%d late rows; first minute committed %d times", sink.LateRecords(), len(log.seen[partitionOf(epoch0)]))
}

// TestLateRecords: a record whose partition the watermark has passed (its
// minute plus the delay) is late: LateInto lands it under its own
// directory, which no commit covers; LateRecommit lands it in its
// partition and commits that again once its checkpoint commits.
func TestLateRecords(t *testing.T) {
	ctx := context.Background()
	p0 := partitionOf(epoch0)
	for _, tc := range []struct {
		name    string
		late    filesink.LatePolicy
		rows    map[string]int // directory -> rows at the end
		commits []string
	}{
		{"into", filesink.LateInto("_late"), map[string]int{p0: 2, "_late/" + p0: 2}, []string{p0}},
		{"recommit", filesink.LateRecommit, map[string]int{p0: 4}, []string{p0, p0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := vfs.NewMem()
			var mu sync.Mutex
			var commits []string
			sink := filesink.New(filesink.Dir(mem, "/lake"), filesink.JSONLines[hit](filesink.Uncompressed), filesink.PartitionBy(minutes...),
				filesink.CommitPartitions(time.Minute, filesink.CommitFunc(func(_ context.Context, p filesink.Partition) error {
					mu.Lock()
					defer mu.Unlock()
					commits = append(commits, p.Path)
					return nil
				})), filesink.Late(tc.late))
			require.NoError(t, sink.Reset(ctx, connector.SinkInfo{Job: "late"}))
			write := func(epoch uint64, seq int) {
				h := hit{User: "u", Seq: seq, At: epoch0 + int64(seq)}
				require.NoError(t, sink.WriteAt(ctx, epoch, h, h.At))
			}
			commit := func(id uint64) {
				_, err := sink.SnapshotState(id)
				require.NoError(t, err)
				require.NoError(t, sink.Commit(ctx, checkpoint.Ref{ID: id}, nil))
			}
			write(1, 0)                       // on time
			sink.Advance(epoch0 + minute - 1) // not yet past minute 0 and its minute of delay
			write(1, 1)
			sink.Advance(epoch0 + 2*minute)
			write(1, 2) // late
			commit(1)
			require.Eventually(t, func() bool { return len(sink.Uncommitted()) == 0 }, 10*time.Second, time.Millisecond)
			write(2, 3) // late again
			commit(2)
			require.NoError(t, sink.Close())
			require.Equal(t, int64(2), sink.LateRecords())
			rows, _ := visible(t, mem, "/lake")
			got := map[string]int{}
			for d, r := range rows {
				got[d] = len(r)
			}
			require.Equal(t, tc.rows, got)
			require.Equal(t, tc.commits, commits)
		})
	}
}
