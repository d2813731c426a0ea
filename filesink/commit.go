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
	elems := make([]stateElem, 0, len(s.pending)+len(s.parts)+1)
	for _, f := range s.pending {
		elems = append(elems, stateElem{file: f})
	}
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

// restorePartition takes el if it is a partition or the watermark.
// Called with s.mu held.
func (s *Sink[T]) restorePartition(el stateElem) bool {
	switch {
	case el.Watermark != nil:
		s.wm = max(s.wm, *el.Watermark)
	case el.Partition != nil:
		if s.cfg.commitOn {
			s.parts[el.Partition.Path] = el.Partition
		}
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
	if ok {
		s.decide(id, wm)
	}
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
	s.wm = noTime
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
