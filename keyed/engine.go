package keyed

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sort"
	"sync"
	"time"

	"github.com/kordproject/kord/checkpoint"
	"github.com/kordproject/kord/producer"
)

// ErrCrashed is returned by Run when Config.Hook stopped the job at a
// failure point: the job ended as if its process had died there.
var ErrCrashed = errors.New("keyed: crashed at a failure point")

// TaskError is a task's failure: an operator's error or panic, a source's
// or sink's error.
type TaskError struct {
	Task string // e.g. "count[1]"
	Err  error
}

func (e *TaskError) Error() string { return fmt.Sprintf("keyed: task %s: %v", e.Task, e.Err) }
func (e *TaskError) Unwrap() error { return e.Err }

// Type-erased graph nodes; the generic ones below implement them.
type sourceNode interface {
	sourceName() string
	topic() string
	sendsDeadLetters() bool
}

type opNode interface {
	validate(cfg Config) error
	opName() string
	// build creates every task of the job (sources, operator, sink) for
	// run r from restore state rs.
	build(r *run, rs *restoreState) error
}

type sinkNode interface {
	reset(ctx context.Context) error
	recorded(ctx context.Context) (*checkpoint.CheckpointRef, error)
	commit(ctx context.Context, ref checkpoint.CheckpointRef, offsets []checkpoint.PartitionOffset) error
	takesDeadLetters() bool
	sinkName() string
}

type outputNode[O any] interface {
	opNode
}

// restoreState is what a run starts from.
type restoreState struct {
	fresh     bool
	meta      *checkpoint.Metadata
	files     map[string][]byte
	maxP      int
	positions map[string]map[int32]int64 // topic -> partition -> offset
}

// ack is a task's report for a checkpoint.
type ack struct {
	task    int
	id      uint64
	offsets []checkpoint.PartitionOffset
	files   []checkpoint.FileRef
	refs    []checkpoint.OperatorRef
	err     error
}

type trigger struct {
	id    uint64
	final bool
}

// run is one attempt of a job: every task, started from one checkpoint.
type run struct {
	j      *Job
	cfg    Config
	store  *checkpoint.Store
	runID  string
	log    *slog.Logger
	ctx    context.Context // cancelled to end every task
	cancel context.CancelCauseFunc

	tasks     int
	names     []string
	triggers  []chan trigger         // per source task
	cancels   []chan uint64          // per operator and sink task
	acks      chan ack               // to the coordinator
	exhausted chan int               // source tasks whose input ended
	failures  chan error             // task failures
	wg        sync.WaitGroup         // tasks
	bg        sync.WaitGroup         // snapshot writers
	align     *alignmentStats        // alignment times
	opRef     checkpoint.OperatorRef // the keyed operator and its keying mode
}

func (r *run) addTask(name string) int {
	r.names = append(r.names, name)
	r.tasks++
	return r.tasks - 1
}

// go runs a task, turning its error or panic into a failure.
func (r *run) goTask(task int, fn func() error) {
	name := r.names[task]
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		defer func() {
			if p := recover(); p != nil {
				r.fail(&TaskError{Task: name, Err: fmt.Errorf("panic: %v\n%s", p, debug.Stack())})
			}
		}()
		if err := fn(); err != nil && r.ctx.Err() == nil {
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
	case <-r.ctx.Done():
	}
}

// hook calls Config.Hook at a failure point.
func (r *run) hook(point string) error {
	if r.cfg.Hook == nil {
		return nil
	}
	if err := r.cfg.Hook(point); err != nil {
		return fmt.Errorf("%w %s: %w", ErrCrashed, point, err)
	}
	return nil
}

// Run runs the job until every source has ended (bounded sources: a final
// checkpoint is committed, then Run returns nil), ctx is done (a graceful
// stop: the same final checkpoint), or a failure the restart strategy does
// not absorb. Each restart restores the checkpoint the sink recorded as
// committed.
func (j *Job) Run(ctx context.Context) error {
	if err := j.Validate(); err != nil {
		return err
	}
	store, err := checkpoint.OpenStore(j.cfg.FS, j.cfg.Dir)
	if err != nil {
		return err
	}
	defer store.Close()
	attempts := 0
	stable := j.cfg.Restart.StableAfter
	if stable <= 0 {
		stable = time.Minute
	}
	for {
		began := time.Now()
		progressed, err := j.runOnce(ctx, store)
		if err == nil || errors.Is(err, ErrCrashed) || permanent(err) {
			return err
		}
		if progressed && time.Since(began) >= stable {
			attempts = 0
		}
		attempts++
		if attempts > j.cfg.Restart.Attempts {
			if j.cfg.Restart.Attempts == 0 {
				return err
			}
			return fmt.Errorf("keyed: job %s: gave up after %d restarts: %w", j.name, j.cfg.Restart.Attempts, err)
		}
		if ctx.Err() != nil {
			return err
		}
		d := time.Duration(0)
		if j.cfg.Restart.Delay != nil {
			d = j.cfg.Restart.Delay(attempts)
		}
		j.cfg.Logger.Warn("keyed: restarting from the last committed checkpoint", "job", j.name, "attempt", attempts, "delay", d, "err", err)
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return err
		}
	}
}

// permanent reports a failure no restart can mend: the sink's producer was
// fenced (a newer copy of the job owns its transactional.id, and a restart
// would fence that copy in turn), or the broker refused the producer's
// configuration (a transaction timeout above its maximum, say).
func permanent(err error) bool {
	return errors.Is(err, producer.ErrFenced) || errors.Is(err, producer.ErrConfig)
}

func newRunID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// runOnce runs one attempt. progressed reports that a checkpoint
// committed during it.
func (j *Job) runOnce(ctx context.Context, store *checkpoint.Store) (progressed bool, err error) {
	// Startup is not cut short by a stop request (the job then stops with
	// a final checkpoint), except when the sink cannot start: a stop then
	// ends the wait for the brokers after a short grace.
	resetCtx, cancelReset := context.WithCancel(context.WithoutCancel(ctx))
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
	err = j.sink.reset(resetCtx)
	close(resetDone)
	cancelReset()
	if err != nil {
		if ctx.Err() != nil {
			// Stopped before anything ran: nothing to checkpoint, a clean
			// stop.
			j.cfg.Logger.Info("keyed: stopped while the sink was starting", "job", j.name, "err", err)
			return false, nil
		}
		return false, fmt.Errorf("keyed: sink reset: %w", err)
	}
	rctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	defer cancel(nil)
	r := &run{j: j, cfg: j.cfg, store: store, runID: newRunID(), log: j.cfg.Logger.With("job", j.name), ctx: rctx, cancel: cancel,
		acks: make(chan ack, 64), exhausted: make(chan int, 64), failures: make(chan error, 1), align: &alignmentStats{}}
	// Startup is not cut short by a stop request: the coordinator then
	// stops gracefully, with a final checkpoint.
	sctx, scancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer scancel()
	rs, err := j.restore(sctx, r)
	if err != nil {
		return false, err
	}
	if err := j.op.build(r, rs); err != nil {
		cancel(err)
		r.wg.Wait()
		return false, err
	}
	committed := uint64(0)
	if !rs.fresh {
		committed = rs.meta.ID
	} else {
		committed = 0
	}
	progressed, err = r.coordinate(ctx, committed, rs.maxP)
	cancel(errors.New("run ended"))
	r.wg.Wait()
	r.bg.Wait()
	r.align.mu.Lock()
	j.statsMu.Lock()
	j.alignments = append(j.alignments, r.align.d...)
	j.statsMu.Unlock()
	r.align.mu.Unlock()
	return progressed, err
}

// restore decides the checkpoint to start from (DESIGN.md, "Start") and,
// for a fresh start, writes and commits checkpoint 0.
func (j *Job) restore(ctx context.Context, r *run) (*restoreState, error) {
	rec, err := j.sink.recorded(ctx)
	if err != nil {
		return nil, fmt.Errorf("keyed: reading the sink's commit record: %w", err)
	}
	var cr *checkpoint.CommitRecord
	if rec != nil {
		cr = &checkpoint.CommitRecord{Run: rec.Run, Checkpoint: rec.ID}
	}
	local, err := checkpoint.ListCheckpoints(r.store)
	if err != nil {
		return nil, err
	}
	var marker *checkpoint.CheckpointRef
	if m, ok, err := checkpoint.ReadCommitted(r.store); err != nil {
		r.log.Warn("keyed: local committed marker unreadable", "err", err)
	} else if ok {
		marker = &m
	}
	accept := j.cfg.AcceptDuplicates || j.cfg.Mode == checkpoint.AtLeastOnce
	d, err := checkpoint.Decide(checkpoint.RecoveryInput{Record: cr, Local: local, Marker: marker, AcceptDuplicates: accept,
		Valid: func(ref checkpoint.CheckpointRef) error {
			_, _, err := checkpoint.ReadCheckpoint(r.store, ref.Run, ref.ID)
			return err
		}})
	if err != nil {
		return nil, fmt.Errorf("keyed: job %s: %w", j.name, err)
	}
	if err := r.hook(checkpoint.FailDuringRestore); err != nil {
		return nil, err
	}
	rs := &restoreState{positions: map[string]map[int32]int64{}}
	if d.Action == checkpoint.Restore {
		m, files, err := checkpoint.ReadCheckpoint(r.store, d.Ref.Run, d.Ref.ID)
		if err != nil {
			return nil, err
		}
		if j.cfg.MaxParallelism != 0 && j.cfg.MaxParallelism != m.MaxParallelism {
			return nil, fmt.Errorf("keyed: job %s: max parallelism %d set, but checkpoint %s has %d; it cannot change across a restore (leave it 0 to adopt the checkpoint's)",
				j.name, j.cfg.MaxParallelism, m.Ref(), m.MaxParallelism)
		}
		rs.meta, rs.files, rs.maxP = m, files, m.MaxParallelism
		for _, o := range m.Offsets {
			if rs.positions[o.Topic] == nil {
				rs.positions[o.Topic] = map[int32]int64{}
			}
			rs.positions[o.Topic][o.Partition] = o.Offset
		}
		if d.Fallback {
			r.log.Warn("keyed: restoring an older checkpoint; output after it will be repeated", "note", d.Note)
		}
		r.log.Info("keyed: restoring", "checkpoint", m.Ref().String())
		return rs, nil
	}
	rs.fresh = true
	return rs, nil
}

// freshStart writes checkpoint 0 (start offsets, no state) and commits it
// through the sink; it is called by build once the partitions are known.
func (r *run) freshStart(ctx context.Context, rs *restoreState, offsets []checkpoint.PartitionOffset) error {
	m := &checkpoint.Metadata{Run: r.runID, ID: 0, Created: time.Now(), MaxParallelism: rs.maxP, Offsets: offsets, Operators: []checkpoint.OperatorRef{r.opRef}}
	if err := checkpoint.WriteCheckpoint(r.store, m, nil); err != nil {
		return err
	}
	ref := checkpoint.CheckpointRef{Run: r.runID, ID: 0}
	if err := r.j.sink.commit(ctx, ref, offsets); err != nil {
		return fmt.Errorf("keyed: committing the fresh start: %w", err)
	}
	if err := checkpoint.SetCommitted(r.store, ref); err != nil {
		r.log.Warn("keyed: local committed marker", "err", err)
	}
	rs.meta = m
	return nil
}

// coordinate runs the checkpoint lifecycle until the job stops or fails.
func (r *run) coordinate(ctx context.Context, committed uint64, maxP int) (progressed bool, err error) {
	lc, err := checkpoint.NewLifecycle(r.cfg.Checkpoint, r.tasks, committed, time.Now())
	if err != nil {
		return false, err
	}
	type collected struct {
		offsets []checkpoint.PartitionOffset
		files   []checkpoint.FileRef
		refs    []checkpoint.OperatorRef
	}
	pending := map[uint64]*collected{}
	interval := r.cfg.Checkpoint.Interval
	if interval == 0 {
		interval = time.Second
	}
	tick := time.NewTicker(max(min(interval/4, 20*time.Millisecond), time.Millisecond))
	defer tick.Stop()
	stopping := false
	exhausted := map[int]bool{}
	var apply func([]checkpoint.Effect) (done bool, err error)
	apply = func(effs []checkpoint.Effect) (bool, error) {
		for _, e := range effs {
			switch e.Kind {
			case checkpoint.Trigger:
				pending = map[uint64]*collected{e.ID: {}}
				for _, t := range r.triggers {
					select {
					case t <- trigger{id: e.ID, final: e.Final}:
					case <-r.ctx.Done():
						return false, context.Cause(r.ctx)
					}
				}
			case checkpoint.WriteMetadata:
				if err := r.hook(checkpoint.FailAfterSnapshots); err != nil {
					return false, err
				}
				c := pending[e.ID]
				sort.Slice(c.offsets, func(a, b int) bool {
					if c.offsets[a].Topic != c.offsets[b].Topic {
						return c.offsets[a].Topic < c.offsets[b].Topic
					}
					return c.offsets[a].Partition < c.offsets[b].Partition
				})
				m := &checkpoint.Metadata{Run: r.runID, ID: e.ID, Created: time.Now(), MaxParallelism: maxP, Offsets: c.offsets, Files: c.files, Operators: dedupRefs(append(c.refs, r.opRef))}
				if err := checkpoint.PutMetadata(r.store, m); err != nil {
					r.log.Warn("keyed: checkpoint metadata", "checkpoint", e.ID, "err", err)
					return apply(lc.MetadataFailed(e.ID, time.Now()))
				}
				if err := r.hook(checkpoint.FailAfterMetadata); err != nil {
					return false, err
				}
				return apply(lc.MetadataDurable(e.ID))
			case checkpoint.Commit:
				if err := r.hook(checkpoint.FailBeforeCommit); err != nil {
					return false, err
				}
				// The commit is not cut short by a stop request (the final
				// checkpoint of a graceful stop commits after it), only by
				// the checkpoint timeout.
				timeout := r.cfg.Checkpoint.Timeout
				if timeout <= 0 {
					timeout = 60 * time.Second
				}
				cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
				err := r.j.sink.commit(cctx, checkpoint.CheckpointRef{Run: r.runID, ID: e.ID}, pending[e.ID].offsets)
				ccancel()
				if err != nil {
					lc.CommitFailed(e.ID)
					return false, fmt.Errorf("keyed: commit of checkpoint %d: %w", e.ID, err)
				}
				if err := r.hook(checkpoint.FailAfterCommit); err != nil {
					return false, err
				}
				return apply(lc.CommitDone(e.ID, time.Now()))
			case checkpoint.Committed:
				progressed = true
				ref := checkpoint.CheckpointRef{Run: r.runID, ID: e.ID}
				if err := checkpoint.SetCommitted(r.store, ref); err != nil {
					r.log.Error("keyed: local committed marker", "checkpoint", e.ID, "err", err)
				}
				if err := r.hook(checkpoint.FailAfterMarker); err != nil {
					return false, err
				}
				if err := checkpoint.Retain(r.store, ref, 2); err != nil {
					r.log.Warn("keyed: retention", "err", err)
				}
				delete(pending, e.ID)
			case checkpoint.Abort:
				r.log.Warn("keyed: checkpoint aborted", "checkpoint", e.ID, "reason", e.Reason)
				delete(pending, e.ID)
				for _, c := range r.cancels {
					select {
					case c <- e.ID:
					case <-r.ctx.Done():
						return false, context.Cause(r.ctx)
					}
				}
			case checkpoint.Fail:
				return false, fmt.Errorf("keyed: job %s: checkpoint %d: %s", r.j.name, e.ID, e.Reason)
			case checkpoint.Stopped:
				return true, nil
			}
		}
		return false, nil
	}
	handle := func(effs []checkpoint.Effect) (bool, error) { return apply(effs) }
	for {
		var effs []checkpoint.Effect
		select {
		case <-ctx.Done():
			if stopping {
				ctx = context.WithoutCancel(ctx)
				continue
			}
			stopping = true
			r.log.Info("keyed: stopping: final checkpoint")
			effs = lc.Stop(time.Now())
			ctx = context.WithoutCancel(ctx)
		case <-tick.C:
			effs = lc.Tick(time.Now())
		case a := <-r.acks:
			if a.err != nil {
				r.log.Warn("keyed: task declined checkpoint", "task", r.names[a.task], "checkpoint", a.id, "err", a.err)
				if errors.Is(a.err, ErrCrashed) {
					return progressed, a.err
				}
				effs = lc.TaskFailed(a.id, time.Now())
				break
			}
			if c := pending[a.id]; c != nil {
				c.offsets = append(c.offsets, a.offsets...)
				c.files = append(c.files, a.files...)
				c.refs = append(c.refs, a.refs...)
			}
			effs = lc.Ack(a.id, a.task)
		case t := <-r.exhausted:
			exhausted[t] = true
			if len(exhausted) == len(r.triggers) && !stopping {
				stopping = true
				effs = lc.Stop(time.Now())
			}
		case err := <-r.failures:
			return progressed, err
		}
		done, err := handle(effs)
		if err != nil {
			return progressed, err
		}
		if done {
			return progressed, nil
		}
	}
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

// alignmentStats collects alignment durations, for figures.
type alignmentStats struct {
	mu sync.Mutex
	d  []time.Duration
}

func (s *alignmentStats) add(d time.Duration) {
	s.mu.Lock()
	s.d = append(s.d, d)
	s.mu.Unlock()
}

// AlignmentTimes returns how long each task's barrier alignment took (first
// barrier to snapshot), for every checkpoint of every Run so far.
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
