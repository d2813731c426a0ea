package keyed

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/kordproject/kord/checkpoint"
	"github.com/kordproject/kord/internal/layout"
	"github.com/kordproject/kord/internal/recovery"
	"github.com/kordproject/kord/internal/retain"
	"github.com/kordproject/kord/keyed/connector"
)

// A job on several processes (Membership). Each process runs over the
// partitions assigned to it; a partition's key group is the partition
// (ByPartition), and its state comes from the checkpoint its own commit
// record names, which another process may have written (DESIGN.md,
// "Several processes").

// scaledRestore is one checkpoint some assigned partitions' records name,
// and the key groups (partitions) to take from it.
type scaledRestore struct {
	meta  *checkpoint.Metadata
	files map[string][]byte
	take  map[string]map[int]bool // by topic: a stage takes the key groups of the topics it reads
}

// restoreAssigned decides, partition by partition, where this run starts:
// a partition whose record names a checkpoint restores its key group from
// it, at the offset recorded with it; a partition no record names starts
// fresh (the source's StartFrom), and build commits its start first.
func (j *Job) restoreAssigned(ctx context.Context, r *run) (*restoreState, error) {
	rec, err := j.sink.recorded(ctx)
	if err != nil {
		return nil, fmt.Errorf("keyed: reading the sink's commit records: %w", err)
	}
	// With every partition's record just read: other runs' checkpoints
	// that nothing names any more go (the named ones are restored below).
	r.sweep(ctx, rec)
	rs := &restoreState{positions: map[string]map[int32]int64{}, fresh: true}
	own := map[string]map[int32]bool{}
	for topic, ps := range r.assigned {
		own[topic] = map[int32]bool{}
		for _, p := range ps {
			own[topic][p] = true
		}
	}
	byRef := map[checkpoint.Ref][]connector.PartitionRecord{}
	if rec != nil {
		for _, pr := range rec.Parts {
			if own[pr.Topic][pr.Partition] {
				byRef[pr.Ref] = append(byRef[pr.Ref], pr)
			}
		}
	}
	refs := make([]checkpoint.Ref, 0, len(byRef))
	for ref := range byRef {
		refs = append(refs, ref)
	}
	slices.SortFunc(refs, func(a, b checkpoint.Ref) int {
		return cmp.Or(cmp.Compare(a.Run, b.Run), cmp.Compare(a.ID, b.ID))
	})
	var operators []checkpoint.OperatorRef
	for _, ref := range refs {
		parts := byRef[ref]
		m, files, err := checkpoint.ReadCheckpoint(ctx, r.store, ref.Run, ref.ID)
		if err != nil && !recovery.Unusable(err) {
			return nil, fmt.Errorf("keyed: restoring checkpoint %s: %w", ref, err) // a failure to read: retryable
		}
		if err != nil {
			// A record that names another checkpoint now was committed
			// over since it was read: by the process that owns the
			// partition (only the owner's generation may commit it), whose
			// retention then deleted the checkpoint read here. This
			// process's assignment is stale (it lost the partitions and
			// has not rejoined yet): a retry, not a loss (seen on three
			// brokers: a process continued after a pause restored its old
			// partitions while their new owner committed on).
			if now := recordOf(ctx, j, parts[0]); now != nil && *now != ref {
				return nil, fmt.Errorf("keyed: %s[%d]'s record named checkpoint %s, gone since, and names %s now: another process owns the partition; this one's assignment is stale (%w)",
					parts[0].Topic, parts[0].Partition, ref, *now, err)
			}
			err = fmt.Errorf("%w: %w", checkpoint.ErrCommittedMissing, err)
			return nil, Permanent(fmt.Errorf("keyed: %s[%d]'s record (%s) names checkpoint %s: %w (is the checkpoint directory %s shared by every process of the job?)",
				parts[0].Topic, parts[0].Partition, rec.Where, ref, err, j.cfg.Dir))
		}
		// Before anything of it is used: were its offsets read where this
		// process reads now? (No failover here: the records that name
		// checkpoints live on the cluster.)
		if _, err := r.checkProvenance(m); err != nil {
			return nil, err
		}
		take := map[string]map[int]bool{}
		for _, pr := range parts {
			at, ok := offsetOf(m.Offsets, pr.Topic, pr.Partition)
			if !ok || at != pr.Offset {
				return nil, Permanent(fmt.Errorf("keyed: %s[%d]: %s records offset %d with checkpoint %s, which holds %d (found: %v): something other than this job moved the offset",
					pr.Topic, pr.Partition, rec.Where, pr.Offset, ref, at, ok))
			}
			if rs.positions[pr.Topic] == nil {
				rs.positions[pr.Topic] = map[int32]int64{}
			}
			rs.positions[pr.Topic][pr.Partition] = pr.Offset
			if take[pr.Topic] == nil {
				take[pr.Topic] = map[int]bool{}
			}
			take[pr.Topic][int(pr.Partition)] = true
		}
		if rs.maxP != 0 && rs.maxP != m.MaxParallelism {
			return nil, Permanent(fmt.Errorf("keyed: checkpoint %s has %d key groups, checkpoint %s %d: the input's partition count changed",
				ref, m.MaxParallelism, refs[0], rs.maxP))
		}
		rs.takeTimes(m, take)
		rs.maxP = m.MaxParallelism
		operators = append(operators, m.Operators...)
		rs.scaled = append(rs.scaled, scaledRestore{meta: m, files: files, take: take})
	}
	if len(refs) > 0 {
		rs.fresh = false
		// What build checks (key groups, keying mode) and where the run's
		// epochs start: checkpoint 0 of this run.
		rs.meta = &checkpoint.Metadata{Run: r.runID, MaxParallelism: rs.maxP, Operators: dedupRefs(operators)}
	}
	r.log.Info("keyed: recovery (one of several processes)", "run", r.runID, "assigned", r.assigned, "checkpoints", refs)
	return rs, nil
}

// restoreScaled restores into b, a backend of a stage that reads topics,
// the key groups of every checkpoint the run's partitions of those topics'
// records name, each from its own. (A stage after a hop reads the hop's
// topic: its key group p comes from the checkpoint the hop partition's
// record names, which may be another than the input partition p's.)
func (rs *restoreState) restoreScaled(b *Backend, topics []string) error {
	if err := b.canRestore(); err != nil {
		return err
	}
	for _, sr := range rs.scaled {
		take := func(kg int) bool {
			for _, t := range topics {
				if sr.take[t][kg] {
					return true
				}
			}
			return false
		}
		if err := b.restoreFrom(sr.meta, sr.files, take); err != nil {
			return fmt.Errorf("restore %s: %w", sr.meta.Ref(), err)
		}
	}
	b.restored = true
	return nil
}

// checkScaled refuses a job that cannot run on several processes yet.
func (j *Job) checkScaled() error {
	for _, o := range j.ops {
		if !o.byPartition() {
			return fmt.Errorf("keyed: stage %q: on several processes a stage is keyed by partition (ByPartition), or by a field through a hop (KeyBy on a job declared with Instance)", o.stageName())
		}
	}
	for _, s := range j.sources {
		if _, _, bc := s.feeds(); bc && !s.isAuxiliary() {
			return fmt.Errorf("keyed: source %q feeds a broadcast input, which every process of a job on several reads whole from its start at each run: mark its stream Auxiliary, so that it is read before the keyed input and a restart never meets fewer rules than before", s.sourceName())
		}
		if _, ok := s.sourceValue().(connector.OperatorState); ok {
			return fmt.Errorf("keyed: source %q keeps operator state, which does not follow partitions across processes", s.sourceName())
		}
	}
	for _, s := range j.sinks() {
		_, scaled := s.sinkValue().(connector.ScaledState)
		if _, ok := s.sinkValue().(connector.OperatorState); ok && !scaled {
			return fmt.Errorf("keyed: sink %q keeps operator state, which does not follow partitions across processes", s.sinkName())
		}
	}
	return nil
}

// checkPartitionMode requires partitions 0..n-1: partition p is key group p.
func checkPartitionMode(source string, parts []int32) error {
	for i, p := range parts {
		if p != int32(i) {
			return fmt.Errorf("keyed: source %q: partition mode needs partitions 0..n-1, found %v", source, parts)
		}
	}
	return nil
}

// assignedOf returns the partitions of parts that are assigned, ascending.
func assignedOf(parts, assigned []int32) []int32 {
	var out []int32
	for _, p := range parts {
		if slices.Contains(assigned, p) {
			out = append(out, p)
		}
	}
	return out
}

func offsetOf(offs []checkpoint.PartitionOffset, topic string, p int32) (int64, bool) {
	for _, o := range offs {
		if o.Topic == topic && o.Partition == p {
			return o.Offset, true
		}
	}
	return 0, false
}

// retainRun is retention on storage several processes share: it deletes
// only this run's checkpoints older than the keep newest up to committed,
// metadata first. Within a run the assigned partitions do not change, and
// each commit names the run's newest checkpoint for all of them, so no
// record names an older one of the run. Other processes' checkpoints, and
// this process's earlier runs (a partition revoked since may still name
// one), are left alone.
func retainRun(ctx context.Context, s checkpoint.Objects, committed checkpoint.Ref, keep int) error {
	if committed.ID < uint64(keep) {
		return nil
	}
	below := committed.ID - uint64(keep) + 1 // delete ids < below
	names, err := s.List(ctx, "")
	if err != nil {
		return err
	}
	var metas, files []string
	for _, name := range names {
		n, ok := layout.ParseName(name)
		if !ok || n.Run != committed.Run || n.ID >= below {
			continue
		}
		switch n.Kind {
		case layout.KindMeta:
			metas = append(metas, name)
		case layout.KindState:
			files = append(files, name)
		}
	}
	for _, name := range append(metas, files...) {
		if err := s.Delete(ctx, name); err != nil {
			return err
		}
	}
	return nil
}

// sweepMargin allows for the clocks of the process that wrote a
// checkpoint's metadata and the one that judges its age.
const sweepMargin = time.Minute

// sweepAge is how old another run's checkpoint must be before retention
// may delete it when no record names it: older than its commit can take
// (retain.Others).
func (j *Job) sweepAge() time.Duration {
	if d := testSweepAge.Load(); d >= 0 {
		return time.Duration(d)
	}
	return j.cfg.transactionTimeout() + j.commitTimeout() + sweepMargin
}

// testSweepAge, when not negative, replaces sweepAge (tests only).
var testSweepAge = func() *atomic.Int64 { var a atomic.Int64; a.Store(-1); return &a }()

// sweep is retention of other runs on the storage the processes share:
// earlier runs of this process and runs of processes since dead or moved
// on. It deletes their checkpoints that no partition's record in rec names
// and that are older than sweepAge (retain.Others); rec must have
// been read just before. This run's checkpoints are retainRun's.
func (r *run) sweep(ctx context.Context, rec *connector.Recorded) {
	var named []checkpoint.Ref
	if rec != nil {
		for _, p := range rec.Parts {
			named = append(named, p.Ref)
		}
	}
	now := time.Now()
	r.lastSweep.Store(now.UnixNano())
	deleted, err := retain.Others(ctx, r.store, named, r.runID, now.Add(-r.j.sweepAge()))
	if err != nil {
		r.log.Warn("keyed: retention of other runs' checkpoints", "err", err)
		return
	}
	if len(deleted) > 0 {
		r.log.Info("keyed: retention deleted other runs' checkpoints no record names", "checkpoints", deleted)
	}
}

// sweepLater starts a sweep in the background, with every partition's
// record read first, once sweepAge has passed since the last: a run can
// last long, and a process that died meanwhile left its checkpoints.
func (r *run) sweepLater(ctx context.Context) {
	if time.Since(time.Unix(0, r.lastSweep.Load())) < r.j.sweepAge() || r.sweeping.Swap(true) {
		return
	}
	r.bg.Add(1)
	go func() {
		defer r.bg.Done()
		defer r.sweeping.Store(false)
		ctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		rec, err := r.j.sink.recorded(ctx)
		if err != nil {
			r.lastSweep.Store(time.Now().UnixNano())
			r.log.Warn("keyed: retention of other runs' checkpoints: reading the sink's commit records", "err", err)
			return
		}
		r.sweep(ctx, rec)
	}()
}

// recordOf reads the sink's records again and returns the checkpoint the
// record of pr's partition names now, or nil when it cannot tell.
func recordOf(ctx context.Context, j *Job, pr connector.PartitionRecord) *checkpoint.Ref {
	rec, err := j.sink.recorded(ctx)
	if err != nil || rec == nil {
		return nil
	}
	for _, p := range rec.Parts {
		if p.Topic == pr.Topic && p.Partition == pr.Partition {
			return &p.Ref
		}
	}
	return nil
}
