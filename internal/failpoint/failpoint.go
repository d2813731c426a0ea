// Package failpoint names the points of kord's checkpoint lifecycle where
// tests inject failures, and injects them. Only test builds link it: keyed
// and kafkaio reach it from files built with the kordfailpoints tag
// (keyed/points_on.go, kafkaio/points_on.go), and a plain build passes
// their points to nothing (internal/layers checks it). It injects three
// ways:
//
//   - Hit kills the process at a point armed by the environment variable
//     KORD_FAILPOINTS, a comma-separated list of name or name@N (fire on
//     the Nth hit, default the first): the process sends itself SIGKILL, so
//     no deferred function, Close or flush runs, as in a real crash. The
//     crash tests run a job in a child process armed this way.
//   - Active reports, for the simulated faults (the Sim names), that the
//     armed hit has come: the caller then fakes the fault (a transactional
//     request whose outcome is unknown, say) instead of dying.
//   - A hook carried by a context (WithHook) makes Point return an error
//     wrapping ErrCrashed: the engine then stops at once, as if its process
//     had died there, with nothing cleaned up. The in-process failure tests
//     (a thousand seeded runs) use it.
//
// With nothing armed, Hit and Active cost one atomic load. A malformed
// KORD_FAILPOINTS never exits the process: Err reports it, and the engine
// refuses to run with it.
package failpoint

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
)

// Env is the environment variable read at start.
const Env = "KORD_FAILPOINTS"

// The crash points of the checkpoint lifecycle, in lifecycle order. The
// engine passes each (Point) on every checkpoint; the Kafka sink passes the
// send-offsets ones inside its commit.
const (
	AfterBarrier        = "after-barrier"
	DuringSnapshotWrite = "during-snapshot-write"
	AfterSnapshots      = "after-snapshots-durable"
	AfterMetadata       = "after-metadata-durable"
	BeforeCommit        = "before-commit"
	BeforeSendOffsets   = "before-send-offsets"
	AfterSendOffsets    = "after-send-offsets"
	AfterCommit         = "after-commit"
	AfterMarker         = "after-committed-marker"
	DuringRestore       = "during-restore"
	AfterFreshCommitted = "after-fresh-start-committed"
)

// The file sink's crash points (filesink), in the order of its steps: at
// a barrier, its part files closed and durable; at a commit, after each
// file published; with compaction, a merged file durable; before each
// partition commit's policies run.
const (
	FileAfterClose       = "file-after-close"
	FileMidPublish       = "file-mid-publish"
	FileAfterMerge       = "file-after-merge"
	FileBeforePartCommit = "partition-commit"
)

// Crashes lists the crash points in lifecycle order.
var Crashes = []string{AfterBarrier, DuringSnapshotWrite, AfterSnapshots, AfterMetadata, BeforeCommit,
	BeforeSendOffsets, AfterSendOffsets, AfterCommit, AfterMarker, DuringRestore, AfterFreshCommitted}

// The simulated faults, armed like crash points and read with Active. Each
// sends a transactional request with a deadline too short to see its
// answer, so its outcome is unknown to the job, which must end the
// producer and recover from what Kafka recorded with a new one (DESIGN.md,
// on KIP-890).
const (
	// SimSendOffsetsUnknown: the SendOffsetsToTransaction of a checkpoint.
	SimSendOffsetsUnknown = "sim-send-offsets-unknown"
	// SimCommitUnknown: the CommitTransaction of a checkpoint.
	SimCommitUnknown = "sim-commit-unknown"
	// SimAbortUnknown: the abort path. At a checkpoint's commit the
	// transaction is treated as needing an abort (as after an abortable
	// error) and AbortTransaction is sent.
	SimAbortUnknown = "sim-abort-unknown"
	// SimProduceUnknown: a record produced into the open transaction is
	// reported failed with an unknown outcome (as after a delivery timeout:
	// the broker may or may not hold it).
	SimProduceUnknown = "sim-produce-unknown"
	// ForceAbort: at a checkpoint's commit the sink takes the abort path
	// for real (as after an abortable error from SendOffsetsToTransaction):
	// AbortTransaction with the commit's own deadline, then a recovery.
	// Network-fault tests pair it with a lost abort reply.
	ForceAbort = "force-abort"
	// SimCommitStall: instead of CommitTransaction the sink waits out the
	// commit's deadline. Nothing is sent, so Kafka keeps the previous
	// record.
	SimCommitStall = "sim-commit-stall"
	// SimSendOffsetsNotMember: the SendOffsetsToTransaction of a
	// checkpoint on several processes is refused as the group
	// coordinator refuses a member it no longer knows (UNKNOWN_MEMBER_ID,
	// producer.ErrNotMember) while librdkafka's member was not told.
	// Nothing is sent; the transaction is left to the sink's abort.
	SimSendOffsetsNotMember = "sim-send-offsets-not-member"
)

// SimUnknown lists the simulated faults whose answer is lost at once.
var SimUnknown = []string{SimSendOffsetsUnknown, SimCommitUnknown, SimAbortUnknown, SimProduceUnknown}

// ErrCrashed is wrapped by the error Point returns when a context's hook
// stopped the job at a point: the job ended as if its process had died
// there.
var ErrCrashed = errors.New("crashed at a failure point")

var (
	enabled atomic.Bool
	mu      sync.Mutex
	armed   map[string]int // name -> hits left before firing
	envErr  error
	kill    = func() { _ = syscall.Kill(os.Getpid(), syscall.SIGKILL); select {} }
)

func init() {
	envErr = Set(os.Getenv(Env))
}

// Err reports a malformed KORD_FAILPOINTS (nil when it is unset or well
// formed). Nothing is armed then.
func Err() error { return envErr }

// Set arms the failpoints of spec (the syntax of KORD_FAILPOINTS),
// replacing any armed before. An empty spec disarms all.
func Set(spec string) error {
	m := map[string]int{}
	for _, f := range strings.Split(spec, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		name, nth, ok := strings.Cut(f, "@")
		n := 1
		if ok {
			var err error
			n, err = strconv.Atoi(nth)
			if err != nil || n < 1 {
				return fmt.Errorf("failpoint: bad hit count in %q (%s)", f, Env)
			}
		}
		m[name] = n
	}
	mu.Lock()
	armed = m
	mu.Unlock()
	enabled.Store(len(m) > 0)
	return nil
}

// Hit passes the named failpoint, killing the process if it is armed and
// this is the hit it waits for.
func Hit(name string) {
	if !enabled.Load() {
		return
	}
	mu.Lock()
	n, ok := armed[name]
	if ok {
		n--
		armed[name] = n
	}
	mu.Unlock()
	if ok && n == 0 {
		fmt.Fprintf(os.Stderr, "kord: failpoint %s: SIGKILL\n", name)
		kill()
	}
}

// Active passes the named failpoint like Hit but, instead of killing the
// process, reports whether it fires now. It simulates faults that are not
// crashes.
func Active(name string) bool {
	if !enabled.Load() {
		return false
	}
	mu.Lock()
	defer mu.Unlock()
	n, ok := armed[name]
	if !ok {
		return false
	}
	n--
	armed[name] = n
	if n == 0 {
		fmt.Fprintf(os.Stderr, "kord: failpoint %s: simulated\n", name)
	}
	return n == 0
}

// Hook is called at each point a job passes; an error stops the job there.
type Hook func(point string) error

type hookKey struct{}

// WithHook returns a context whose jobs call h at every point they pass.
func WithHook(ctx context.Context, h Hook) context.Context {
	return context.WithValue(ctx, hookKey{}, h)
}

// HookOf returns the hook ctx carries, nil if none.
func HookOf(ctx context.Context) Hook {
	h, _ := ctx.Value(hookKey{}).(Hook)
	return h
}

// Point passes the named point: Hit (the environment's crash), then h, if
// not nil. It returns an error wrapping ErrCrashed when h stops the job.
func (h Hook) Point(name string) error {
	Hit(name)
	if h == nil {
		return nil
	}
	if err := h(name); err != nil {
		return fmt.Errorf("%w %s: %w", ErrCrashed, name, err)
	}
	return nil
}
