package kafkaio_test

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gocloud.dev/blob/memblob"

	"github.com/kordproject/kord/checkpoint"
	"github.com/kordproject/kord/checkpoint/blobstore"
	"github.com/kordproject/kord/internal/layout"
	"github.com/kordproject/kord/internal/rig/faultbucket"
	"github.com/kordproject/kord/internal/rig/kafkatest"
	"github.com/kordproject/kord/internal/rig/syncbuf"
	"github.com/kordproject/kord/keyed"
	"github.com/kordproject/kord/vfs"
	"github.com/kordproject/kord/vfs/errorfs"
)

// Storage faults during a real run (issue 31): the checkpoint directory's
// disk fills up, fails reads and writes, fails or stalls an fsync, and
// object storage errs or stops answering, on the real broker while input
// arrives. A fault that passes costs the checkpoints it meets, no more
// than TolerableFailures of them: the job runs on from its last committed
// checkpoint, and the first checkpoint after the fault commits the
// aborted ones' output. A fault that stays fails the job, naming the file
// or key and the error. Each test then restarts the job on what the disk
// holds (vfs.MemFS.CrashClone: only what was made durable, as after a
// power cut at that moment), which restores the checkpoint Kafka recorded,
// so nothing was committed whose state was not durable; and ends with the
// independent read_committed check.

// tolerable is the jobs' TolerableFailures: each passing fault makes
// this many checkpoints abort in a row.
const tolerable = 2

// fsFault is what a file operation meets (errorfs): an error fails it.
type fsFault = func(op errorfs.Op, name string) error

// faultDisk is a checkpoint directory's file system whose faults the test
// switches while the job runs: errorfs over a vfs.MemFS. It remembers each
// file whose fsync failed and any later fsync of one (fsyncgate).
type faultDisk struct {
	mem *vfs.MemFS
	fs  vfs.FS

	mu       sync.Mutex
	fault    fsFault
	failed   map[string]bool // files whose fsync failed
	resynced []string        // fsyncs of such a file
}

func newFaultDisk(mem *vfs.MemFS) *faultDisk {
	d := &faultDisk{mem: mem, failed: map[string]bool{}}
	d.fs = errorfs.New(mem, d.inject)
	return d
}

// newDisk returns a fault disk on a new vfs.MemFS that holds the parent of
// dir durably, as a machine's disk holds the directories above a job's
// checkpoint directory (the job creates that and syncs its parent).
func newDisk(t *testing.T, dir string) *faultDisk {
	mem := vfs.NewMem()
	parent := filepath.Dir(dir)
	require.NoError(t, mem.MkdirAll(parent))
	for p := parent; ; p = filepath.Dir(p) {
		require.NoError(t, mem.SyncDir(p))
		if p == filepath.Dir(p) {
			break
		}
	}
	return newFaultDisk(mem)
}

func (d *faultDisk) set(f fsFault) {
	d.mu.Lock()
	d.fault = f
	d.mu.Unlock()
}

// arming returns a function that sets f (a phase's arm).
func (d *faultDisk) arming(f fsFault) func() { return func() { d.set(f) } }

func (d *faultDisk) inject(op errorfs.Op, name string) error {
	d.mu.Lock()
	f := d.fault
	d.mu.Unlock()
	var err error
	if f != nil {
		err = f(op, name) // outside the lock: a stalling fault sleeps
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if op == errorfs.OpSync {
		if d.failed[name] {
			d.resynced = append(d.resynced, name)
		}
		if err != nil {
			d.failed[name] = true
		}
	}
	return err
}

// failedSyncs returns the objects (state files, metadata, the marker)
// whose temp file's fsync failed.
func (d *faultDisk) failedSyncs() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []string
	for tmp := range d.failed {
		out = append(out, objectOf(tmp))
	}
	slices.Sort(out)
	return out
}

// requireNoResync: no file whose fsync failed was fsynced again
// (PostgreSQL's fsyncgate, 2018: after a failed fsync the kernel may have
// dropped the dirty pages and marked them clean, so a retry can succeed
// over data that is gone).
func (d *faultDisk) requireNoResync(t *testing.T) {
	d.mu.Lock()
	defer d.mu.Unlock()
	require.Empty(t, d.resynced, "files fsynced again after their fsync failed")
}

// objectOf is the object a temp file is written for (checkpoint.Store:
// ".tmp.<object>.<n>").
func objectOf(tmp string) string {
	base := strings.TrimPrefix(filepath.Base(tmp), layout.TempPrefix)
	if i := strings.LastIndexByte(base, '.'); i > 0 {
		base = base[:i]
	}
	return base
}

// Which files a fault meets: a checkpoint's state files, its metadata,
// any of its files, the local committed marker (temp files included).
func stateFile(name string) bool {
	b := filepath.Base(name)
	return strings.Contains(b, layout.Prefix) && strings.Contains(b, ".op-")
}

func metaFile(name string) bool {
	b := filepath.Base(name)
	return strings.Contains(b, layout.Prefix) && strings.Contains(b, ".meta")
}

func ckptFile(name string) bool { return strings.Contains(filepath.Base(name), layout.Prefix) }

func markerFile(name string) bool {
	return strings.Contains(filepath.Base(name), layout.CommittedName)
}

// failOps fails ops on the files which selects with errno.
func failOps(errno syscall.Errno, which func(string) bool, ops ...errorfs.Op) fsFault {
	return func(op errorfs.Op, name string) error {
		if slices.Contains(ops, op) && which(name) {
			return errno
		}
		return nil
	}
}

// stallOps makes ops on the files which selects take d.
func stallOps(d time.Duration, which func(string) bool, ops ...errorfs.Op) fsFault {
	return func(op errorfs.Op, name string) error {
		if slices.Contains(ops, op) && which(name) {
			time.Sleep(d)
		}
		return nil
	}
}

// faultPhase is a phase of a faultPlan: a fault armed at a commit, and
// disarmed once it made aborts checkpoints in a row abort (or, for a
// fault that aborts nothing, after commits commits).
type faultPhase struct {
	name    string
	arm     func()
	reason  string // each abort's reason (the lifecycle's name)
	aborts  int
	commits int
	// within, if set, bounds each abort's time from the arming or the
	// abort before.
	within time.Duration
}

// faultPlan drives a running job through its phases from the job's log.
// The coordinator logs each abort and commit before it triggers the next
// checkpoint, so a fault armed or disarmed there meets exactly the next
// checkpoints. The first phase is armed at the first commit of a
// checkpoint with state. After the phases, final is armed and never
// disarmed: the job must fail. Each passing fault's checkpoints must
// abort (none commits under it), and the checkpoint right after the last
// one must commit.
type faultPlan struct {
	t        *testing.T
	phases   []faultPhase
	final    faultPhase
	disarm   func()
	onCommit func(run string, id uint64) // optional, on each commit

	mu        sync.Mutex
	i         int // the phase armed, or next; len(phases): final
	armed     bool
	last      time.Time // the arming, or the phase's last abort
	aborts    int
	commits   int
	lastAbort uint64
	runs      map[string]bool // the runs that committed
	finalOn   chan struct{}   // closed when final is armed
	broken    chan struct{}   // closed at the first error
	brokenBy  sync.Once
}

func newPlan(t *testing.T, disarm func(), final faultPhase, phases ...faultPhase) *faultPlan {
	return &faultPlan{t: t, phases: phases, final: final, disarm: disarm, runs: map[string]bool{}, finalOn: make(chan struct{}), broken: make(chan struct{})}
}

// errorf fails the test and has runPlan stop at once: a job that
// commits under a fault would otherwise run until the test's deadline.
func (p *faultPlan) errorf(format string, args ...any) {
	p.t.Errorf(format, args...)
	p.brokenBy.Do(func() { close(p.broken) })
}

func (p *faultPlan) current() faultPhase {
	if p.i < len(p.phases) {
		return p.phases[p.i]
	}
	return p.final
}

// observe is the job's log hook.
func (p *faultPlan) observe(msg string, a map[string]string) {
	switch msg {
	case "keyed: checkpoint committed":
		id, _ := strconv.ParseUint(a["checkpoint"], 10, 64)
		if p.onCommit != nil {
			p.onCommit(a["run"], id)
		}
		p.committed(a["run"], id)
	case "keyed: checkpoint aborted; its output commits with the next":
		id, _ := strconv.ParseUint(a["checkpoint"], 10, 64)
		p.aborted(id, a["reason"], a["err"])
	}
}

func (p *faultPlan) committed(run string, id uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.runs[run] = true
	if id == 0 {
		return // the fresh start: no state yet
	}
	if p.armed {
		ph := p.current()
		if ph.commits == 0 {
			p.errorf("phase %q: checkpoint %d committed under the fault", ph.name, id)
			return
		}
		if p.commits++; p.commits == ph.commits {
			p.disarm()
			p.armed = false
			p.i++
		}
		return
	}
	if p.lastAbort != 0 && id != p.lastAbort+1 {
		p.errorf("checkpoint %d is the first to commit after checkpoint %d aborted: the fault cleared, and the next should", id, p.lastAbort)
	}
	p.lastAbort = 0
	ph := p.current()
	p.t.Logf("after checkpoint %d: %s", id, ph.name)
	ph.arm()
	p.armed, p.last, p.aborts, p.commits = true, time.Now(), 0, 0
	if p.i == len(p.phases) {
		close(p.finalOn)
	}
}

func (p *faultPlan) aborted(id uint64, reason, err string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.armed {
		p.errorf("checkpoint %d aborted (%s: %s) with no fault armed", id, reason, err)
		return
	}
	ph := p.current()
	p.t.Logf("  checkpoint %d aborted after %v: %s: %s", id, time.Since(p.last).Round(time.Millisecond), reason, err)
	if ph.reason != "" && reason != ph.reason {
		p.errorf("phase %q: checkpoint %d aborted for %s, want %s", ph.name, id, reason, ph.reason)
	}
	if ph.within > 0 && time.Since(p.last) > ph.within {
		p.errorf("phase %q: checkpoint %d aborted %v after the one before (or the arming), more than %v", ph.name, id, time.Since(p.last), ph.within)
	}
	p.last = time.Now()
	p.lastAbort = id
	if p.aborts++; p.i < len(p.phases) && ph.commits == 0 && p.aborts == ph.aborts {
		p.disarm()
		p.armed = false
		p.i++
	}
}

// runPlan runs the job through plan and returns Run's error once the
// final fault made it fail, within bound of the arming; edit adds to the
// job. One run must take every phase: no restart.
func (f *fixture) runPlan(p *faultPlan, bound time.Duration, edit func(*jobSpec)) (error, *syncbuf.Buffer) {
	t := f.t
	t.Helper()
	log := &syncbuf.Buffer{}
	j, _, sink := f.build(func(s *jobSpec) {
		s.logger = logTo(log, slog.LevelDebug, p.observe)
		s.opts = append(s.opts, keyed.TolerableFailures(tolerable))
		edit(s)
	})
	defer func() { require.NoError(t, sink.Close()) }()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- j.Run(ctx) }()
	// stop ends a run the test gives up on, so that it logs nothing
	// after the test.
	stop := func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
		}
	}
	select {
	case <-p.finalOn:
	case <-p.broken:
		stop()
		t.Fatalf("the plan broke; the log's end:\n%s", logTail(log.String(), 20))
	case err := <-done:
		t.Fatalf("Run returned before the last fault (faultPhase %d of %d): %v\nthe log's end:\n%s", p.i, len(p.phases), err, logTail(log.String(), 20))
	}
	armed := time.Now()
	var err error
	select {
	case err = <-done:
	case <-time.After(bound):
		stop()
		t.Fatalf("Run still runs %v after a lasting fault", bound)
	}
	t.Logf("Run failed %v after the lasting fault: %v", time.Since(armed).Round(time.Millisecond), err)
	require.Error(t, err)
	require.NoError(t, ctx.Err(), "Run ended at the test's deadline")
	p.mu.Lock()
	require.Len(t, p.runs, 1, "one run took every phase: the job did not restart")
	p.mu.Unlock()
	return err, log
}

// logTail returns the last n lines of s.
func logTail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// thenAllWith runs the job with opts (where its checkpoints are), with
// no fault, until every result is visible, and checks the output.
func (f *fixture) thenAllWith(opts ...keyed.Opt) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	j, _, sink := f.build(func(s *jobSpec) { s.opts = append(s.opts, opts...) })
	f.runUntil(ctx, j, sink)
	f.verify()
}

// requireNames: err names an object at where (a file's path, a key) and
// wraps want, and is not permanent: the fault may pass, and the restart
// strategy decides.
func requireNames(t *testing.T, err, want error, where string) {
	t.Helper()
	require.ErrorIs(t, err, want)
	require.Regexp(t, regexp.QuoteMeta(where)+`/(\.tmp\.)?ckpt-`, err.Error())
	require.ErrorContains(t, err, want.Error())
	require.NotErrorIs(t, err, keyed.ErrPermanent)
}

// stopWhile runs j until started is closed (a storage request hangs or
// stalls), then stops it, and requires Run to return within bound of
// the stop. It returns Run's error.
func stopWhile(t *testing.T, j *keyed.Job, started <-chan struct{}, bound time.Duration) error {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	done := make(chan error, 1)
	go func() { done <- j.Run(ctx) }()
	select {
	case <-started:
	case err := <-done:
		t.Fatalf("Run returned before the storage hung: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("the storage was not reached within a minute")
	}
	stop()
	at := time.Now()
	select {
	case err := <-done:
		t.Logf("Run returned %v after the stop: %v", time.Since(at).Round(time.Millisecond), err)
		return err
	case <-time.After(bound):
		t.Fatalf("Run still runs %v after the stop", bound)
	}
	return nil
}

// firstCall returns a channel closed at the first call of the function
// returned with it.
func firstCall() (<-chan struct{}, func()) {
	ch := make(chan struct{})
	var o sync.Once
	return ch, func() { o.Do(func() { close(ch) }) }
}

// TestStorageDiskFull: the disk is full (ENOSPC) at each step of writing a
// checkpoint in turn, the state files' and the metadata's (create, write,
// fsync, close, rename; then the directory's fsync), for two checkpoints
// each; then at the local committed marker, which aborts nothing (the
// commit is Kafka's; the marker is logged as failed and left as it was);
// then for good, which fails the job after TolerableFailures, naming the
// file and ENOSPC.
func TestStorageDiskFull(t *testing.T) {
	f := newFixture(t, kafkatest.Broker(t), 2, 20)
	prodErr := f.produceInBackground(6_000, 1_000, 2*time.Minute)
	d := newDisk(t, f.dir)
	var phases []faultPhase
	for _, op := range []errorfs.Op{errorfs.OpCreate, errorfs.OpWrite, errorfs.OpSync, errorfs.OpClose, errorfs.OpRename} {
		phases = append(phases,
			faultPhase{name: "ENOSPC at " + op.String() + " of the state files", arm: d.arming(failOps(syscall.ENOSPC, stateFile, op)), reason: "task-failed", aborts: tolerable},
			faultPhase{name: "ENOSPC at " + op.String() + " of the metadata", arm: d.arming(failOps(syscall.ENOSPC, metaFile, op)), reason: "metadata-failed", aborts: tolerable})
	}
	dir := func(name string) bool { return name == f.dir }
	phases = append(phases,
		faultPhase{name: "ENOSPC at fsync of the directory", arm: d.arming(failOps(syscall.ENOSPC, dir, errorfs.OpSyncDir)), reason: "task-failed", aborts: tolerable},
		faultPhase{name: "ENOSPC at write of the committed marker", arm: d.arming(failOps(syscall.ENOSPC, markerFile, errorfs.OpWrite)), commits: 2})
	p := newPlan(t, d.arming(nil), faultPhase{name: "ENOSPC at every write, for good", arm: d.arming(failOps(syscall.ENOSPC, ckptFile, errorfs.OpWrite))}, phases...)
	err, log := f.runPlan(p, 30*time.Second, func(s *jobSpec) { s.opts = append(s.opts, keyed.FS(d.fs)) })
	requireNames(t, err, syscall.ENOSPC, f.dir)
	require.Contains(t, log.String(), "keyed: local committed marker", "the marker's failure is logged")
	d.requireNoResync(t)
	require.NotEmpty(t, d.failedSyncs())

	f.thenAllWith(keyed.FS(d.mem.CrashClone()))
	require.NoError(t, <-prodErr)
}

// TestStorageIOErrors: the disk fails writes with EIO, the state files'
// for two checkpoints, then the metadata's, then every write for good,
// which fails the job naming the file and EIO. Then it fails reads at
// restore: for good, the restarts give up, naming the file and EIO (a
// checkpoint the disk fails to read is not a missing or corrupt one: no
// checkpoint.ErrCommittedMissing, nothing permanent, no advice to accept
// duplicates); then twice, and the third restore goes on.
func TestStorageIOErrors(t *testing.T) {
	f := newFixture(t, kafkatest.Broker(t), 2, 20)
	prodErr := f.produceInBackground(4_000, 1_000, 2*time.Minute)
	d := newDisk(t, f.dir)
	p := newPlan(t, d.arming(nil), faultPhase{name: "EIO at every write, for good", arm: d.arming(failOps(syscall.EIO, ckptFile, errorfs.OpWrite))},
		faultPhase{name: "EIO at write of the state files", arm: d.arming(failOps(syscall.EIO, stateFile, errorfs.OpWrite)), reason: "task-failed", aborts: tolerable},
		faultPhase{name: "EIO at write of the metadata", arm: d.arming(failOps(syscall.EIO, metaFile, errorfs.OpWrite)), reason: "metadata-failed", aborts: tolerable})
	err, _ := f.runPlan(p, 30*time.Second, func(s *jobSpec) { s.opts = append(s.opts, keyed.FS(d.fs)) })
	requireNames(t, err, syscall.EIO, f.dir)

	// Restores on what the disk kept.
	r := newFaultDisk(d.mem.CrashClone())
	r.set(failOps(syscall.EIO, ckptFile, errorfs.OpRead))
	restarts := &restartLog{}
	j, _, sink := f.build(func(s *jobSpec) {
		s.logger = slog.New(restarts)
		s.opts = append(s.opts, keyed.FS(r.fs), keyed.RestartStrategy(keyed.FixedDelay(2, 50*time.Millisecond)))
	})
	err = runBounded(t, j, time.Minute)
	require.NoError(t, sink.Close())
	requireNames(t, err, syscall.EIO, f.dir)
	require.NotErrorIs(t, err, checkpoint.ErrCommittedMissing)
	require.NotContains(t, err.Error(), "AcceptDuplicates")
	require.ErrorContains(t, err, "gave up after 2 restarts")
	require.EqualValues(t, 2, restarts.n.Load())

	var reads atomic.Int32
	r.set(func(op errorfs.Op, name string) error {
		if op == errorfs.OpRead && ckptFile(name) && reads.Add(1) <= 2 {
			return syscall.EIO
		}
		return nil
	})
	restarts = &restartLog{}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	j, _, sink = f.build(func(s *jobSpec) {
		s.logger = slog.New(restarts)
		s.opts = append(s.opts, keyed.FS(r.fs), keyed.RestartStrategy(keyed.FixedDelay(3, 50*time.Millisecond)))
	})
	f.runUntil(ctx, j, sink)
	require.EqualValues(t, 2, restarts.n.Load(), "restarts before the restore read the checkpoint")
	f.verify()
	require.NoError(t, <-prodErr)
}

// TestStorageFsyncFails: an fsync fails (EIO), of the state files for two
// checkpoints, of the metadata, of the directory, then of the state files
// for good. A failed fsync is never retried on its file: its checkpoint
// aborts, the next writes new files, and the file whose fsync failed is
// never fsynced again, never becomes its object, and no committed
// checkpoint names it. (PostgreSQL's fsyncgate, 2018: after a failed
// fsync Linux may have dropped the dirty pages and marked them clean, so a
// second fsync can succeed over data that never reached the disk.)
func TestStorageFsyncFails(t *testing.T) {
	f := newFixture(t, kafkatest.Broker(t), 2, 20)
	prodErr := f.produceInBackground(4_000, 1_000, 2*time.Minute)
	d := newDisk(t, f.dir)
	dir := func(name string) bool { return name == f.dir }
	p := newPlan(t, d.arming(nil), faultPhase{name: "EIO at fsync of the state files, for good", arm: d.arming(failOps(syscall.EIO, stateFile, errorfs.OpSync))},
		faultPhase{name: "EIO at fsync of the state files", arm: d.arming(failOps(syscall.EIO, stateFile, errorfs.OpSync)), reason: "task-failed", aborts: tolerable},
		faultPhase{name: "EIO at fsync of the metadata", arm: d.arming(failOps(syscall.EIO, metaFile, errorfs.OpSync)), reason: "metadata-failed", aborts: tolerable},
		faultPhase{name: "EIO at fsync of the directory", arm: d.arming(failOps(syscall.EIO, dir, errorfs.OpSyncDir)), reason: "task-failed", aborts: tolerable})
	named := map[string]bool{} // the files committed checkpoints name
	p.onCommit = func(run string, id uint64) {
		path := filepath.Join(f.dir, layout.MetaName(run, id))
		b, err := d.mem.ReadFile(path)
		if err != nil {
			t.Errorf("committed checkpoint %s/%d: %v", run, id, err)
			return
		}
		m, err := checkpoint.DecodeMetadata(path, b)
		if err != nil {
			t.Errorf("committed checkpoint %s/%d: %v", run, id, err)
			return
		}
		for _, ref := range m.Files {
			named[ref.Name] = true
		}
	}
	err, _ := f.runPlan(p, 30*time.Second, func(s *jobSpec) { s.opts = append(s.opts, keyed.FS(d.fs)) })
	requireNames(t, err, syscall.EIO, f.dir)
	require.ErrorContains(t, err, "fsync")

	failed := d.failedSyncs()
	t.Logf("%d files' fsync failed", len(failed))
	require.NotEmpty(t, failed)
	d.requireNoResync(t)
	require.NotEmpty(t, named)
	for _, o := range failed {
		require.False(t, named[o], "%s, whose fsync failed, is named by a committed checkpoint", o)
		_, err := d.mem.ReadFile(filepath.Join(f.dir, o))
		require.ErrorIs(t, err, fs.ErrNotExist, "%s, whose fsync failed, became an object", o)
	}

	f.thenAllWith(keyed.FS(d.mem.CrashClone()))
	require.NoError(t, <-prodErr)
}

// TestStorageSlowFsync: an fsync takes 3 s, against a checkpoint timeout
// of 1 s: the state files' for two checkpoints, then the metadata's,
// whose write goes on beside the coordinator. Each checkpoint aborts at
// its timeout instead of waiting for the disk (and never commits late);
// the next after the stall commits. Every fsync stalling for good fails
// the job, saying what the checkpoint waited for. A stop while the fsyncs
// stall returns within the stop timeout plus the one fsync under way (a
// file operation once begun runs to its end), even for a job that
// tolerates many aborts.
func TestStorageSlowFsync(t *testing.T) {
	const stall, timeout = 3 * time.Second, time.Second
	f := newFixture(t, kafkatest.Broker(t), 2, 20)
	prodErr := f.produceInBackground(4_000, 500, 2*time.Minute)
	d := newDisk(t, f.dir)
	// From the arming or the abort before: the interval, the timeout and a
	// second to spare, below the stall.
	within := f.interval + timeout + time.Second
	p := newPlan(t, d.arming(nil), faultPhase{name: "every fsync stalls, for good", arm: d.arming(stallOps(stall, ckptFile, errorfs.OpSync)), reason: "timeout", within: within},
		faultPhase{name: "the state files' fsync stalls", arm: d.arming(stallOps(stall, stateFile, errorfs.OpSync)), reason: "timeout", aborts: tolerable, within: within},
		faultPhase{name: "the metadata's fsync stalls", arm: d.arming(stallOps(stall, metaFile, errorfs.OpSync)), reason: "timeout", aborts: tolerable, within: within})
	err, log := f.runPlan(p, 30*time.Second, func(s *jobSpec) {
		s.opts = append(s.opts, keyed.FS(d.fs), keyed.CheckpointTimeout(timeout))
	})
	require.ErrorContains(t, err, "not complete within the checkpoint timeout 1s, waiting for the snapshots of count[")
	require.NotErrorIs(t, err, keyed.ErrPermanent)
	require.Contains(t, log.String(), "writing its metadata "+filepath.Join(f.dir, layout.Prefix), "a metadata write's timeout names its file")

	started, hit := firstCall()
	d.set(func(op errorfs.Op, name string) error {
		if op == errorfs.OpSync && ckptFile(name) {
			hit()
			time.Sleep(stall)
		}
		return nil
	})
	j, _, sink := f.build(func(s *jobSpec) {
		s.opts = append(s.opts, keyed.FS(d.fs), keyed.CheckpointTimeout(timeout), keyed.TolerableFailures(10), keyed.StopTimeout(time.Second))
	})
	err = stopWhile(t, j, started, time.Second+stall+5*time.Second)
	require.NoError(t, sink.Close())
	require.ErrorIs(t, err, keyed.ErrStopTimeout)

	d.set(nil)
	f.thenAllWith(keyed.FS(d.mem.CrashClone()))
	require.NoError(t, <-prodErr)
}

// TestStorageBucketFaults: the checkpoints are in object storage
// (checkpoint/blobstore over a bucket that fails or hangs its requests:
// faultbucket), whose own request timeout is an hour. Puts fail (a 503),
// the state files' for two checkpoints, then the metadata's; then they
// hang until their context ends, and each checkpoint aborts at its
// timeout; then puts fail for good, which fails the job naming the key
// and the bucket's error. At restore, gets that fail for good make the
// restarts give up naming the key (not ErrCommittedMissing). A stop while
// the gets at restore, or the puts, hang returns within the stop timeout
// and 5 s (closing the clients): every request carries the run's
// context, and the stop's deadline cancels it.
func TestStorageBucketFaults(t *testing.T) {
	const timeout = time.Second
	f := newFixture(t, kafkatest.Broker(t), 2, 20)
	prodErr := f.produceInBackground(4_000, 500, 2*time.Minute)
	inner := memblob.OpenBucket(nil)
	defer inner.Close()
	fb := faultbucket.New(inner)
	// Not closed: Close waits for the requests under way.
	prefix := "jobs/" + f.name
	st := blobstore.New(fb.Blob(), prefix+"/", blobstore.Timeout(time.Hour))
	boom := errors.New("503 Slow Down")
	failing := func(which func(string) bool, ops ...faultbucket.Op) faultbucket.Fault {
		return func(_ context.Context, op faultbucket.Op, key string) error {
			if slices.Contains(ops, op) && which(key) {
				return boom
			}
			return nil
		}
	}
	hanging := func(hit func(), which func(string) bool, ops ...faultbucket.Op) faultbucket.Fault {
		return func(ctx context.Context, op faultbucket.Op, key string) error {
			if slices.Contains(ops, op) && which(key) {
				hit()
				return faultbucket.Hang(ctx)
			}
			return nil
		}
	}
	arming := func(fault faultbucket.Fault) func() { return func() { fb.Set(fault) } }
	within := f.interval + timeout + time.Second
	p := newPlan(t, arming(nil), faultPhase{name: "puts fail, for good", arm: arming(failing(ckptFile, faultbucket.Write))},
		faultPhase{name: "the state files' puts fail", arm: arming(failing(stateFile, faultbucket.Write)), reason: "task-failed", aborts: tolerable},
		faultPhase{name: "the metadata's puts fail", arm: arming(failing(metaFile, faultbucket.Write)), reason: "metadata-failed", aborts: tolerable},
		faultPhase{name: "the state files' puts hang", arm: arming(hanging(func() {}, stateFile, faultbucket.Write)), reason: "timeout", aborts: tolerable, within: within},
		faultPhase{name: "the metadata's puts hang", arm: arming(hanging(func() {}, metaFile, faultbucket.Write)), reason: "timeout", aborts: tolerable, within: within})
	storage := []keyed.Opt{keyed.CheckpointStorage(st), keyed.CheckpointTimeout(timeout)}
	err, _ := f.runPlan(p, 30*time.Second, func(s *jobSpec) { s.opts = append(s.opts, storage...) })
	requireNames(t, err, boom, prefix)

	fb.Set(failing(ckptFile, faultbucket.Read))
	restarts := &restartLog{}
	j, _, sink := f.build(func(s *jobSpec) {
		s.logger = slog.New(restarts)
		s.opts = append(s.opts, append(storage, keyed.RestartStrategy(keyed.FixedDelay(2, 50*time.Millisecond)))...)
	})
	err = runBounded(t, j, time.Minute)
	require.NoError(t, sink.Close())
	requireNames(t, err, boom, prefix)
	require.NotErrorIs(t, err, checkpoint.ErrCommittedMissing)
	require.ErrorContains(t, err, "gave up after 2 restarts")

	// With the default checkpoint timeout, a minute: only the stop's
	// deadline ends the requests.
	for _, op := range []faultbucket.Op{faultbucket.Read, faultbucket.Write} {
		started, hit := firstCall()
		fb.Set(hanging(hit, ckptFile, op))
		j, _, sink := f.build(func(s *jobSpec) { s.opts = append(s.opts, keyed.CheckpointStorage(st), keyed.StopTimeout(time.Second)) })
		err := stopWhile(t, j, started, time.Second+5*time.Second)
		require.NoError(t, sink.Close())
		require.ErrorIs(t, err, keyed.ErrStopTimeout, "%ss hang", op)
	}

	fb.Set(nil)
	f.thenAllWith(storage...)
	require.NoError(t, <-prodErr)
}
