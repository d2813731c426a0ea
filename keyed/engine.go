package keyed

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime/debug"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kordproject/kord/checkpoint"
	"github.com/kordproject/kord/internal/layout"
	"github.com/kordproject/kord/internal/lifecycle"
	"github.com/kordproject/kord/internal/recovery"
	"github.com/kordproject/kord/internal/retain"
	"github.com/kordproject/kord/keyed/connector"
	"github.com/kordproject/kord/keyed/internal/channel"
)

// restoreState is what a run starts from.
type restoreState struct {
	fresh     bool
	meta      *checkpoint.Metadata
	files     map[string][]byte
	maxP      int
	positions map[string]map[int32]int64 // topic -> partition -> offset
	// times is, for the restored partitions that had records, the newest
	// record time read before the offset (Metadata.Times): where each
	// partition's watermark starts again.
	times  map[string]map[int32]int64
	scaled []scaledRestore // one of several processes: the checkpoints the assigned partitions' records name
	// failover: the restored checkpoint was taken on another cluster or
	// topic (Failover): its state is restored, its offsets are not, and
	// every source starts from its start setting.
	failover bool
}

// takeTimes takes m's record times of the partitions in take (topic ->
// partitions; nil: every partition).
func (rs *restoreState) takeTimes(m *checkpoint.Metadata, take map[string]map[int]bool) {
	for _, pt := range m.Times {
		if take != nil && !take[pt.Topic][int(pt.Partition)] {
			continue
		}
		if rs.times == nil {
			rs.times = map[string]map[int32]int64{}
		}
		if rs.times[pt.Topic] == nil {
			rs.times[pt.Topic] = map[int32]int64{}
		}
		rs.times[pt.Topic][pt.Partition] = pt.Time
	}
}

// watermark is the watermark the run starts its operator tasks from: the
// restored checkpoint's, or with several checkpoints restored (one of
// several processes) the oldest of theirs; noTime if any has none.
func (rs *restoreState) watermark() int64 {
	metas := []*checkpoint.Metadata{}
	for _, sr := range rs.scaled {
		metas = append(metas, sr.meta)
	}
	if len(metas) == 0 && rs.meta != nil && !rs.fresh {
		metas = append(metas, rs.meta)
	}
	if len(metas) == 0 {
		return channel.NoTime
	}
	wm := int64(channel.EndOfTime)
	for _, m := range metas {
		if m.Watermark == nil {
			return channel.NoTime
		}
		wm = min(wm, *m.Watermark)
	}
	return wm
}

// ack is a task's report for a checkpoint.
type ack struct {
	task    int
	id      uint64
	offsets []checkpoint.PartitionOffset
	times   []checkpoint.PartitionTime // a source task's: its partitions' newest record times
	files   []checkpoint.FileRef
	refs    []checkpoint.OperatorRef
	err     error
	// wm is an operator task's watermark at its snapshot (noTime if none);
	// final the latest event time it made final (opTask.final), which
	// differs from wm once its inputs ended (wm is then EndOfTime); opTask
	// says the ack is an operator task's.
	wm     int64
	final  int64
	opTask bool
}

// metaDone is the outcome of checkpoint id's metadata write
// (coordinator.writeMetadata).
type metaDone struct {
	id  uint64
	err error
}

type trigger struct {
	id    uint64
	final bool
}

// retained is how many committed checkpoints retention keeps: the newest,
// which recovery restores, and the one before it, which at-least-once mode
// (and exactly-once with AcceptDuplicates) falls back to when the newest
// is found corrupt (invariant 7). Uncommitted checkpoints newer than the
// newest committed are kept too (retain.Committed).
const retained = 2

// run is one attempt of a job: every task, started from one checkpoint.
type run struct {
	// finalID is the id of the run's final checkpoint (a bounded input's
	// end, or a stop), once triggered; 0 before.
	finalID atomic.Uint64

	j     *Job
	cfg   config
	store checkpoint.Storage
	runID string
	log   *slog.Logger
	warn  *slog.Logger // what the user must see with no Logger given (config.warnLog)
	fp    points       // failure points (tests' builds); nil otherwise
	// sources is where the job's sources read now (Identified), recorded
	// in every checkpoint of the run.
	sources []checkpoint.SourceRef
	// What the source tasks read before their bounded input ended (ended):
	// records, whether any started from a restored checkpoint, and where
	// each stood.
	endMu       sync.Mutex
	endRead     int64
	endRestored bool
	endOffsets  []string
	// stop is closed when the run ends (its context is cancelled): every
	// task and helper goroutine returns.
	stop   <-chan struct{}
	cancel context.CancelCauseFunc

	tasks     int
	names     []string
	triggers  []chan trigger // per source task
	cancels   []chan uint64  // per operator and sink task
	acks      chan ack       // to the coordinator
	metas     chan metaDone  // metadata writes' outcomes, to the coordinator
	exhausted chan int       // source tasks whose input ended
	auxiliary map[int]bool   // source tasks of auxiliary inputs (Stream.Auxiliary)
	// bootstrapped is closed once every auxiliary source task has read
	// its input to the end it had at the start (auxPending counts those
	// still reading); the other source tasks read nothing before.
	bootstrapped chan struct{}
	auxPending   atomic.Int64
	failures     chan error               // task failures
	wg           sync.WaitGroup           // tasks
	bg           sync.WaitGroup           // snapshot writers
	align        *alignmentStats          // alignment times
	stats        *runStats                // the run's tasks, for Overview
	opRefs       []checkpoint.OperatorRef // the keyed stages and their keying modes

	// A job on several processes (Membership): the partitions this run
	// covers, by topic, and the channel closed when they are about to
	// change; reassigned is set when the run ended for that.
	assigned   map[string][]int32
	changed    <-chan struct{}
	reassigned bool
	// whole are the topics of broadcast inputs, which every process reads
	// whole: their offsets are in the checkpoints but not committed with
	// the sink's records, which belong to the partitions' owners.
	whole map[string]bool
	// lastSweep is when retention of other runs last ran (sweep, unix
	// nanoseconds); sweeping is set while a sweepLater goroutine runs.
	lastSweep atomic.Int64
	sweeping  atomic.Bool
}

// errReassigned ends a run whose partitions are about to change; Run
// starts the next one over the new assignment at once.
var errReassigned = errors.New("keyed: the partitions assigned to this process changed")

// membership returns the sink's Membership when the job runs as one of
// several processes.
func (j *Job) membership() connector.Membership {
	if j.cfg.Instance == "" {
		return nil
	}
	m, _ := j.sink.sinkValue().(connector.Membership)
	return m
}

func (r *run) addTask(name string) int {
	r.names = append(r.names, name)
	r.tasks++
	return r.tasks - 1
}

// goTask runs a task under the run's context ctx, turning its error or
// panic into a failure. An error after the run ended is the run's end,
// not a failure.
func (r *run) goTask(ctx context.Context, task int, fn func(ctx context.Context) error) {
	name := r.names[task]
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		defer func() {
			if p := recover(); p != nil {
				r.fail(&TaskError{Task: name, Err: fmt.Errorf("panic: %v\n%s", p, debug.Stack())})
			}
		}()
		if err := fn(ctx); err != nil && ctx.Err() == nil {
			r.fail(&TaskError{Task: name, Err: err})
		}
	}()
}

func (r *run) fail(err error) {
	select {
	case r.failures <- err:
	default:
	}
	r.cancel(err)
}

func (r *run) ack(a ack) {
	select {
	case r.acks <- a:
	case <-r.stop:
	}
}

// point passes a failure point (points.go).
func (r *run) point(name string) error { return r.fp.point(name) }

// closeSinks closes the sinks that are io.Closers, the further ones
// first: they write through the first.
func (j *Job) closeSinks() {
	sinks := j.sinks()
	for i := len(sinks) - 1; i >= 0; i-- {
		if c, ok := sinks[i].sinkValue().(io.Closer); ok {
			if err := c.Close(); err != nil {
				j.cfg.Logger.Warn("keyed: closing a sink", "job", j.name, "sink", sinks[i].sinkName(), "err", err)
			}
		}
	}
}

// Run runs the job until every source has ended (bounded sources: a final
// checkpoint is committed, then Run returns nil), ctx is done (a graceful
// stop: the same final checkpoint, within StopTimeout), or a
// failure neither a recovery nor the restart strategy absorbs. Each
// restart and each recovery restores the checkpoint the sink recorded as
// committed, with a new incarnation of the sink.
func (j *Job) Run(ctx context.Context) (err error) {
	defer func() { err = j.named(err) }()
	if err := pointsErr(); err != nil {
		return err
	}
	if err := j.Validate(); err != nil {
		return Permanent(err) // no restart mends the job's own declaration
	}
	j.stats.running.Store(true)
	defer j.stats.running.Store(false)
	// The job owns what it was given: its sink is closed when Run returns
	// (a Kafka sink aborts what is open and closes its producer). A later
	// Run resets it again.
	defer func() {
		if !crashed(err) { // crashed: as if the process had died, nothing is closed
			j.closeSinks()
		}
	}()
	// The work goes on after ctx is done, for the final checkpoint, until
	// the stop deadline.
	wctx, endWork := stopContext(ctx, j.cfg.StopTimeout)
	defer endWork()
	fp := pointsOf(ctx)
	rs := &restarts{j: j, stable: j.cfg.Restart.StableAfter}
	if rs.stable <= 0 {
		rs.stable = time.Minute
	}
	var store checkpoint.Storage
	for {
		began := time.Now()
		var progressed bool
		err = nil
		if store == nil {
			// Opening the storage fails like a run does: a storage
			// that does not answer yet is restarted on, another job's
			// storage (Permanent) is not.
			var closeStore func()
			if store, closeStore, err = j.openStorage(wctx); err == nil {
				defer closeStore()
			}
		}
		if err == nil {
			if progressed, err = j.runOnce(ctx, wctx, store, fp); err == nil {
				return nil
			}
		}
		if err := rs.after(ctx, wctx, err, progressed, began); err != nil {
			return err
		}
	}
}

// restarts decides, after each failed run, whether Run runs again: it
// counts the restarts (RestartStrategy) and the recoveries from unknown
// outcomes in a row.
type restarts struct {
	j                    *Job
	attempts, recoveries int
	stable               time.Duration // a run this long that committed resets attempts
}

// after returns nil to run again after a run that began then and failed
// with err (progressed: it committed a checkpoint), once the restart
// delay passed; otherwise the error Run returns.
func (rs *restarts) after(ctx, wctx context.Context, err error, progressed bool, began time.Time) error {
	j := rs.j
	if errors.Is(err, errReassigned) && ctx.Err() == nil {
		rs.attempts, rs.recoveries = 0, 0
		return nil
	}
	if wctx.Err() != nil {
		// The stop deadline passed: no more recovery or restart.
		if errors.Is(err, ErrStopTimeout) {
			return err
		}
		return fmt.Errorf("keyed: %w after %v (%w); the next start recovers from what the sink recorded", ErrStopTimeout, j.cfg.StopTimeout, err)
	}
	if crashed(err) || errors.Is(err, ErrPermanent) {
		return err
	}
	if progressed {
		rs.recoveries = 0 // a run that committed ends a row of recoveries
	}
	if errors.Is(err, ErrOutcomeUnknown) {
		// A new sink incarnation and what its system recorded settle
		// the outcome (DESIGN.md, "Unknown outcomes"). Also when stopping: the new run restores and
		// commits a final checkpoint, so that the stop leaves nothing
		// open and the failed checkpoint's output is not lost to it.
		rs.recoveries++
		if rs.recoveries > maxRecoveries {
			return fmt.Errorf("keyed: gave up after %d recoveries in a row: %w", maxRecoveries, err)
		}
		j.cfg.Logger.Warn("keyed: recovering from what the sink recorded", "job", j.name, "recovery", rs.recoveries, "err", err)
		j.stats.recoveries.Add(1)
		return nil
	}
	if progressed && time.Since(began) >= rs.stable {
		rs.attempts = 0
	}
	rs.attempts++
	if rs.attempts > j.cfg.Restart.Attempts {
		if j.cfg.Restart.Attempts == 0 {
			return err
		}
		return fmt.Errorf("keyed: gave up after %d restarts: %w", j.cfg.Restart.Attempts, err)
	}
	if ctx.Err() != nil {
		return err
	}
	d := time.Duration(0)
	if j.cfg.Restart.Delay != nil {
		d = j.cfg.Restart.Delay(rs.attempts)
	}
	j.cfg.Logger.Warn("keyed: restarting from the last committed checkpoint", "job", j.name, "attempt", rs.attempts, "delay", d, "err", err)
	select {
	case <-time.After(d):
		j.stats.restarts.Add(1)
		return nil
	case <-ctx.Done():
		return err
	}
}

// Forget makes the job start over from nothing at its next Run, as a job
// that never ran: it deletes every checkpoint in its directory, with the
// local committed marker, and has the sink forget what its system recorded
// as committed (a connector.Forgetter; a Kafka sink deletes its commit group). The
// output already committed stays where it is. Refused while the job runs
// (the directory is locked) and for a sink that cannot forget: deleting
// the checkpoints alone would make the next Run stop with
// checkpoint.ErrCommittedMissing.
func (j *Job) Forget(ctx context.Context) (err error) {
	defer func() { err = j.named(err) }()
	if err := j.Validate(); err != nil {
		return err
	}
	f, ok := j.sink.sinkValue().(connector.Forgetter)
	if !ok {
		return fmt.Errorf("keyed: sink %q cannot forget its commit record (it is no connector.Forgetter)", j.sink.sinkName())
	}
	store, closeStore, err := j.openStorage(ctx)
	if err != nil {
		return err
	}
	defer closeStore()
	// The record first: a crash between the two leaves the checkpoints
	// and the local marker, from which the next Run restores as after an
	// expired record (recovery.Decide); Forget can be called again.
	if err := f.Forget(ctx, j.sinkInfo()); err != nil {
		return fmt.Errorf("keyed: sink %q: forgetting its commit record: %w", j.sink.sinkName(), err)
	}
	names, err := store.List(ctx, "")
	if err != nil {
		return err
	}
	deleted := 0
	for _, n := range names {
		if pn, ok := layout.ParseName(n); !ok || pn.Kind == layout.KindUnknown {
			continue // not the job's: left alone
		}
		if err := store.Delete(ctx, n); err != nil {
			return err
		}
		deleted++
	}
	j.cfg.Logger.Info("keyed: job forgotten", "job", j.name, "storage", j.storageName(), "files_deleted", deleted)
	return nil
}

// openStorage opens where the job keeps its checkpoints: the Storage
// given (CheckpointStorage), as is; else the directory, locked by one
// process, or shared unlocked by several (a Membership). ctx bounds the
// claim of a Storage.
func (j *Job) openStorage(ctx context.Context) (checkpoint.Storage, func(), error) {
	var st checkpoint.Storage
	closeStore := func() {}
	if j.cfg.Storage != nil {
		st = j.cfg.Storage
	} else {
		open := checkpoint.OpenStore
		if j.membership() != nil {
			// Several processes share the directory: each writes its own
			// runs' objects, and none holds the lock.
			open = checkpoint.OpenSharedStore
		}
		store, err := open(j.cfg.FS, j.cfg.Dir)
		if err != nil {
			return nil, nil, err
		}
		st, closeStore = store, func() { _ = store.Close() }
	}
	if j.membership() != nil || j.cfg.Storage != nil {
		// No lock keeps another job out: the job's name does.
		if err := retain.Claim(ctx, st, j.name); err != nil {
			closeStore()
			if errors.Is(err, retain.ErrOtherJob) {
				return nil, nil, Permanent(fmt.Errorf("keyed: %w", err))
			}
			// The storage failed: a restart may find it back.
			return nil, nil, fmt.Errorf("keyed: claiming the checkpoint storage %s for job %q: %w", j.storageName(), j.name, err)
		}
	}
	return st, closeStore, nil
}

// storageName names where the job keeps its checkpoints, for logs.
func (j *Job) storageName() string {
	if j.cfg.Storage != nil {
		return j.cfg.Storage.Where("")
	}
	return j.cfg.Dir
}

// stopContext returns a context that ctx's cancellation does not cancel
// but that is cancelled (cause ErrStopTimeout) stop after ctx is done, and
// a function that cancels it and ends its goroutine.
func stopContext(ctx context.Context, stop time.Duration) (context.Context, context.CancelFunc) {
	wctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	go func() {
		select {
		case <-ctx.Done():
		case <-wctx.Done():
			return
		}
		t := time.NewTimer(stop)
		defer t.Stop()
		select {
		case <-t.C:
			cancel(fmt.Errorf("%w after %v", ErrStopTimeout, stop))
		case <-wctx.Done():
		}
	}()
	return wctx, func() { cancel(nil) }
}

func newRunID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// sinkInfo describes the job to its sink.
func (j *Job) sinkInfo() connector.SinkInfo {
	var inputs []string
	for _, s := range j.sources {
		if _, _, bc := s.feeds(); bc && j.cfg.Instance != "" {
			continue // read whole by every process, and not assigned
		}
		inputs = append(inputs, s.topic())
	}
	sort.Strings(inputs)
	return connector.SinkInfo{Job: j.name, Instance: j.cfg.Instance, Inputs: inputs, Mode: j.cfg.Mode, TransactionTimeout: j.cfg.transactionTimeout(), CommitTimeout: j.commitTimeout(),
		Logger: j.cfg.Logger.With("job", j.name)}
}

// commitTimeout bounds every commit: the checkpoint timeout.
func (j *Job) commitTimeout() time.Duration {
	return j.cfg.Checkpoint.Timeout
}

// runOnce runs one attempt. ctx done asks for a graceful stop; wctx bounds
// the work (see stopContext). progressed reports that a checkpoint
// committed during it.
func (j *Job) runOnce(ctx, wctx context.Context, store checkpoint.Storage, fp points) (progressed bool, err error) {
	hctx, hcancel := context.WithTimeout(wctx, time.Minute)
	err = j.createHops(hctx)
	hcancel()
	if err != nil {
		return false, err
	}
	if stopped, err := j.resetSinks(ctx, wctx); stopped || err != nil {
		return false, err
	}
	var assigned map[string][]int32
	var changed <-chan struct{}
	if m := j.membership(); m != nil {
		assigned, changed, err = m.Assignment(ctx)
		if err != nil {
			if ctx.Err() != nil {
				j.cfg.Logger.Info("keyed: stopped while waiting for an assignment", "job", j.name)
				return false, nil
			}
			return false, fmt.Errorf("keyed: waiting for an assignment: %w", err)
		}
		defer m.Released()
	}
	rctx, cancel := context.WithCancelCause(wctx)
	defer cancel(nil)
	r := &run{assigned: assigned, changed: changed, j: j, cfg: j.cfg, store: store, runID: newRunID(), log: j.cfg.Logger.With("job", j.name), warn: j.cfg.warnLog.With("job", j.name), fp: fp, stop: rctx.Done(), cancel: cancel,
		acks: make(chan ack, 64), metas: make(chan metaDone, 1), exhausted: make(chan int, 64), auxiliary: map[int]bool{}, bootstrapped: make(chan struct{}), failures: make(chan error, 1), align: &alignmentStats{job: &j.stats}, stats: j.stats.newRun()}
	defer j.stats.run.Store(nil)
	sctx, scancel := context.WithTimeout(rctx, time.Minute)
	defer scancel()
	if r.sources, err = j.provenance(sctx); err != nil {
		return false, err
	}
	restore := j.restore
	if assigned != nil {
		restore = j.restoreAssigned
	}
	rs, err := restore(sctx, r)
	if err != nil {
		return false, err
	}
	committed := uint64(0)
	if !rs.fresh {
		committed = rs.meta.ID
	}
	for _, s := range j.sinks() {
		s.resume(committed)
	}
	if err := j.build(rctx, r, rs); err != nil {
		cancel(err)
		r.wg.Wait()
		return false, err
	}
	progressed, err = r.coordinate(ctx, rctx, committed, rs.maxP)
	if err == nil && r.reassigned && ctx.Err() == nil {
		err = errReassigned
	}
	cancel(errors.New("run ended"))
	r.wg.Wait()
	r.bg.Wait()
	r.align.mu.Lock()
	j.statsMu.Lock()
	j.alignments = append(j.alignments, r.align.d...)
	if n := len(j.alignments); n > maxAlignments {
		j.alignments = append(j.alignments[:0], j.alignments[n-maxAlignments:]...)
	}
	j.statsMu.Unlock()
	r.align.mu.Unlock()
	return progressed, err
}

// resetSinks resets every sink, the first first, for a new run; stopped
// says the job was stopped meanwhile (a clean stop, nothing ran).
// Startup is not cut short by a stop request (the job then stops with a
// final checkpoint), except when a sink cannot start: a stop then ends
// the wait for the brokers after a short grace.
func (j *Job) resetSinks(ctx, wctx context.Context) (stopped bool, err error) {
	resetCtx, cancelReset := context.WithCancel(wctx)
	resetDone := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			select {
			case <-time.After(5 * time.Second):
				cancelReset()
			case <-resetDone:
			}
		case <-resetDone:
		}
	}()
	var failed sinkNode
	for _, s := range j.sinks() {
		if err = s.reset(resetCtx, j.sinkInfo()); err != nil {
			failed = s
			break
		}
	}
	close(resetDone)
	cancelReset()
	if err == nil {
		return false, nil
	}
	if ctx.Err() != nil && wctx.Err() == nil {
		// Stopped before anything ran: nothing to checkpoint, a clean stop.
		j.cfg.Logger.Info("keyed: stopped while the sink was starting", "job", j.name, "err", err)
		return true, nil
	}
	return false, fmt.Errorf("keyed: sink %q: reset: %w", failed.sinkName(), err)
}

// provenance asks every Identified source where it reads now.
func (j *Job) provenance(ctx context.Context) ([]checkpoint.SourceRef, error) {
	var refs []checkpoint.SourceRef
	for _, s := range j.sources {
		v := s.sourceValue()
		if h, ok := v.(interface{ connectorSource() any }); ok {
			v = h.connectorSource() // a hop's
		}
		id, ok := v.(connector.Identified)
		if !ok {
			continue
		}
		ref, err := id.Provenance(ctx)
		if err != nil {
			return nil, fmt.Errorf("keyed: source %q: which cluster and topic id it reads: %w", s.sourceName(), err)
		}
		if ref.Topic == "" {
			ref.Topic = s.topic()
		}
		refs = append(refs, ref)
	}
	sort.Slice(refs, func(a, b int) bool { return refs[a].Topic < refs[b].Topic })
	return refs, nil
}

// decide reads what the sink recorded and what the storage holds, and
// decides what the run restores (recovery.Decide).
func (j *Job) decide(ctx context.Context, r *run) (d recovery.Decision, rec *connector.Recorded, err error) {
	rec, err = j.sink.recorded(ctx)
	if err != nil {
		return d, nil, fmt.Errorf("keyed: reading the sink's commit record: %w", err)
	}
	var recorded *checkpoint.Ref
	if rec != nil {
		recorded = &rec.Ref
	}
	local, err := checkpoint.ListCheckpoints(ctx, r.store)
	if err != nil {
		return d, nil, err
	}
	var marker *checkpoint.Ref
	if m, ok, err := checkpoint.ReadCommitted(ctx, r.store); err != nil {
		r.log.Warn("keyed: local committed marker unreadable", "err", err)
	} else if ok {
		marker = &m
	}
	accept := j.cfg.AcceptDuplicates || j.cfg.Mode == checkpoint.AtLeastOnce
	d, err = recovery.Decide(recovery.Input{Recorded: recorded, Local: local, Marker: marker, AcceptDuplicates: accept,
		Valid: func(ref checkpoint.Ref) error {
			_, _, err := checkpoint.ReadCheckpoint(ctx, r.store, ref.Run, ref.ID)
			return err
		}})
	if err != nil && !errors.Is(err, checkpoint.ErrCommittedMissing) && !errors.Is(err, checkpoint.ErrAmbiguous) {
		// The storage failed to read a checkpoint (an EIO, a bucket that
		// did not answer): retryable, since it may pass, and nothing to
		// do with what the checkpoint holds (recovery.Unusable).
		return d, nil, fmt.Errorf("keyed: restoring from %s: %w", j.storageName(), err)
	}
	if err != nil {
		// What is on disk and what the sink recorded disagree: no restart
		// can mend that.
		return d, nil, Permanent(fmt.Errorf("keyed: %w; %s", err, j.waysForward(err)))
	}
	switch {
	case d.Action == recovery.Restore && rec == nil:
		// Kafka holds no record: nothing outside this directory says the
		// checkpoint belongs to this cluster and topics. Said whatever the
		// Logger, since a wrong guess here skips or repeats input.
		r.warn.Warn("keyed: restoring from the local committed marker: the sink's system holds no commit record for this job (expired after offsets.retention.minutes, deleted, or another cluster)",
			"run", r.runID, "checkpoint", d.Ref.String(), "storage", j.storageName(), "decision", d.Note)
	default:
		r.log.Info("keyed: recovery", "run", r.runID, "decision", d.Note, "checkpoint", d.Ref.String())
	}
	return d, rec, nil
}

// restore decides the checkpoint to start from (DESIGN.md, "Start"): the
// one the sink recorded, checked against the offsets recorded with it.
// For a fresh start, build writes and commits checkpoint 0.
func (j *Job) restore(ctx context.Context, r *run) (*restoreState, error) {
	d, rec, err := j.decide(ctx, r)
	if err != nil {
		return nil, err
	}
	if err := r.point(pointDuringRestore); err != nil {
		return nil, err
	}
	rs := &restoreState{positions: map[string]map[int32]int64{}}
	if d.Action != recovery.Restore {
		rs.fresh = true
		return rs, nil
	}
	m, files, err := checkpoint.ReadCheckpoint(ctx, r.store, d.Ref.Run, d.Ref.ID)
	if err != nil && !recovery.Unusable(err) {
		return nil, fmt.Errorf("keyed: restoring checkpoint %s: %w", d.Ref, err) // a failure to read: retryable
	}
	if err != nil {
		return nil, Permanent(fmt.Errorf("keyed: %w; %s", err, j.waysForward(checkpoint.ErrCommittedMissing)))
	}
	// Before anything of the checkpoint is used: were its offsets read
	// where the job reads now?
	if rs.failover, err = r.checkProvenance(m); err != nil {
		return nil, err
	}
	if rec != nil && !d.Fallback && !rs.failover {
		// Offsets and commit record were committed together: anything
		// else means something other than this job moved them.
		if err := recovery.CheckOffsets(rec.Where, d.Ref, m.Offsets, rec.Offsets); err != nil {
			return nil, Permanent(fmt.Errorf("keyed: %w", err))
		}
	}
	if j.cfg.MaxParallelism != 0 && j.cfg.MaxParallelism != m.MaxParallelism {
		return nil, Permanent(fmt.Errorf("keyed: max parallelism %d set, but checkpoint %s has %d; it cannot change across a restore (leave it 0 to adopt the checkpoint's)",
			j.cfg.MaxParallelism, m.Ref(), m.MaxParallelism))
	}
	rs.meta, rs.files, rs.maxP = m, files, m.MaxParallelism
	if !rs.failover {
		for _, o := range m.Offsets {
			if rs.positions[o.Topic] == nil {
				rs.positions[o.Topic] = map[int32]int64{}
			}
			rs.positions[o.Topic][o.Partition] = o.Offset
		}
		rs.takeTimes(m, nil)
	}
	if d.Fallback {
		r.warn.Warn("keyed: restoring an older checkpoint; output after it will be repeated", "note", d.Note)
	}
	return rs, nil
}

// checkProvenance refuses checkpoint m when it read a source on another
// cluster or from an earlier incarnation of the topic than the run reads
// now (recovery.CheckProvenance), unless the job fails over (Failover):
// failover then reports that m's state is restored without its offsets.
// A checkpoint that records no provenance restores as before, with a
// warning.
func (r *run) checkProvenance(m *checkpoint.Metadata) (failover bool, err error) {
	unknown, perr := recovery.CheckProvenance(m, r.sources)
	if len(unknown) > 0 {
		r.warn.Warn("keyed: the restored checkpoint does not record which cluster and topic ids its offsets belong to (written before kord recorded them): restoring it unchecked",
			"checkpoint", m.Ref().String(), "topics", unknown)
	}
	if perr == nil {
		return false, nil
	}
	if !r.cfg.Failover || r.assigned != nil {
		return false, Permanent(fmt.Errorf("keyed: restore refused: %w; %s", perr, r.j.provenanceWays()))
	}
	r.warn.Warn("keyed: failover: restoring the keyed state of a checkpoint taken on another cluster or topic; every source starts from its start setting, not from the checkpoint's offsets",
		"checkpoint", m.Ref().String(), "err", perr)
	return true, nil
}

// provenanceWays says what a user can do when a restore is refused for
// its provenance.
func (j *Job) provenanceWays() string {
	if j.membership() != nil {
		return fmt.Sprintf("to start over, delete the job's checkpoints in %s and its commit group (Job.Forget); a job of several processes cannot fail over with its state", j.storageName())
	}
	return fmt.Sprintf("to start over, delete the job's checkpoints in %s and its commit group (Job.Forget); "+
		"to keep the keyed state and read the sources from their start setting instead of the old offsets (a planned failover to a replica cluster), run with keyed.Failover()", j.storageName())
}

// waysForward says what a user can do when the checkpoint to restore is
// missing, corrupt or unknown.
func (j *Job) waysForward(err error) string {
	switch {
	case errors.Is(err, checkpoint.ErrCommittedMissing):
		return fmt.Sprintf("to go on, restore the newest older checkpoint and accept that the output after it is written again (keyed.AcceptDuplicates), or start over from the sources' start (Job.Forget deletes the checkpoints in %s and the commit group)", j.storageName())
	case errors.Is(err, checkpoint.ErrAmbiguous):
		return fmt.Sprintf("to go on, restore the local marker's checkpoint and accept that output may be written again (keyed.AcceptDuplicates), or start over from the sources' start (Job.Forget deletes the checkpoints in %s and the commit group)", j.storageName())
	}
	return fmt.Sprintf("to start over, Job.Forget deletes the checkpoints in %s and the commit group", j.storageName())
}

// recorded returns the offsets the sink commits with a checkpoint: all but
// those of topics every process reads whole (whole).
func (r *run) recorded(offs []checkpoint.PartitionOffset) []checkpoint.PartitionOffset {
	if len(r.whole) == 0 {
		return offs
	}
	var out []checkpoint.PartitionOffset
	for _, o := range offs {
		if !r.whole[o.Topic] {
			out = append(out, o)
		}
	}
	return out
}

// freshStart writes checkpoint 0 (start offsets, no state) and commits it
// through the sink; it is called by build once the partitions are known.
func (r *run) freshStart(ctx context.Context, rs *restoreState, offsets []checkpoint.PartitionOffset) error {
	m := &checkpoint.Metadata{Run: r.runID, ID: 0, Created: time.Now(), MaxParallelism: rs.maxP, Offsets: offsets, Operators: append([]checkpoint.OperatorRef(nil), r.opRefs...), Sources: r.sources}
	if err := checkpoint.WriteCheckpoint(ctx, r.store, m, nil); err != nil {
		return err
	}
	ref := checkpoint.Ref{Run: r.runID, ID: 0}
	cctx, cancel := context.WithTimeout(ctx, r.j.commitTimeout())
	err := r.j.sink.commit(cctx, ref, r.recorded(offsets))
	cancel()
	if err != nil {
		return fmt.Errorf("keyed: sink %q: committing the fresh start: %w", r.j.sink.sinkName(), err)
	}
	if err := checkpoint.SetCommitted(ctx, r.store, ref); err != nil {
		r.log.Warn("keyed: local committed marker", "err", err)
	}
	r.log.Debug("keyed: checkpoint committed", "run", r.runID, "checkpoint", 0)
	if err := r.point(pointAfterFreshCommitted); err != nil {
		return err
	}
	rs.meta = m
	return r.onCommit(0)
}

// ended records, from a source task whose bounded input ended, how many
// records it read this run, whether its positions came from a restored
// checkpoint, and its offsets.
func (r *run) ended(read int64, restored bool, offsets []string) {
	r.endMu.Lock()
	defer r.endMu.Unlock()
	r.endRead += read
	r.endRestored = r.endRestored || restored
	r.endOffsets = append(r.endOffsets, offsets...)
}

// emptyRun says, whatever the Logger, that the bounded input ended before
// the run read a single record because the restored checkpoint's offsets
// were already at its end: a job pointed at a new topic or cluster with an
// old checkpoint that records no provenance would otherwise write nothing
// and return nil without a word. Called once every source task's input has
// ended.
func (r *run) emptyRun() {
	r.endMu.Lock()
	defer r.endMu.Unlock()
	if r.endRead > 0 || !r.endRestored {
		return
	}
	sort.Strings(r.endOffsets)
	r.warn.Warn("keyed: the bounded input ended before the run read any record: the restored checkpoint's offsets are already at its end (to read the input again, start over with Job.Forget)",
		"offsets", strings.Join(r.endOffsets, " "))
}

// onCommit calls the job's OnCommit function, if any, for checkpoint id,
// which has committed.
func (r *run) onCommit(id uint64) error {
	if r.cfg.OnCommit == nil {
		return nil
	}
	if err := r.cfg.OnCommit(id); err != nil {
		return fmt.Errorf("keyed: OnCommit after checkpoint %d: %w", id, err)
	}
	return nil
}

// coordinate runs the checkpoint lifecycle until the job stops or fails.
// ctx done asks for a graceful stop; rctx is the run's context, cancelled
// by a task's failure or at the stop deadline.
func (r *run) coordinate(ctx, rctx context.Context, committed uint64, maxP int) (progressed bool, err error) {
	lc, err := lifecycle.New(r.cfg.Checkpoint, r.tasks, committed, time.Now())
	if err != nil {
		return false, err
	}
	c := &coordinator{r: r, rctx: rctx, lc: lc, maxP: maxP, pending: map[uint64]*collected{}}
	interval := r.cfg.Checkpoint.Interval
	tick := time.NewTicker(max(min(interval/4, 20*time.Millisecond), time.Millisecond))
	defer tick.Stop()
	stopping := false
	stopRequest := ctx.Done()
	changed := r.changed
	exhausted := map[int]bool{}
	for {
		var effs []lifecycle.Effect
		select {
		case <-stopRequest:
			stopping, stopRequest, changed = true, nil, nil
			r.log.Info("keyed: stopping: final checkpoint")
			effs = lc.Stop(time.Now())
		case <-changed:
			stopping, stopRequest, changed = true, nil, nil
			r.reassigned = true
			r.log.Info("keyed: the assignment changes: final checkpoint")
			effs = lc.Stop(time.Now())
		case <-tick.C:
			effs = lc.Tick(time.Now())
		case m := <-r.metas:
			if effs, err = c.metadataWritten(m); err != nil {
				return c.progressed, err
			}
		case a := <-r.acks:
			if a.err != nil {
				r.log.Warn("keyed: task declined checkpoint", "task", r.names[a.task], "checkpoint", a.id, "err", a.err)
				if crashed(a.err) {
					return c.progressed, a.err
				}
				c.failedBy(a.id, fmt.Errorf("task %s: %w", r.names[a.task], a.err))
				effs = lc.TaskFailed(a.id, time.Now())
				break
			}
			c.collect(a)
			effs = lc.Ack(a.id, a.task)
		case t := <-r.exhausted:
			if !r.auxiliary[t] { // an auxiliary input's end is not waited for
				exhausted[t] = true
			}
			ended := len(exhausted) == len(r.triggers)-len(r.auxiliary) && len(exhausted) > 0
			if ended {
				r.emptyRun()
			}
			if ended && !stopping {
				stopping, stopRequest = true, nil
				effs = lc.Stop(time.Now())
			}
		case err := <-r.failures:
			return c.progressed, err
		case <-rctx.Done():
			id, inFlight := lc.InFlight()
			if inFlight {
				return c.progressed, fmt.Errorf("keyed: checkpoint %d not committed: %w", id, context.Cause(rctx))
			}
			return c.progressed, context.Cause(rctx)
		}
		done, err := c.apply(effs)
		if err != nil {
			return c.progressed, err
		}
		if done {
			return c.progressed, nil
		}
	}
}

// coordinator carries out the checkpoint lifecycle's effects for a run
// (coordinate): triggers, metadata, the commit, what follows it, aborts.
type coordinator struct {
	r          *run
	rctx       context.Context
	lc         *lifecycle.Lifecycle
	maxP       int
	pending    map[uint64]*collected
	progressed bool // some checkpoint committed
	// cause is what failed the checkpoint in flight (a task's snapshot
	// write, its metadata write): the abort's error and, past
	// TolerableFailures, the job's. writing is the checkpoint whose
	// metadata is being written.
	cause   error
	writing uint64
}

// collected is what the tasks' acks of a checkpoint brought.
type collected struct {
	started time.Time // triggered
	offsets []checkpoint.PartitionOffset
	times   []checkpoint.PartitionTime
	files   []checkpoint.FileRef
	refs    []checkpoint.OperatorRef
	wm      int64        // the oldest operator task watermark so far
	final   int64        // the latest time an operator task made final
	acked   map[int]bool // the tasks that acked
}

// collect keeps what ack a brings for its checkpoint.
func (c *coordinator) collect(a ack) {
	p := c.pending[a.id]
	if p == nil {
		return
	}
	p.offsets = append(p.offsets, a.offsets...)
	p.times = append(p.times, a.times...)
	p.files = append(p.files, a.files...)
	p.refs = append(p.refs, a.refs...)
	p.acked[a.task] = true
	if a.opTask {
		p.wm = min(p.wm, a.wm)
		p.final = max(p.final, a.final)
	}
}

// apply carries out effs in order; done is the lifecycle's end (Stopped).
func (c *coordinator) apply(effs []lifecycle.Effect) (done bool, err error) {
	r := c.r
	for _, e := range effs {
		switch e.Kind {
		case lifecycle.Trigger:
			err = c.trigger(e)
		case lifecycle.WriteMetadata:
			err = c.writeMetadata(e)
		case lifecycle.Commit:
			// What the commit leads to is applied at once, in place of the
			// effects after it.
			next, err := c.commit(e)
			if err != nil {
				return false, err
			}
			return c.apply(next)
		case lifecycle.Committed:
			err = c.committed(e)
		case lifecycle.Abort:
			r.j.stats.aborted.Add(1)
			c.cause = c.why(e)
			r.log.Warn("keyed: checkpoint aborted; its output commits with the next", "checkpoint", e.ID, "reason", e.Reason, "err", c.cause)
			delete(c.pending, e.ID)
			for _, ch := range r.cancels {
				select {
				case ch <- e.ID:
				case <-c.rctx.Done():
					return false, context.Cause(c.rctx)
				}
			}
		case lifecycle.Fail:
			// Follows the abort of e.ID, whose cause the error wraps: a
			// full disk's is errors.Is(err, syscall.ENOSPC), and names
			// the file.
			return false, fmt.Errorf("keyed: checkpoint %d aborted, more than TolerableFailures (%d) in a row: %w", e.ID, r.cfg.Checkpoint.TolerableFailures, c.cause)
		case lifecycle.Stopped:
			return true, nil
		}
		if err != nil {
			return false, err
		}
	}
	return false, nil
}

// trigger starts checkpoint e.ID: each source task gets its trigger.
func (c *coordinator) trigger(e lifecycle.Effect) error {
	c.pending = map[uint64]*collected{e.ID: {started: time.Now(), wm: channel.EndOfTime, final: channel.NoTime, acked: map[int]bool{}}}
	c.cause = nil
	if e.Final {
		c.r.finalID.Store(e.ID) // before any barrier of it: the sinks' snapshots see it
	}
	for _, t := range c.r.triggers {
		tr := trigger{id: e.ID, final: e.Final}
		select {
		case t <- tr:
		default:
			// The source task has not taken the previous trigger (it is
			// blocked, by backpressure say), so that checkpoint aborted
			// (the next is triggered only after the last committed or
			// aborted, and a commit needs every source's barrier): the new
			// trigger replaces it. The coordinator never waits on a task,
			// or its checkpoint timeouts would stop and a stuck run would
			// hang silently instead of failing and restarting.
			select {
			case <-t:
			default:
			}
			t <- tr
		}
	}
	return c.r.point(pointAfterBarrier)
}

// writeMetadata starts making checkpoint e.ID's metadata durable, with
// the offsets, files and stages its acks brought. The write runs beside
// the coordinator and reports to metadataWritten, so that a slow disk or
// bucket holds neither the checkpoint timeout, which aborts the
// checkpoint, nor a stop.
func (c *coordinator) writeMetadata(e lifecycle.Effect) error {
	r := c.r
	if err := r.point(pointAfterSnapshots); err != nil {
		return err
	}
	p := c.pending[e.ID]
	sort.Slice(p.offsets, func(a, b int) bool {
		if p.offsets[a].Topic != p.offsets[b].Topic {
			return p.offsets[a].Topic < p.offsets[b].Topic
		}
		return p.offsets[a].Partition < p.offsets[b].Partition
	})
	slices.SortFunc(p.times, func(a, b checkpoint.PartitionTime) int {
		return cmp.Or(cmp.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
	})
	m := &checkpoint.Metadata{Run: r.runID, ID: e.ID, Created: time.Now(), MaxParallelism: c.maxP, Offsets: p.offsets, Times: p.times, Files: p.files, Operators: dedupRefs(append(p.refs, r.opRefs...)), Sources: r.sources}
	if p.wm != channel.NoTime && p.wm != channel.EndOfTime {
		wm := p.wm
		m.Watermark = &wm
	} else if p.wm == channel.EndOfTime && p.final != channel.NoTime {
		// Every input ended, and the end fired every window and timer:
		// what they made final stays final in a later run on more input
		// (the checkpoint records the latest time made final, not the
		// end, which would make every later record late, nor nothing,
		// which would open the fired windows again and fire them twice,
		// with part of their records).
		wm := p.final
		m.Watermark = &wm
	}
	c.writing = e.ID
	ctx := c.rctx
	r.bg.Add(1)
	go func() {
		defer r.bg.Done()
		err := checkpoint.PutMetadata(ctx, r.store, m)
		select {
		case r.metas <- metaDone{id: e.ID, err: err}:
		case <-r.stop:
		}
	}()
	return nil
}

// metadataWritten takes the outcome of a metadata write. One whose
// checkpoint aborted meanwhile (timed out) is ignored: that checkpoint
// never commits, and retention removes what it left.
func (c *coordinator) metadataWritten(m metaDone) ([]lifecycle.Effect, error) {
	r := c.r
	if id, ok := c.lc.InFlight(); !ok || id != m.id {
		return nil, nil
	}
	c.writing = 0
	if m.err != nil {
		r.log.Warn("keyed: checkpoint metadata", "checkpoint", m.id, "err", m.err)
		c.failedBy(m.id, m.err)
		return c.lc.MetadataFailed(m.id, time.Now()), nil
	}
	if err := r.point(pointAfterMetadata); err != nil {
		return nil, err
	}
	return c.lc.MetadataDurable(m.id), nil
}

// failedBy keeps err as the cause of checkpoint id's failure, if id is
// in flight (a late report of an aborted one is not).
func (c *coordinator) failedBy(id uint64, err error) {
	if cur, ok := c.lc.InFlight(); ok && cur == id {
		c.cause = err
	}
}

// why says why checkpoint e.ID aborts: what failed it, or, timed out, what
// it was still waiting for.
func (c *coordinator) why(e lifecycle.Effect) error {
	r := c.r
	if e.Reason != lifecycle.ReasonTimeout {
		if c.cause != nil {
			return c.cause
		}
		return errors.New(e.Reason.String())
	}
	waiting := "writing its metadata " + r.store.Where(layout.MetaName(r.runID, e.ID))
	if c.writing != e.ID {
		var tasks []string
		for i, name := range r.names {
			if p := c.pending[e.ID]; p == nil || !p.acked[i] {
				tasks = append(tasks, name)
			}
		}
		waiting = "waiting for the snapshots of " + strings.Join(tasks, ", ")
	}
	return fmt.Errorf("not complete within the checkpoint timeout %v, %s", r.cfg.Checkpoint.Timeout, waiting)
}

// commit commits checkpoint e.ID through the sink.
func (c *coordinator) commit(e lifecycle.Effect) ([]lifecycle.Effect, error) {
	r := c.r
	if err := r.point(pointBeforeCommit); err != nil {
		return nil, err
	}
	// The commit is not cut short by a stop request (the final checkpoint
	// of a graceful stop commits after it), only by the checkpoint
	// timeout, the stop deadline and the run's failure.
	cctx, ccancel := context.WithTimeout(c.rctx, r.j.commitTimeout())
	began := time.Now()
	err := r.j.sink.commit(cctx, checkpoint.Ref{Run: r.runID, ID: e.ID}, r.recorded(c.pending[e.ID].offsets))
	ccancel()
	r.j.stats.lastCommit.Store(int64(time.Since(began)))
	if err != nil {
		c.lc.CommitFailed(e.ID)
		return nil, fmt.Errorf("keyed: commit of checkpoint %d: %w", e.ID, err)
	}
	if err := r.point(pointAfterCommit); err != nil {
		return nil, err
	}
	if err := c.finish(e.ID); err != nil {
		return nil, err
	}
	return c.lc.CommitDone(e.ID, time.Now()), nil
}

// finish has the Follower sinks finish committed checkpoint id. A failure
// fails the run: the checkpoint is committed, and the restore of it
// finishes what it staged.
func (c *coordinator) finish(id uint64) error {
	r := c.r
	for _, s := range r.j.outputs {
		f, ok := s.sinkValue().(connector.Follower)
		if !ok {
			continue
		}
		fctx, cancel := context.WithTimeout(c.rctx, r.j.commitTimeout())
		err := f.Finish(fctx, checkpoint.Ref{Run: r.runID, ID: id})
		cancel()
		if err != nil {
			return fmt.Errorf("keyed: sink %q: finishing committed checkpoint %d (its restore finishes it): %w", s.sinkName(), id, err)
		}
	}
	return nil
}

// committed follows checkpoint e.ID's commit: the local marker,
// retention, OnCommit.
func (c *coordinator) committed(e lifecycle.Effect) error {
	r := c.r
	c.progressed = true
	if p := c.pending[e.ID]; p != nil {
		r.j.stats.committedCheckpoint(e.ID, time.Since(p.started), p.files)
	} else {
		r.j.stats.committedCheckpoint(e.ID, 0, nil)
	}
	ref := checkpoint.Ref{Run: r.runID, ID: e.ID}
	if r.assigned != nil {
		// Shared storage: no marker (it is one process's), and retention
		// only within this run (retainRun).
		if err := r.point(pointAfterMarker); err != nil {
			return err
		}
		if err := retainRun(c.rctx, r.store, ref, retained); err != nil {
			r.log.Warn("keyed: retention", "err", err)
		}
		r.sweepLater(c.rctx)
		delete(c.pending, e.ID)
		return r.onCommit(e.ID)
	}
	if err := checkpoint.SetCommitted(c.rctx, r.store, ref); err != nil {
		// The commit is in the sink's system; the marker only matters
		// when that record expires. Report and go on.
		r.log.Error("keyed: local committed marker", "checkpoint", e.ID, "err", err)
	}
	if err := r.point(pointAfterMarker); err != nil {
		return err
	}
	if err := retain.Committed(c.rctx, r.store, ref, retained); err != nil {
		r.log.Warn("keyed: retention", "err", err)
	}
	r.log.Debug("keyed: checkpoint committed", "run", r.runID, "checkpoint", e.ID)
	delete(c.pending, e.ID)
	return r.onCommit(e.ID)
}

func dedupRefs(refs []checkpoint.OperatorRef) []checkpoint.OperatorRef {
	seen := map[string]bool{}
	var out []checkpoint.OperatorRef
	for _, r := range refs {
		if !seen[r.Name] {
			seen[r.Name] = true
			out = append(out, r)
		}
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Name < out[b].Name })
	return out
}

// maxAlignments is how many alignment times AlignmentTimes keeps: a job
// that runs for months must not keep one per checkpoint and task.
const maxAlignments = 10_000

// alignmentStats collects alignment durations, for figures.
type alignmentStats struct {
	mu  sync.Mutex
	d   []time.Duration
	job *jobStats
}

func (s *alignmentStats) add(d time.Duration) {
	s.mu.Lock()
	if len(s.d) >= 2*maxAlignments {
		s.d = append(s.d[:0], s.d[len(s.d)-maxAlignments:]...)
	}
	s.d = append(s.d, d)
	s.mu.Unlock()
	s.job.aligned(d)
}

// AlignmentTimes returns how long each task's barrier alignment took (first
// barrier to snapshot), for the checkpoints of the Runs so far: the most
// recent 10,000 of them once a Run has ended (the metrics count them all:
// kord_checkpoint_alignment_seconds_total).
func (j *Job) AlignmentTimes() []time.Duration {
	j.statsMu.Lock()
	defer j.statsMu.Unlock()
	return append([]time.Duration(nil), j.alignments...)
}

// DeadLetters returns how many undecodable input records the job has handed
// to its sink's dead letters, over every Run so far. A record read again
// after a restart (its checkpoint did not commit) is counted again; the
// dead-letter topic, read committed, holds each exactly once.
func (j *Job) DeadLetters() int64 { return j.deadLetters.Load() }
