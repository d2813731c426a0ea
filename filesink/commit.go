package filesink

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"sort"
	"time"

	"github.com/kordproject/kord/keyed"
)

// The partition commit (CommitPartitions). The sink keeps, in every
// checkpoint, each partition it wrote rows to that is not yet committed,
// and its watermark at the barrier. When checkpoint n commits (Finish(n),
// or the restore of n), every partition with rows of an epoch ≤ n, whose
// time plus the delay the watermark of n has passed, is due: its rows of
// n and before are visible, and no row still to come belongs to it but a
// late one (the watermark never goes back, across restores too: a restore
// starts from the checkpoint's). A background goroutine runs the policies
// for each due partition, retrying until they succeed; a partition leaves
// the state once committed with nothing newer.

// hivePart is a partition the sink wrote rows to, kept until committed.
type hivePart struct {
	Path   string   `json:"path"`
	Values []string `json:"values"`
	Time   int64    `json:"time"` // Unix ms: the start of its span
	// Lo, Hi: the first and last epoch with rows in it that no commit
	// covers yet; 0, 0 if none.
	Lo uint64 `json:"lo,omitempty"`
	Hi uint64 `json:"hi,omitempty"`
	// Due: a commit decided (its files are visible) and not yet done.
	Due bool   `json:"due,omitempty"`
	gen uint64 // counts the decisions, so that a commit done clears only its own
}

// stateElem is an element of the sink's operator state: a file (the
// elements of checkpoints before partitions had any other), a partition,
// or the watermark at the barrier.
type stateElem struct {
	file
	Partition *hivePart `json:"partition,omitempty"`
	Watermark *int64    `json:"watermark,omitempty"`
	// Run is the incarnation that wrote the state: on several processes,
	// a restore deletes the staged files of the runs it restored, and of
	// no other (they may be another process's, in progress).
	Run string `json:"run,omitempty"`
}

// commits is the sink's partition-commit state, guarded by Sink.mu.
type commits struct {
	wm    int64            // the sink task's watermark (Advance), never backwards
	wmAt  map[uint64]int64 // the watermark at each barrier not yet finished
	parts map[string]*hivePart
	late  int64 // late records, this Sink's life
	// The committer of this incarnation: wake it, done when it ended.
	wake  chan struct{}
	done  chan struct{}
	since time.Time // the first failure of the current run of failures
	// retry bounds the committer's backoff (tests shorten it).
	retryMin, retryMax time.Duration

	// A job of several processes (connector.Owner): the input partitions
	// this run owns and all of them; wmSent, the watermark last recorded
	// for the owned ones; restoredRuns, the runs whose state a restore
	// took; restoredWm, whether one gave a watermark.
	owned, all   map[string][]int32
	wmSent       int64
	restoredRuns map[string]bool
	restoredWm   bool
}

func (s *Sink[T]) validatePartitions() error {
	var errs []error
	if s.partErr != nil {
		errs = append(errs, s.errorf("%w", s.partErr))
	}
	if s.cfg.partitions != nil && s.cfg.bucketOf != nil {
		errs = append(errs, s.errorf("BucketBy and PartitionBy both given: PartitionBy chooses the bucket"))
	}
	if s.cfg.commitOn {
		if s.part == nil || s.part.layout == "" {
			errs = append(errs, s.errorf("CommitPartitions needs PartitionBy with a time column: the watermark commits a partition by its time"))
		}
		if s.cfg.commitDelay < 0 {
			errs = append(errs, s.errorf("CommitPartitions: negative delay %v", s.cfg.commitDelay))
		}
		for i, p := range s.cfg.policies {
			if p == nil {
				errs = append(errs, s.errorf("CommitPartitions: policy %d is nil", i))
			}
		}
	}
	if s.instance != "" && s.cfg.compact > 0 {
		errs = append(errs, s.errorf("CompactEvery on a job of several processes: two processes restoring one checkpoint would merge its pieces twice"))
	}
	if d := s.cfg.late.dir; d != "" {
		if err := validBucket(d); err != nil {
			errs = append(errs, s.errorf("LateInto: %w", err))
		}
	}
	return errors.Join(errs...)
}

// Advance implements connector.Timed.
func (s *Sink[T]) Advance(wm int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.wm = max(s.wm, wm)
}

// LateRecords counts the records that arrived for a partition the
// watermark had passed (Late), over this Sink's life.
func (s *Sink[T]) LateRecords() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.late
}

// Uncommitted lists the partitions whose commit is decided and not yet
// done (a Metastore outage keeps them here), ascending.
func (s *Sink[T]) Uncommitted() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for p, hp := range s.parts {
		if hp.Due {
			out = append(out, p)
		}
	}
	sort.Strings(out)
	return out
}

// partition returns v's bucket under PartitionBy, and notes the rows of
// epoch in it; a late record goes where Late says. Called with s.mu held.
func (s *Sink[T]) partition(v T, ts int64, epoch uint64) (string, error) {
	p, values, start, err := s.part.of(v, ts)
	if err != nil {
		return "", err
	}
	if !s.cfg.commitOn {
		return p, nil
	}
	if start+s.cfg.commitDelay.Milliseconds() <= s.wm {
		s.late++
		if s.cfg.late.dir != "" {
			return path.Join(s.cfg.late.dir, p), nil
		}
	}
	hp := s.parts[p]
	if hp == nil {
		hp = &hivePart{Path: p, Values: values, Time: start}
		s.parts[p] = hp
	}
	if hp.Lo == 0 {
		hp.Lo = epoch
	}
	hp.Hi = max(hp.Hi, epoch)
	return p, nil
}

// stateElems is the state at checkpoint id's barrier: the pending files,
// the partitions not yet committed, and the watermark. Called with s.mu
// held.
func (s *Sink[T]) stateElems(id uint64) ([][]byte, error) {
	elems := make([]stateElem, 0, len(s.pending)+len(s.parts)+2)
	for _, f := range s.pending {
		elems = append(elems, stateElem{file: f})
	}
	elems = append(elems, stateElem{Run: s.run})
	if s.cfg.commitOn {
		s.wmAt[id] = s.wm
		for _, hp := range s.parts {
			elems = append(elems, stateElem{Partition: hp})
		}
		wm := s.wm
		elems = append(elems, stateElem{Watermark: &wm})
	}
	out := make([][]byte, 0, len(elems))
	for _, e := range elems {
		b, err := json.Marshal(e)
		if err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, nil
}

// restorePartition takes el if it is a partition, the watermark or the
// run. The watermark restored is the oldest of those restored (on several
// processes, a run restores checkpoints of several): a partition any of
// them committed is behind all of them, since it committed on the oldest
// watermark of all processes. A partition's rows are in files the restore
// publishes, so it is due from the run's first checkpoint on (epoch 1:
// the epochs of another process's run, or of the next run on several
// processes, are numbered apart). Called with s.mu held.
func (s *Sink[T]) restorePartition(el stateElem) bool {
	switch {
	case el.Watermark != nil:
		if !s.restoredWm || *el.Watermark < s.wm {
			s.wm = *el.Watermark
		}
		s.restoredWm = true
	case el.Partition != nil:
		if !s.cfg.commitOn {
			return true
		}
		p := el.Partition
		if p.Lo != 0 {
			p.Lo, p.Hi = 1, 1
		}
		if had := s.parts[p.Path]; had != nil {
			p.Due = p.Due || had.Due
			if had.Lo != 0 {
				p.Lo, p.Hi = 1, 1
			}
		}
		s.parts[p.Path] = p
	case el.Run != "":
		s.restoredRuns[el.Run] = true
	default:
		return false
	}
	return true
}

// finished decides the partition commits of checkpoint id, committed and
// its files visible. Called with s.mu held.
func (s *Sink[T]) finished(id uint64) {
	if !s.cfg.commitOn {
		return
	}
	wm, ok := s.wmAt[id]
	for c := range s.wmAt {
		if c <= id {
			delete(s.wmAt, c)
		}
	}
	if !ok {
		return
	}
	if s.all != nil {
		wm = s.oldestWatermark(wm)
	}
	s.decide(id, wm)
}

// wmRecord names the record of an input partition's watermark, on a job of
// several processes: its owner's, after each commit.
func (s *Sink[T]) wmRecord(topic string, p int32) string {
	return fmt.Sprintf("_kord/%s.wm/%s.%d", s.job, topic, p)
}

// oldestWatermark records wm, this process's watermark at a checkpoint
// that committed and whose files are visible, for each input partition it
// owns, and returns the oldest of every input partition's record: the
// watermark of the whole job, with no coordinator (noTime while a
// partition has none). A record is written only by its partition's owner
// (a zombie's late write only lowers it). Called with s.mu held.
func (s *Sink[T]) oldestWatermark(wm int64) int64 {
	ctx, cancel := context.WithTimeout(s.ctx, time.Minute)
	defer cancel()
	if wm != s.wmSent {
		data := []byte(fmt.Sprint(wm))
		for topic, ps := range s.owned {
			for _, p := range ps {
				if err := s.t.put(ctx, s.wmRecord(topic, p), data); err != nil {
					s.log.Warn("filesink: recording the watermark failed; partitions wait", "record", s.wmRecord(topic, p), "err", err)
					return noTime
				}
			}
		}
		s.wmSent = wm
	}
	oldest := wm
	for topic, ps := range s.all {
		for _, p := range ps {
			data, err := s.t.get(ctx, s.wmRecord(topic, p))
			if err != nil {
				return noTime // none yet (fs.ErrNotExist), or unreadable: wait
			}
			var w int64
			if _, err := fmt.Sscan(string(data), &w); err != nil {
				s.log.Warn("filesink: a watermark record is not a number", "record", s.wmRecord(topic, p), "err", err)
				return noTime
			}
			oldest = min(oldest, w)
		}
	}
	return oldest
}

// ScaledState implements connector.ScaledState: two processes restoring
// one checkpoint publish its files twice, which is once; each commits
// its partitions, idempotently, on the oldest watermark of all.
func (s *Sink[T]) ScaledState() {}

// Own implements connector.Owner.
func (s *Sink[T]) Own(owned, all map[string][]int32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.owned, s.all, s.wmSent = owned, all, noTime
}

// decide makes due every partition with rows of an epoch ≤ id that the
// watermark wm has passed (its time plus the delay), and wakes the
// committer. Called with s.mu held.
func (s *Sink[T]) decide(id uint64, wm int64) {
	if !s.cfg.commitOn {
		return
	}
	any := false
	for _, hp := range s.parts {
		if hp.Due {
			any = true
		}
		if hp.Lo == 0 || hp.Lo > id || hp.Time+s.cfg.commitDelay.Milliseconds() > wm {
			continue
		}
		hp.Due, any = true, true
		hp.gen++
		if hp.Hi <= id {
			hp.Lo, hp.Hi = 0, 0
		} else {
			hp.Lo = id + 1
		}
	}
	if any && s.wake != nil {
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
}

// resetCommits starts the incarnation's partition state and committer.
// Called with s.mu held.
func (s *Sink[T]) resetCommits() {
	s.wmAt, s.parts, s.since = map[uint64]int64{}, map[string]*hivePart{}, time.Time{}
	s.wm, s.restoredWm, s.restoredRuns, s.owned, s.all = noTime, false, map[string]bool{}, nil, nil
	if !s.cfg.commitOn {
		return
	}
	if s.retryMin == 0 {
		s.retryMin, s.retryMax = time.Second, 30*time.Second
	}
	s.wake, s.done = make(chan struct{}, 1), make(chan struct{})
	go s.commitLoop(s.ctx, s.wake, s.done)
}

// stopCommits ends the committer, and waits for it.
func (s *Sink[T]) stopCommits() {
	s.mu.Lock()
	done := s.done
	if s.end != nil {
		s.end()
	}
	s.mu.Unlock()
	if done != nil {
		<-done
	}
}

// drainCommits waits, at most the drain time, for the due partitions to
// be committed, unless their commits are failing.
func (s *Sink[T]) drainCommits() {
	deadline := time.Now().Add(s.cfg.drain)
	for time.Now().Before(deadline) {
		s.mu.Lock()
		due := false
		for _, hp := range s.parts {
			due = due || hp.Due
		}
		// A commit failing (a Metastore outage) is not waited for: the
		// checkpoint holds the partition.
		failed := s.err != nil || s.done == nil || !s.since.IsZero()
		s.mu.Unlock()
		if !due || failed {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// commitLoop commits the due partitions, oldest first, until ctx ends.
func (s *Sink[T]) commitLoop(ctx context.Context, wake <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	backoff := s.retryMin
	for {
		p, gen, ok := s.nextDue()
		if !ok {
			select {
			case <-wake:
				continue
			case <-ctx.Done():
				return
			}
		}
		err := s.commitPartition(ctx, p)
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			s.committed(p.Path, gen)
			backoff = s.retryMin
			continue
		}
		if errors.Is(err, keyed.ErrPermanent) {
			s.mu.Lock()
			s.fail(err)
			s.mu.Unlock()
			return
		}
		s.failedCommit(p, err)
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return
		}
		backoff = min(2*backoff, s.retryMax)
	}
}

// nextDue returns the oldest due partition.
func (s *Sink[T]) nextDue() (Partition, uint64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var next *hivePart
	for _, hp := range s.parts {
		if hp.Due && (next == nil || hp.Time < next.Time || (hp.Time == next.Time && hp.Path < next.Path)) {
			next = hp
		}
	}
	if next == nil {
		return Partition{}, 0, false
	}
	p := Partition{Path: next.Path, Columns: s.part.names, Values: next.Values, t: s.t}
	if next.Time != noTime {
		p.Time = time.UnixMilli(next.Time).UTC()
	}
	return p, next.gen, true
}

// commitPartition runs the policies on p, in order.
func (s *Sink[T]) commitPartition(ctx context.Context, p Partition) error {
	hit(pointBeforePartitionCommit)
	for i, pol := range s.cfg.policies {
		if err := pol.CommitPartition(ctx, p); err != nil {
			return fmt.Errorf("partition %s, commit policy %d (%v): %w", p.Path, i, pol, err)
		}
	}
	return nil
}

// committed notes p committed, as decided by decision gen.
func (s *Sink[T]) committed(p string, gen uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	hp := s.parts[p]
	if hp == nil || hp.gen != gen {
		return // decided again meanwhile: commit again
	}
	hp.Due = false
	if hp.Lo == 0 {
		delete(s.parts, p)
	}
	if !s.since.IsZero() {
		s.log.Info("filesink: partition commits succeed again", "target", s.t.String(), "partition", p, "after", time.Since(s.since).Round(time.Second))
		s.since = time.Time{}
	}
}

// failedCommit reports a failed commit: each failure as a warning, and a
// run of failures longer than the transaction timeout as an error (it is
// never fatal: the partitions wait in every checkpoint).
func (s *Sink[T]) failedCommit(p Partition, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	if s.since.IsZero() {
		s.since = now
	}
	waiting := 0
	for _, hp := range s.parts {
		if hp.Due {
			waiting++
		}
	}
	lvl := "warn"
	if now.Sub(s.since) > 5*time.Minute {
		lvl = "error"
	}
	args := []any{"target", s.t.String(), "partition", p.Path, "waiting", waiting, "failing for", now.Sub(s.since).Round(time.Second), "err", err}
	if lvl == "error" {
		s.log.Error("filesink: partition commits keep failing; the job's commits go on, and the partitions are committed when the policy succeeds", args...)
	} else {
		s.log.Warn("filesink: a partition commit failed; retrying", args...)
	}
}
