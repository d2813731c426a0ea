package filesink_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"path"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gocloud.dev/blob"
	"gocloud.dev/blob/fileblob"
	"gocloud.dev/blob/memblob"

	"github.com/kordproject/kord/filesink"
	"github.com/kordproject/kord/internal/rig/crashfs"
	"github.com/kordproject/kord/internal/rig/syncbuf"
	"github.com/kordproject/kord/keyed"
	"github.com/kordproject/kord/keyed/connector"
	"github.com/kordproject/kord/vfs"
)

// row is one landed record: an event of a user, numbered per user.
type row struct {
	User string `json:"user"`
	Seq  int    `json:"seq"`
}

// events fills a bounded source: users × n events, spread over 3
// partitions by user.
func events(users, n int) *keyed.MemorySource[row] {
	src := keyed.NewMemorySource[row]("events", 3, true)
	for seq := range n {
		for u := range users {
			src.Append(int32(u%3), []byte(fmt.Sprint(u)), row{User: fmt.Sprintf("u%02d", u), Seq: seq})
		}
	}
	return src
}

// landJob declares the job: events by partition through a stage that
// passes them on, to kafka (a MemorySink standing for the Kafka sink that
// decides each commit) and to the file sink, bucketed by user's first
// letter and digit. With kafka nil the file sink is the only sink.
func landJob(fsys vfs.FS, src *keyed.MemorySource[row], kafka connector.Sink[row], files connector.Sink[row]) *keyed.Job {
	j := keyed.NewJob("land", keyed.FS(fsys), keyed.Dir("/ckpt"), keyed.CheckpointInterval(2*time.Millisecond))
	rows := keyed.ProcessFunc(keyed.ByPartition(keyed.FromSource(j, "events", 2, connector.Source[row](src))), "pass", 2,
		func(_ []byte, r row, out *keyed.Collector[row]) error { out.Emit(r); return nil })
	if kafka != nil {
		keyed.ToSink(rows, "kafka", kafka)
	}
	keyed.ToSink(rows, "files", files)
	return j
}

func byUser(r row) string { return "user=" + r.User[:2] }

// walkFiles calls each for every file under dir: the directory that
// holds it, its name and path.
func walkFiles(t *testing.T, fsys vfs.FS, dir string, each func(d, name, p string)) {
	t.Helper()
	names, err := fsys.ReadDir(dir)
	require.NoError(t, err)
	for _, n := range names {
		p := path.Join(dir, n)
		if _, err := fsys.ReadDir(p); err == nil {
			walkFiles(t, fsys, p, each)
			continue
		}
		each(dir, n, p)
	}
}

// readRows reads every published JSON-lines file under dir (those a
// reader's glob "**/*.jsonl" finds): each row with the directory of its
// file.
func readRows[T any](t *testing.T, fsys vfs.FS, dir string, each func(d string, v T)) {
	t.Helper()
	walkFiles(t, fsys, dir, func(d, n, p string) {
		if strings.HasPrefix(n, ".") || !strings.HasSuffix(n, ".jsonl") {
			return
		}
		data, err := fsys.ReadFile(p)
		require.NoError(t, err)
		sc := bufio.NewScanner(bytes.NewReader(data))
		for sc.Scan() {
			var v T
			require.NoError(t, json.Unmarshal(sc.Bytes(), &v), "%s: %q", p, sc.Text())
			each(d, v)
		}
	})
}

// landed reads every published file under dir, and fails on a staged
// file of the job that is still there when finished says the run ended
// cleanly.
func landed(t *testing.T, fsys vfs.FS, dir string, finished bool) map[string]int {
	t.Helper()
	if finished {
		walkFiles(t, fsys, dir, func(_, n, p string) {
			require.False(t, strings.HasSuffix(n, ".inprogress"), "staged file %s left after a clean end", p)
		})
	}
	got := map[string]int{}
	readRows(t, fsys, dir, func(d string, r row) {
		require.Equal(t, byUser(r), path.Base(d), "a row of %s in the wrong bucket %s", r.User, d)
		got[fmt.Sprintf("%s/%d", r.User, r.Seq)]++
	})
	return got
}

func requireOnce(t *testing.T, got map[string]int, users, n int) {
	t.Helper()
	for u := range users {
		for seq := range n {
			k := fmt.Sprintf("u%02d/%d", u, seq)
			require.Equal(t, 1, got[k], "row %s landed %d times", k, got[k])
		}
	}
	require.Len(t, got, users*n)
}

// TestLandExactlyOnceCrashEverywhere: the job lands its rows in files
// beside a Kafka-like sink that decides each commit; a crash at each
// file-system operation in turn (creating a part, writing, fsync of a
// file or directory, the rename that publishes, a checkpoint's files and
// metadata) leaves the disk as a dead process would, and a second run on
// what the disk kept lands every row exactly once, with no staged file
// left and none visible to a reader's glob.
//
// With CompactEvery, the crash comes at each step of the merges too
// (reading pieces, writing and publishing the merged file, deleting the
// pieces).
func TestLandExactlyOnceCrashEverywhere(t *testing.T) {
	t.Run("file per checkpoint", func(t *testing.T) { landCrashEverywhere(t) })
	t.Run("compacted", func(t *testing.T) { landCrashEverywhere(t, filesink.CompactEvery(5*time.Millisecond)) })
}

func landCrashEverywhere(t *testing.T, opts ...filesink.Opt) {
	const users, n = 6, 40
	opts = append([]filesink.Opt{filesink.BucketBy(byUser)}, opts...)
	crashes := 0
	for k := 1; ; k++ {
		mem := vfs.NewMem()
		rig, fsys := crashfs.New(mem)
		kafka := keyed.NewMemorySink[row]()
		src := events(users, n)
		sink := filesink.New(filesink.Dir(fsys, "/lake"), filesink.JSONLines[row](filesink.Uncompressed), opts...)
		rig.CrashIn(k)
		err := landJob(fsys, src, kafka, sink).Run(context.Background())
		if !rig.Crashed() {
			require.NoError(t, err)
			requireOnce(t, landed(t, mem, "/lake", true), users, n)
			break
		}
		crashes++
		after := rig.After()
		sink = filesink.New(filesink.Dir(after, "/lake"), filesink.JSONLines[row](filesink.Uncompressed), opts...)
		require.NoError(t, landJob(after, src, kafka, sink).Run(context.Background()), "crash at operation %d", k)
		requireOnce(t, landed(t, after, "/lake", true), users, n)
	}
	require.Greater(t, crashes, 50, "crashes at the file system's operations")
	t.Logf("%d crash points", crashes)
}

// TestLandAlone: with the file sink as the job's only sink, its own commit
// record decides; a failure after a commit and a restart land every row
// once, and the record names the last checkpoint.
func TestLandAlone(t *testing.T) {
	const users, n = 5, 60
	mem := vfs.NewMem()
	rig, fsys := crashfs.New(mem)
	src := events(users, n)
	sink := filesink.New(filesink.Dir(fsys, "/lake"), filesink.JSONLines[row](filesink.Uncompressed), filesink.BucketBy(byUser))
	rig.CrashIn(120)
	require.Error(t, landJob(fsys, src, nil, sink).Run(context.Background()))
	require.True(t, rig.Crashed())
	after := rig.After()
	sink = filesink.New(filesink.Dir(after, "/lake"), filesink.JSONLines[row](filesink.Uncompressed), filesink.BucketBy(byUser))
	require.NoError(t, landJob(after, src, nil, sink).Run(context.Background()))
	requireOnce(t, landed(t, after, "/lake", true), users, n)
	rec, err := sink.Recorded(context.Background())
	require.NoError(t, err)
	require.NotNil(t, rec)
	require.Contains(t, rec.Where, "_kord/land.commit")
}

// landedIn reads every published object of bucket b under the sink's
// layout, as landed does for a directory.
func landedIn(t *testing.T, b *blob.Bucket, finished bool) map[string]int {
	t.Helper()
	got := map[string]int{}
	it := b.List(nil)
	for {
		obj, err := it.Next(context.Background())
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		base := path.Base(obj.Key)
		if finished {
			require.False(t, strings.HasSuffix(base, ".inprogress"), "staged object %s left after a clean end", obj.Key)
		}
		if strings.HasPrefix(base, ".") || !strings.HasSuffix(base, ".jsonl") {
			continue
		}
		data, err := b.ReadAll(context.Background(), obj.Key)
		require.NoError(t, err)
		sc := bufio.NewScanner(bytes.NewReader(data))
		for sc.Scan() {
			var r row
			require.NoError(t, json.Unmarshal(sc.Bytes(), &r), "%s: %q", obj.Key, sc.Text())
			require.Equal(t, byUser(r), path.Base(path.Dir(obj.Key)), "%s in the wrong bucket", obj.Key)
			got[fmt.Sprintf("%s/%d", r.User, r.Seq)]++
		}
	}
	return got
}

// TestLandBucketCrashEverywhere is TestLandExactlyOnceCrashEverywhere on
// an object store, through gocloud.dev/blob's memory and file drivers: the
// crash comes at each request in turn (a PUT, the copy that publishes, the
// delete after it, a list), and a second run lands every row once. Part
// files roll at 256 bytes too, so that a checkpoint holds several.
func TestLandBucketCrashEverywhere(t *testing.T) {
	const users, n = 6, 30
	for _, driver := range []string{"mem", "file"} {
		t.Run(driver, func(t *testing.T) {
			crashes := 0
			for k := int64(1); ; k++ {
				var b *blob.Bucket
				if driver == "mem" {
					b = memblob.OpenBucket(nil)
				} else {
					var err error
					b, err = fileblob.OpenBucket(t.TempDir(), nil)
					require.NoError(t, err)
				}
				fsys := vfs.NewMem()
				kafka := keyed.NewMemorySink[row]()
				src := events(users, n)
				target := filesink.Bucket(b, "lake/")
				crashed := filesink.CrashBucketAt(target, k)
				sink := filesink.New(target, filesink.JSONLines[row](filesink.Uncompressed), filesink.BucketBy(byUser), filesink.RollSize(256))
				err := landJob(fsys, src, kafka, sink).Run(context.Background())
				if !crashed() {
					require.NoError(t, err)
					requireOnce(t, landedIn(t, b, true), users, n)
					require.NoError(t, b.Close())
					break
				}
				crashes++
				sink = filesink.New(filesink.Bucket(b, "lake/"), filesink.JSONLines[row](filesink.Uncompressed), filesink.BucketBy(byUser))
				require.NoError(t, landJob(fsys, src, kafka, sink).Run(context.Background()), "crash at request %d", k)
				requireOnce(t, landedIn(t, b, true), users, n)
				require.NoError(t, b.Close())
			}
			require.Greater(t, crashes, 20)
			t.Logf("%d crash points", crashes)
		})
	}
}

// slowKafka is a Kafka-like sink that holds up the writes of one epoch,
// so that the checkpoint after it times out and aborts.
type slowKafka struct {
	*keyed.MemorySink[row]
	once sync.Once
}

func (s *slowKafka) Write(ctx context.Context, epoch uint64, v row) error {
	time.Sleep(50 * time.Microsecond)
	if epoch == 3 {
		s.once.Do(func() { time.Sleep(250 * time.Millisecond) })
	}
	return s.MemorySink.Write(ctx, epoch, v)
}

// TestLandAbortedCheckpoint: a checkpoint that times out, with no crash,
// loses none of the files it staged: they land with the next one.
func TestLandAbortedCheckpoint(t *testing.T) {
	const users, n = 6, 300
	var logs syncbuf.Buffer
	fsys := vfs.NewMem()
	kafka := &slowKafka{MemorySink: keyed.NewMemorySink[row]()}
	sink := filesink.New(filesink.Dir(fsys, "/lake"), filesink.JSONLines[row](filesink.Uncompressed), filesink.BucketBy(byUser))
	j := keyed.NewJob("land", keyed.FS(fsys), keyed.Dir("/ckpt"), keyed.CheckpointInterval(2*time.Millisecond),
		keyed.CheckpointTimeout(100*time.Millisecond), keyed.TolerableFailures(100), keyed.Logger(slog.New(slog.NewTextHandler(&logs, nil))))
	rows := keyed.ProcessFunc(keyed.ByPartition(keyed.FromSource(j, "events", 2, connector.Source[row](events(users, n)))), "pass", 2,
		func(_ []byte, r row, out *keyed.Collector[row]) error { out.Emit(r); return nil })
	keyed.ToSink(rows, "kafka", connector.Sink[row](kafka))
	keyed.ToSink(rows, "files", connector.Sink[row](sink))
	require.NoError(t, j.Run(context.Background()))
	require.Contains(t, logs.String(), "checkpoint aborted", "a checkpoint aborted")
	requireOnce(t, landed(t, fsys, "/lake", true), users, n)
}

// TestCompactionLeavesOneFilePerBucket: without compaction a run leaves a
// file per checkpoint and bucket; with CompactEvery longer than the run,
// the final checkpoint merges each bucket's pieces into one file, and no
// piece is left.
func TestCompactionLeavesOneFilePerBucket(t *testing.T) {
	const users, n = 6, 300
	perUser := func(r row) string { return "user=" + r.User }
	count := func(opts ...filesink.Opt) (files int) {
		fsys := vfs.NewMem()
		sink := filesink.New(filesink.Dir(fsys, "/lake"), filesink.JSONLines[row](filesink.Uncompressed), append([]filesink.Opt{filesink.BucketBy(perUser)}, opts...)...)
		// A stage of 20 µs a row, so that barriers come between rows.
		j := keyed.NewJob("land", keyed.FS(fsys), keyed.Dir("/ckpt"), keyed.CheckpointInterval(2*time.Millisecond), keyed.Credits(2), keyed.BatchSize(4))
		rows := keyed.ProcessFunc(keyed.ByPartition(keyed.FromSource(j, "events", 2, connector.Source[row](events(users, n)))), "pass", 2,
			func(_ []byte, r row, out *keyed.Collector[row]) error {
				time.Sleep(20 * time.Microsecond)
				out.Emit(r)
				return nil
			})
		keyed.ToSink(rows, "files", connector.Sink[row](sink))
		require.NoError(t, j.Run(context.Background()))
		got := map[string]int{}
		for u := range users {
			dir := fmt.Sprintf("/lake/user=u%02d", u)
			names, err := fsys.ReadDir(dir)
			require.NoError(t, err)
			for _, name := range names {
				require.False(t, strings.HasPrefix(name, "."), "%s/%s left", dir, name)
				files++
				data, err := fsys.ReadFile(dir + "/" + name)
				require.NoError(t, err)
				for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
					var r row
					require.NoError(t, json.Unmarshal([]byte(line), &r))
					got[fmt.Sprintf("%s/%d", r.User, r.Seq)]++
				}
			}
		}
		requireOnce(t, got, users, n)
		return files
	}
	plain := count()
	compacted := count(filesink.CompactEvery(time.Hour))
	require.Equal(t, users, compacted, "one file per bucket")
	require.Greater(t, plain, compacted)
	t.Logf("files: %d a checkpoint, %d compacted", plain, compacted)
}

// TestRolling: within a checkpoint, a part file ends at RollSize bytes and
// after RollInterval; every row still lands once.
func TestRolling(t *testing.T) {
	const users, n = 2, 50
	for _, tc := range []struct {
		name string
		opt  filesink.Opt
		min  int // files at least
	}{
		{"size", filesink.RollSize(64), users * n / 3}, // a row is about 25 bytes
		{"interval", filesink.RollInterval(time.Nanosecond), users * n},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fsys := vfs.NewMem()
			sink := filesink.New(filesink.Dir(fsys, "/lake"), filesink.JSONLines[row](filesink.Uncompressed), filesink.BucketBy(byUser), tc.opt)
			require.NoError(t, landJob(fsys, events(users, n), nil, sink).Run(context.Background()))
			requireOnce(t, landed(t, fsys, "/lake", true), users, n)
			names, err := fsys.ReadDir("/lake/user=u0")
			require.NoError(t, err)
			require.GreaterOrEqual(t, len(names), tc.min, "files")
		})
	}
}

// TestValidate: a BucketBy of another type than the sink's rows is
// refused before the job runs, naming both types.
func TestValidate(t *testing.T) {
	sink := filesink.New(filesink.Dir(vfs.NewMem(), "/lake"), filesink.JSONLines[row](filesink.Uncompressed), filesink.BucketBy(func(int) string { return "" }))
	require.ErrorContains(t, sink.ValidateSink(connector.SinkInfo{}), "BucketBy takes a func(int) string, want a func(filesink_test.row) string")
	j := landJob(vfs.NewMem(), events(1, 1), nil, sink)
	require.ErrorContains(t, j.Validate(), `sink "files"`)
}
