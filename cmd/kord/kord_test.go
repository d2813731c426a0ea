package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kordproject/kord/checkpoint"
	"github.com/kordproject/kord/internal/layout"
	"github.com/kordproject/kord/internal/rig/testjob"
	"github.com/kordproject/kord/keyed"
	"github.com/kordproject/kord/keyed/connector"
	"github.com/kordproject/kord/partitioner"
	"github.com/kordproject/kord/vfs"
)

// kord runs the command with args (and stdin) in this process, and
// returns its exit code, stdout and stderr.
func kord(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(context.Background(), args, strings.NewReader(stdin), &out, &errOut)
	return code, out.String(), errOut.String()
}

// kordJSON runs the command with --json and decodes its output into v,
// requiring exit code 0.
func kordJSON(t *testing.T, v any, args ...string) {
	t.Helper()
	code, out, errOut := kord(t, "", append(args, "--json")...)
	require.Equal(t, 0, code, "kord %v: %s%s", args, out, errOut)
	require.NoError(t, json.Unmarshal([]byte(out), v), out)
}

const users = 10

// countJob declares a job counting each user's events (state "count" of
// stage "count", serde.Int64) on dir, over src.
func countJob(dir string, src *keyed.MemorySource[testjob.Event], opts ...keyed.Opt) (*keyed.Job, *keyed.MemorySink[testjob.Result]) {
	j := keyed.NewJob("counts", append([]keyed.Opt{keyed.Dir(dir), keyed.CheckpointInterval(20 * time.Millisecond)}, opts...)...)
	s := keyed.FromSource(j, "events", 1, connector.Source[testjob.Event](src))
	out := keyed.Process(keyed.KeyByString("uuid", func(e testjob.Event) string { return e.UUID }, s), "count", 2,
		func() keyed.Operator[testjob.Event, testjob.Result] { return &testjob.Counter{} })
	sink := keyed.NewMemorySink[testjob.Result]()
	keyed.ToSink(out, "results", connector.Sink[testjob.Result](sink))
	return j, sink
}

// appendEvents adds n events of users to src, continuing seq.
func appendEvents(src *keyed.MemorySource[testjob.Event], n int, seq map[string]int64) {
	for i := range n {
		u := fmt.Sprintf("user-%d", i%users)
		src.Append(int32(i%2), []byte(u), testjob.Event{UUID: u, Seq: seq[u]})
		seq[u]++
	}
}

// committedJob runs a job of n events on a fresh directory to its end and
// returns the directory.
func committedJob(t *testing.T, n int) string {
	t.Helper()
	dir := t.TempDir()
	src := keyed.NewMemorySource[testjob.Event]("events", 2, true)
	appendEvents(src, n, map[string]int64{})
	j, sink := countJob(dir, src)
	require.NoError(t, j.Run(context.Background()))
	require.Len(t, sink.Committed(), n)
	return dir
}

type listing struct {
	Storage     string     `json:"storage"`
	CommittedBy string     `json:"committedBy"`
	Checkpoints []ckptInfo `json:"checkpoints"`
}

func (l listing) with(status string) []ckptInfo {
	var out []ckptInfo
	for _, c := range l.Checkpoints {
		if c.Status == status {
			out = append(out, c)
		}
	}
	return out
}

// TestCommitted: a job's checkpoints after it ran to its end. checkpoints
// lists them, the one the local marker names committed, the rest
// orphaned; inspect finds the count stage's state with every user; state
// reads back each user's count, as the job counted it; verify finds
// nothing wrong.
func TestCommitted(t *testing.T) {
	const n = 500
	dir := committedJob(t, n)
	var l listing
	kordJSON(t, &l, "checkpoints", "--checkpoints", dir)
	committed := l.with(statusCommitted)
	require.Len(t, committed, 1, "%+v", l)
	marker, ok, err := checkpoint.ReadCommitted(context.Background(), mustStore(t, dir))
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, refText(marker), committed[0].Ref)
	require.Contains(t, l.CommittedBy, "local marker")
	require.Equal(t, len(l.Checkpoints), 1+len(l.with(statusOrphaned)), "the others are older: orphaned")
	require.NotEmpty(t, committed[0].Offsets)
	require.Positive(t, committed[0].Bytes)

	var in struct {
		Checkpoint string      `json:"checkpoint"`
		States     []stateInfo `json:"states"`
	}
	kordJSON(t, &in, "inspect", "--checkpoints", dir)
	require.Equal(t, committed[0].Ref, in.Checkpoint)
	var count *stateInfo
	for i := range in.States {
		if in.States[i].Stage == "count" && in.States[i].State == "count" {
			count = &in.States[i]
		}
	}
	require.NotNil(t, count, "%+v", in.States)
	require.Equal(t, users, count.Entries)
	require.Equal(t, "keyed.value", count.Type)
	require.Equal(t, "int64-be", count.Fingerprint)

	for u := range users {
		var st struct {
			Value   int64  `json:"value"`
			Decoded string `json:"decoded"`
		}
		kordJSON(t, &st, "state", "--checkpoints", dir, "--stage", "count", "--state", "count", "--key", fmt.Sprintf("user-%d", u))
		require.Equal(t, int64(n/users), st.Value, "user-%d", u)
		require.Equal(t, "serde.Int64", st.Decoded)
	}
	code, out, _ := kord(t, "", "state", "--checkpoints", dir, "--stage", "count", "--state", "count", "--key", "nobody")
	require.Equal(t, 1, code)
	require.Empty(t, out)
	code, _, errOut := kord(t, "", "state", "--checkpoints", dir, "--stage", "count", "--state", "sum", "--key", "user-1")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, `no state "sum" of stage "count"`)

	code, out, errOut = kord(t, "", "verify", "--checkpoints", dir)
	require.Equal(t, 0, code, out+errOut)
	require.Contains(t, out, "0 bad")
}

func mustStore(t *testing.T, dir string) checkpoint.Storage {
	t.Helper()
	s, err := checkpoint.OpenSharedStore(vfs.Default(), dir)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

// committedFiles returns the state files of the committed checkpoint in dir.
func committedFiles(t *testing.T, dir string) []string {
	t.Helper()
	s := mustStore(t, dir)
	ref, ok, err := checkpoint.ReadCommitted(context.Background(), s)
	require.NoError(t, err)
	require.True(t, ok)
	m, _, err := checkpoint.ReadCheckpoint(context.Background(), s, ref.Run, ref.ID)
	require.NoError(t, err)
	var out []string
	for _, f := range m.Files {
		out = append(out, filepath.Join(dir, f.Name))
	}
	require.NotEmpty(t, out)
	return out
}

// TestCorruptAndMissing: verify names a state file with a byte flipped
// (its checksum) and one that is gone, exits 1, and says what to do;
// checkpoints shows the committed checkpoint incomplete without the
// missing file; inspect and state refuse to read it, naming the file.
func TestCorruptAndMissing(t *testing.T) {
	dir := committedJob(t, 300)
	files := committedFiles(t, dir)
	flipped, gone := files[0], files[len(files)-1]
	b, err := os.ReadFile(flipped)
	require.NoError(t, err)
	b[len(b)/2] ^= 0x40
	require.NoError(t, os.WriteFile(flipped, b, 0o644))

	code, out, errOut := kord(t, "", "verify", "--checkpoints", dir)
	require.Equal(t, 1, code, out)
	require.Contains(t, out, "BAD ")
	require.Contains(t, out, flipped+": crc32c")
	require.Contains(t, errOut, "restore from another (kord checkpoints), or reset the job")

	if gone != flipped {
		require.NoError(t, os.Remove(gone))
		code, out, _ = kord(t, "", "verify", "--checkpoints", dir)
		require.Equal(t, 1, code)
		require.Contains(t, out, gone+": missing")
		var l listing
		kordJSON(t, &l, "checkpoints", "--checkpoints", dir)
		inc := l.with(statusIncomplete)
		require.Len(t, inc, 1)
		require.Contains(t, inc[0].Problem, gone)
		require.Contains(t, inc[0].Problem, "it is the committed checkpoint")
	}
	code, _, errOut = kord(t, "", "inspect", "--checkpoints", dir)
	require.Equal(t, 1, code)
	require.Contains(t, errOut, dir)
	code, _, errOut = kord(t, "", "state", "--checkpoints", dir, "--stage", "count", "--state", "count", "--key", "user-1")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, dir)

	// A directory that holds no checkpoint, and one that does not exist.
	code, _, errOut = kord(t, "", "inspect", "--checkpoints", t.TempDir())
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "holds no checkpoint")
	code, _, errOut = kord(t, "", "checkpoints", "--checkpoints", filepath.Join(dir, "nope"))
	require.Equal(t, 2, code)
	require.Contains(t, errOut, filepath.Join(dir, "nope"))
}

// TestRunningJob: the commands on a job that runs. checkpoints and state
// read its directory beside it (they take no lock), and see checkpoints
// committed as it goes; reset refuses, naming the lock, and the job goes
// on committing.
func TestRunningJob(t *testing.T) {
	dir := t.TempDir()
	src := keyed.NewMemorySource[testjob.Event]("events", 2, false)
	seq := map[string]int64{}
	appendEvents(src, 200, seq)
	j, sink := countJob(dir, src)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- j.Run(ctx) }()
	require.Eventually(t, func() bool { return len(sink.Committed()) == 200 }, 30*time.Second, 5*time.Millisecond)

	var l listing
	kordJSON(t, &l, "checkpoints", "--checkpoints", dir)
	require.Len(t, l.with(statusCommitted), 1)
	// The local marker follows the sink's commit: state reads the
	// committed checkpoint once the marker names it.
	require.Eventually(t, func() bool {
		code, out, _ := kord(t, "", "state", "--checkpoints", dir, "--stage", "count", "--state", "count", "--key", "user-7", "--json")
		var st struct{ Value int64 }
		return code == 0 && json.Unmarshal([]byte(out), &st) == nil && st.Value == 20
	}, 30*time.Second, 5*time.Millisecond)

	// inspect and verify read beside it too; verify finds nothing bad,
	// though retention removes checkpoints meanwhile.
	appendEvents(src, 50, seq)
	for range 20 {
		code, out, errOut := kord(t, "", "verify", "--checkpoints", dir)
		require.Equal(t, 0, code, out+errOut)
		code, out, errOut = kord(t, "", "inspect", "--checkpoints", dir)
		require.Equal(t, 0, code, out+errOut)
		require.Contains(t, out, "count")
	}

	code, _, errOut := kord(t, "", "reset", "--checkpoints", dir, "--job", "counts", "--brokers", "127.0.0.1:1", "--yes")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "job counts is running on "+dir+": stop it first")
	require.Contains(t, errOut, layout.LockName)

	before := j.Status().LastCheckpoint
	appendEvents(src, 100, seq)
	require.Eventually(t, func() bool { return len(sink.Committed()) == 350 && j.Status().LastCheckpoint > before }, 30*time.Second, 5*time.Millisecond)
	cancel()
	require.NoError(t, <-done)
}

// TestPartition: kord partition agrees with Java's producer on the
// partitioner's vectors (kafka-clients 4.4.0's
// BuiltInPartitioner.partitionForKey, partitioner/testdata/murmur2.tsv),
// keys from stdin as hex; and takes keys as arguments.
func TestPartition(t *testing.T) {
	b, err := os.ReadFile("../../partitioner/testdata/murmur2.tsv")
	require.NoError(t, err)
	var keys []string
	var want []string
	for _, line := range strings.Split(string(b), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Split(line, "\t")
		if f[1] == "" {
			continue // the empty key: no line of stdin can carry it
		}
		keys = append(keys, f[1])
		want = append(want, f[3+4]) // p12
	}
	require.Greater(t, len(keys), 1000)
	code, out, errOut := kord(t, strings.Join(keys, "\n")+"\n", "partition", "--partitions", "12", "--hex")
	require.Equal(t, 0, code, errOut)
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	require.Len(t, lines, len(keys))
	for i, l := range lines {
		require.Equal(t, keys[i]+"\t"+want[i], l, "vector %d", i)
	}
	code, out, _ = kord(t, "", "partition", "--partitions", "7", "user-1", "user-2")
	require.Equal(t, 0, code)
	require.Equal(t, fmt.Sprintf("user-1\t%d\nuser-2\t%d\n", partitioner.KeyPartition([]byte("user-1"), 7), partitioner.KeyPartition([]byte("user-2"), 7)), out)
	code, _, errOut = kord(t, "zz\n", "partition", "--partitions", "3", "--hex")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, `key "zz" (line 1): not hex`)
	// Another client's rule (its vectors are partitioner's tests'): the
	// keys whose partitions differ from murmur2's show it is applied.
	sarama, ok := partitioner.RuleNamed("sarama")
	require.True(t, ok)
	var args, wantRule []string
	differ := 0
	for i := 0; i < 20; i++ {
		k := fmt.Sprintf("user-%d", i)
		p := sarama.Partition([]byte(k), 12)
		if p != partitioner.KeyPartition([]byte(k), 12) {
			differ++
		}
		args, wantRule = append(args, k), append(wantRule, fmt.Sprintf("%s\t%d\n", k, p))
	}
	require.Greater(t, differ, 0)
	code, out, errOut = kord(t, "", append([]string{"partition", "--partitions", "12", "--rule", "sarama"}, args...)...)
	require.Equal(t, 0, code, errOut)
	require.Equal(t, strings.Join(wantRule, ""), out)
	code, _, errOut = kord(t, "", "partition", "--partitions", "12", "--rule", "crc", "k")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, `--rule "crc": want one of consistent, consistent_random`)
}

// TestHelp: kord alone says what each subcommand is for.
func TestHelp(t *testing.T) {
	code, out, _ := kord(t, "")
	require.Equal(t, 0, code)
	for _, sub := range []string{"checkpoints", "inspect", "verify", "state", "commit", "reset", "partition"} {
		require.Contains(t, out, "\n  "+sub+" ")
	}
}

// retiring is a job's checkpoint directory whose retention removes
// checkpoint ref while verify reads it: as verify asks for the first of
// its state files, the metadata goes, then the files, as retain removes
// them.
type retiring struct {
	checkpoint.Storage
	ref  checkpoint.Ref
	done bool
}

func (r *retiring) Get(ctx context.Context, name string) ([]byte, error) {
	if n, ok := layout.ParseName(name); ok && !r.done && n.Kind == layout.KindState && n.Run == r.ref.Run && n.ID == r.ref.ID {
		r.done = true
		names, err := r.Storage.List(ctx, "")
		if err != nil {
			return nil, err
		}
		if err := r.Storage.Delete(ctx, layout.MetaName(r.ref.Run, r.ref.ID)); err != nil {
			return nil, err
		}
		for _, other := range names {
			if m, ok := layout.ParseName(other); ok && m.Kind == layout.KindState && m.Run == r.ref.Run && m.ID == r.ref.ID {
				if err := r.Storage.Delete(ctx, other); err != nil {
					return nil, err
				}
			}
		}
	}
	return r.Storage.Get(ctx, name)
}

// TestVerifyRetiredMeanwhile: verify calls no checkpoint bad that a running
// job's retention removed while verify read it (TestRunningJob met that
// once in CI: verify named a retired checkpoint's files missing).
func TestVerifyRetiredMeanwhile(t *testing.T) {
	dir := t.TempDir()
	src := keyed.NewMemorySource[testjob.Event]("events", 2, true)
	appendEvents(src, 100, map[string]int64{})
	j, _ := countJob(dir, src)
	require.NoError(t, j.Run(t.Context()))
	s, err := checkpoint.OpenSharedStore(vfs.Default(), dir)
	require.NoError(t, err)
	defer s.Close()
	refs, err := checkpoint.ListCheckpoints(t.Context(), s)
	require.NoError(t, err)
	var withFiles []*checkpoint.Metadata // the checkpoints that have state files
	for _, ref := range refs {
		m, _, err := checkpoint.ReadCheckpoint(t.Context(), s, ref.Run, ref.ID)
		require.NoError(t, err)
		if len(m.Files) > 0 {
			withFiles = append(withFiles, m)
		}
	}
	require.NotEmpty(t, withFiles, "checkpoints with state files")
	m := withFiles[len(withFiles)-1]
	// A file missing from a checkpoint that is still there is bad.
	require.NoError(t, s.Delete(t.Context(), m.Files[0].Name))
	problems, _ := verifyOne(t.Context(), s, m.Ref())
	require.Len(t, problems, 1)
	require.Contains(t, problems[0].Problem, "missing")
	// The same checkpoint, retired while verify reads it, is not.
	r := &retiring{Storage: s, ref: m.Ref()}
	problems, _ = verifyOne(t.Context(), r, m.Ref())
	require.True(t, r.done, "the checkpoint's files were read")
	require.Empty(t, problems)
}
