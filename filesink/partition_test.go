package filesink_test

import (
	"context"
	"errors"
	"fmt"
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
	rel := func(d string) string { return strings.TrimPrefix(strings.TrimPrefix(d, dir), "/") }
	rows, success := map[string][]string{}, map[string]bool{}
	walkFiles(t, fsys, dir, func(d, n, _ string) {
		if n == "_SUCCESS" {
			success[rel(d)] = true
		}
	})
	readRows(t, fsys, dir, func(d string, h hit) { rows[rel(d)] = append(rows[rel(d)], h.id()) })
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

// group is a commit group shared by the processes of a job
// (connector.Membership): each process's sink commits into one memory
// sink per process, and records each partition's checkpoint in the group.
type group struct {
	mu   sync.Mutex
	recs map[int32]connector.PartitionRecord
}

// memberSink is one process's first sink: a MemorySink with a fixed
// assignment in the group.
type memberSink struct {
	*keyed.MemorySink[hit]
	g     *group
	parts []int32
}

func (s *memberSink) Assignment(context.Context) (map[string][]int32, <-chan struct{}, error) {
	return map[string][]int32{"events": s.parts}, make(chan struct{}), nil
}

func (s *memberSink) Released() {}

func (s *memberSink) Commit(ctx context.Context, ref checkpoint.Ref, offsets []checkpoint.PartitionOffset) error {
	if err := s.MemorySink.Commit(ctx, ref, offsets); err != nil {
		return err
	}
	s.g.mu.Lock()
	defer s.g.mu.Unlock()
	for _, o := range offsets {
		s.g.recs[o.Partition] = connector.PartitionRecord{Topic: o.Topic, Partition: o.Partition, Offset: o.Offset, Ref: ref}
	}
	return nil
}

func (s *memberSink) Recorded(context.Context) (*connector.Recorded, error) {
	s.g.mu.Lock()
	defer s.g.mu.Unlock()
	if len(s.g.recs) == 0 {
		return nil, nil
	}
	rec := &connector.Recorded{Where: "the test's group"}
	for _, r := range s.g.recs {
		rec.Parts = append(rec.Parts, r)
	}
	return rec, nil
}

// TestPartitionCommitTwoProcesses: a job of two processes, each reading
// one input partition, lands rows in one table. One process's input runs
// five minutes of event time ahead of the other's: no partition commits
// until both have passed it (the oldest watermark of all), and each
// partition, at each commit, holds every row of its minute from both.
func TestPartitionCommitTwoProcesses(t *testing.T) {
	mem := vfs.NewMem()
	src := keyed.NewMemorySource[hit]("events", 2, false)
	g := &group{recs: map[int32]connector.PartitionRecord{}}
	log := &commitLog{fsys: mem, dir: "/lake", t: t, seen: map[string][][]string{}}
	add := func(p int32, from, to int) {
		for m := from; m < to; m++ {
			for i := range 20 {
				h := hit{User: fmt.Sprintf("p%d", p), Seq: m*20 + i, At: epoch0 + int64(m)*minute + int64(i)*1000}
				src.AppendAt(p, []byte(h.User), h, time.UnixMilli(h.At))
			}
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var sinks []*filesink.Sink[hit]
	done := make(chan error, 2)
	for p := range int32(2) {
		sink := filesink.New(filesink.Dir(mem, "/lake"), filesink.JSONLines[hit](filesink.Uncompressed), filesink.PartitionBy(minutes...),
			filesink.CommitPartitions(time.Minute, log.policy()), filesink.Late(filesink.LateInto("_late")))
		sinks = append(sinks, sink)
		j := keyed.NewJob("hive2", keyed.FS(mem), keyed.Dir("/ckpt"), keyed.CheckpointInterval(5*time.Millisecond), keyed.Instance(fmt.Sprintf("p%d", p)))
		rows := keyed.ProcessFunc(keyed.ByPartition(keyed.FromSource(j, "events", 1, connector.Source[hit](src)).Watermarks(0)), "pass", 1,
			func(_ []byte, r hit, out *keyed.Collector[hit]) error { out.Emit(r); return nil })
		keyed.ToSink(rows, "kafka", connector.Sink[hit](&memberSink{MemorySink: keyed.NewMemorySink[hit](), g: g, parts: []int32{p}}))
		keyed.ToSink(rows, "files", connector.Sink[hit](sink))
		go func() { done <- j.Run(ctx) }()
	}
	add(0, 0, 6) // process 0: minutes 0 to 5
	add(1, 0, 1) // process 1: minute 0
	// Process 0's watermark passes minute 4 while process 1's stays in
	// minute 0: wait for process 0 to record it, then for a while more.
	require.Eventually(t, func() bool {
		data, err := mem.ReadFile("/lake/_kord/hive2.wm/events.0")
		return err == nil && string(data) >= fmt.Sprint(epoch0+5*minute)
	}, 20*time.Second, 5*time.Millisecond)
	time.Sleep(200 * time.Millisecond)
	log.mu.Lock()
	require.Empty(t, log.seen, "a partition committed before both processes passed it")
	log.mu.Unlock()
	add(1, 1, 6) // process 1 catches up
	require.Eventually(t, func() bool {
		log.mu.Lock()
		defer log.mu.Unlock()
		return len(log.seen) == 5 // minutes 0 to 4; minute 5 waits for a watermark past it
	}, 20*time.Second, 5*time.Millisecond)
	cancel()
	require.NoError(t, <-done)
	require.NoError(t, <-done)
	rows, _ := visible(t, mem, "/lake")
	for p, seen := range log.seen {
		require.Len(t, rows[p], 40, "partition %s: both processes' rows of its minute", p)
		for i, s := range seen {
			require.Equal(t, rows[p], s, "partition %s: commit %d saw other rows than it holds", p, i)
		}
	}
}

// TestPartitionCommitRestarts: a job of two processes; one is stopped
// and started again, and killed (its run failed, its open files
// abandoned), again and again, while the other writes on. Every row lands
// once, the running process never fails (its files in progress are not
// the restarted one's to delete), and the partitions the watermark passed
// commit with every row of their minute.
func TestPartitionCommitRestarts(t *testing.T) {
	mem := vfs.NewMem()
	src := keyed.NewMemorySource[hit]("events", 2, false)
	g := &group{recs: map[int32]connector.PartitionRecord{}}
	log := &commitLog{fsys: mem, dir: "/lake", t: t, seen: map[string][][]string{}}
	var all []hit
	add := func(m int) {
		for p := range int32(2) {
			for i := range 20 {
				h := hit{User: fmt.Sprintf("p%d", p), Seq: m*20 + i, At: epoch0 + int64(m)*minute + int64(i)*1000}
				src.AppendAt(p, []byte(h.User), h, time.UnixMilli(h.At))
				all = append(all, h)
			}
		}
	}
	start := func(ctx context.Context, p int32, fail bool) chan error {
		sink := filesink.New(filesink.Dir(mem, "/lake"), filesink.JSONLines[hit](filesink.Uncompressed), filesink.PartitionBy(minutes...),
			filesink.CommitPartitions(time.Minute, log.policy()), filesink.Late(filesink.LateInto("_late")))
		j := keyed.NewJob("hive3", keyed.FS(mem), keyed.Dir("/ckpt"), keyed.CheckpointInterval(5*time.Millisecond), keyed.Instance(fmt.Sprintf("p%d", p)),
			keyed.RestartStrategy(keyed.FixedDelay(0, 0)))
		n := 0
		rows := keyed.ProcessFunc(keyed.ByPartition(keyed.FromSource(j, "events", 1, connector.Source[hit](src)).Watermarks(0)), "pass", 1,
			func(_ []byte, r hit, out *keyed.Collector[hit]) error {
				if n++; fail && n == 15 {
					return errors.New("failed on purpose")
				}
				out.Emit(r)
				return nil
			})
		keyed.ToSink(rows, "kafka", connector.Sink[hit](&memberSink{MemorySink: keyed.NewMemorySink[hit](), g: g, parts: []int32{p}}))
		keyed.ToSink(rows, "files", connector.Sink[hit](sink))
		done := make(chan error, 1)
		go func() { done <- j.Run(ctx) }()
		return done
	}
	ctx0, stop0 := context.WithCancel(context.Background())
	done0 := start(ctx0, 0, false)
	for round := range 8 {
		add(round)
		ctx1, stop1 := context.WithCancel(context.Background())
		done1 := start(ctx1, 1, round%2 == 1)
		time.Sleep(50 * time.Millisecond)
		stop1()
		if err := <-done1; round%2 == 0 {
			require.NoError(t, err, "round %d", round)
		}
		select {
		case err := <-done0:
			t.Fatalf("round %d: the running process ended: %v", round, err)
		default:
		}
	}
	ctx1, stop1 := context.WithCancel(context.Background())
	done1 := start(ctx1, 1, false)
	// Minutes 0 to 6 commit (7 waits for a watermark past it).
	require.Eventually(t, func() bool {
		log.mu.Lock()
		defer log.mu.Unlock()
		return len(log.seen) == 7
	}, 30*time.Second, 5*time.Millisecond)
	stop1()
	stop0()
	require.NoError(t, <-done1)
	require.NoError(t, <-done0)
	checkPartitionsOpen(t, mem, all, log)
}

// checkPartitionsOpen is checkPartitions for a run that stopped with
// partitions not yet committed: every row once, and each committed
// partition, at each commit, held exactly the rows it holds.
func checkPartitionsOpen(t *testing.T, fsys vfs.FS, all []hit, log *commitLog) {
	t.Helper()
	rows, _ := visible(t, fsys, "/lake")
	count := map[string]int{}
	for _, ids := range rows {
		for _, id := range ids {
			count[id]++
		}
	}
	for _, h := range all {
		require.Equal(t, 1, count[h.id()], "row %s landed %d times", h.id(), count[h.id()])
	}
	require.Len(t, count, len(all))
	for p, seen := range log.seen {
		for i, s := range seen {
			require.Equal(t, rows[p], s, "partition %s: commit %d saw other rows than it holds", p, i)
		}
	}
}
