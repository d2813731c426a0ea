// Package filesink lands a job's records in files, exactly once: JSON
// lines, [Avro] object container files or [Parquet], in a directory or an
// object store's bucket, made visible when the checkpoint that carries
// them commits.
//
// The protocol is Flink's FileSink (a two-phase commit on the checkpoint),
// with kord's one commit decision:
//
//   - In progress. A record goes into a part file of its bucket (a
//     directory chosen by the [Bucket] option) written under a staging name
//     that no reader's glob matches: a leading dot and the suffix
//     ".inprogress" (".part-<job>-<run>-<n>.parquet.inprogress").
//   - At the barrier of checkpoint n, every open part file is closed
//     (Parquet's footer written), fsynced with its directory (on an object
//     store: its PUT completed), and named as pending(n) in checkpoint n's
//     state, all before checkpoint n's metadata becomes durable.
//   - When checkpoint n commits, under the job's one commit decision (its
//     first sink's Commit: the Kafka transaction that carries the commit
//     record), Finish publishes every pending file of a checkpoint ≤ n
//     under its final name in one atomic step: rename(2) and a directory
//     fsync, or a server-side copy and the staging object's delete.
//   - A checkpoint that aborts loses nothing: its pending files stay
//     pending, in the next checkpoint's state, and land with it.
//   - A restore finishes the restored checkpoint's pending files (it
//     committed), idempotently, and deletes every staged file of the job
//     that no checkpoint still claims, before the run's first checkpoint.
//     Part names hold a random run id, unique across restarts and
//     processes.
//
// As the job's only or first sink, the file sink makes the decision
// itself: Commit writes a commit record (the checkpoint and its source
// offsets) in one atomic step under "_kord/<job>.commit" in the target,
// then publishes.
//
// What a reader of "<bucket>/*<ext>" sees: only published files, each
// whole; the output of checkpoint n appears after n committed, within the
// time Finish takes to rename its files (a reader may see some of n's
// files before the others: there is no atomic step over several files).
package filesink

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/kordproject/kord/checkpoint"
	"github.com/kordproject/kord/keyed/connector"
)

// Sink writes records of type T into files of format, in target.
type Sink[T any] struct {
	t        target
	format   Format[T]
	cfg      config
	bucketOf func(T) string // BucketBy's; nil: the root

	mu  sync.Mutex
	ctx context.Context // the incarnation's, for work outside a call's context
	end context.CancelFunc
	job string
	// instance is the process's instance id on a job of several processes
	// (connector.SinkInfo.Instance), "" on one.
	instance string
	log      *slog.Logger
	run      string // this incarnation's id, in every part name
	seq      int
	// open: the in-progress part file of each bucket; closed: those rolled
	// since the last barrier; pending: those staged at a barrier, not yet
	// published.
	open    map[string]*part[T]
	closed  []file
	pending []file
	// cleaned: the staged files no checkpoint claims were deleted this
	// incarnation.
	cleaned bool
	merged  map[string]time.Time // CompactEvery: each bucket's last merge
	err     error                // a failure that ends the incarnation

	// PartitionBy, CommitPartitions (commit.go).
	part    *partitioning[T]
	partErr error
	commits
}

// file is a part file, staged and (once Final is visible) published.
type file struct {
	ID      uint64 `json:"id"` // the checkpoint that staged it; 0 until its barrier
	Staging string `json:"staging"`
	Final   string `json:"final"`
	Rows    int64  `json:"rows"`
	Bucket  string `json:"bucket"`
	// Piece: a piece of a file to come (CompactEvery), never published
	// itself; Pieces: the pieces a merged file holds, deleted once it is
	// published.
	Piece  bool     `json:"piece,omitempty"`
	Pieces []string `json:"pieces,omitempty"`
}

type part[T any] struct {
	file
	f      staged
	w      RowWriter[T]
	opened time.Time
}

type config struct {
	bucketOf     any // func(T) string
	partitions   any // []Column[T]
	commitOn     bool
	commitDelay  time.Duration
	policies     []CommitPolicy
	late         LatePolicy
	drain        time.Duration
	rollSize     int64
	rollInterval time.Duration
	compact      time.Duration
	log          *slog.Logger
}

// Opt configures a Sink.
type Opt func(*config)

// BucketBy chooses each record's bucket: a slash-separated directory
// under the target ("dt=2026-12-03/hr=08", say). Default: the target's
// root. A bucket may not be absolute, hold "..", or start an element with
// a dot.
func BucketBy[T any](f func(T) string) Opt { return func(c *config) { c.bucketOf = f } }

// RollSize ends a part file once it holds about n bytes, within a
// checkpoint. Every part file also ends at every checkpoint. Default: none.
func RollSize(n int64) Opt { return func(c *config) { c.rollSize = n } }

// RollInterval ends a part file once it has been open for d, within a
// checkpoint. Default: none.
func RollInterval(d time.Duration) Opt { return func(c *config) { c.rollInterval = d } }

// CompactEvery makes a bucket's output one file per d instead of one per
// checkpoint (a bulk format such as Parquet must end its file at every
// checkpoint: at the 1 s default, 3,600 small files an hour per bucket).
// Each checkpoint's rows are staged as hidden pieces (Go's gob encoding of
// T, which must have exported fields); at the first checkpoint d after a
// bucket's last merge, and at the run's final checkpoint, the bucket's
// pieces are merged into one file of the format, staged as that
// checkpoint's, published when it commits, and the pieces deleted. A
// restore of a checkpoint before the merge keeps its pieces for the next.
// Rows become visible up to d later; each lands exactly once (Flink's
// FileSink compaction does the same, before the files are committed).
// Default: none, a file per checkpoint and bucket.
func CompactEvery(d time.Duration) Opt { return func(c *config) { c.compact = d } }

// Logger receives the sink's notes. Default: the job's.
func Logger(l *slog.Logger) Opt { return func(c *config) { c.log = l } }

// New returns a sink writing records of format into target.
func New[T any](target Target, format Format[T], opts ...Opt) *Sink[T] {
	s := &Sink[T]{t: target.target(), format: format}
	for _, o := range opts {
		o(&s.cfg)
	}
	s.bucketOf, _ = s.cfg.bucketOf.(func(T) string) // nil, and refused by ValidateSink, if of another type
	if s.cfg.partitions != nil {
		cols, ok := s.cfg.partitions.([]Column[T])
		if !ok {
			var zero T
			s.partErr = fmt.Errorf("PartitionBy takes columns of %T, want columns of %T", s.cfg.partitions, zero)
		} else {
			s.part, s.partErr = newPartitioning(cols)
		}
	}
	if s.cfg.drain == 0 {
		s.cfg.drain = 30 * time.Second
	}
	s.wm = noTime
	return s
}

var (
	_ connector.Sink[int]     = (*Sink[int])(nil)
	_ connector.Follower      = (*Sink[int])(nil)
	_ connector.FinalState    = (*Sink[int])(nil)
	_ connector.Forgetter     = (*Sink[int])(nil)
	_ connector.SinkValidator = (*Sink[int])(nil)
	_ connector.Timed[int]    = (*Sink[int])(nil)
)

// noTime is a record without a time, and no watermark yet.
const noTime = connector.NoTime

func (s *Sink[T]) errorf(format string, args ...any) error {
	return fmt.Errorf("filesink: %s: "+format, append([]any{s.t}, args...)...)
}

// ValidateSink implements keyed's check of a sink before the job runs.
func (s *Sink[T]) ValidateSink(info connector.SinkInfo) error {
	s.mu.Lock()
	s.instance = info.Instance
	s.mu.Unlock()
	var errs []error
	if s.format == nil {
		errs = append(errs, s.errorf("no format"))
	}
	if s.cfg.bucketOf != nil {
		if _, ok := s.cfg.bucketOf.(func(T) string); !ok {
			var zero T
			errs = append(errs, s.errorf("BucketBy takes a %T, want a func(%T) string", s.cfg.bucketOf, zero))
		}
	}
	return errors.Join(append(errs, s.validatePartitions())...)
}

// Reset implements connector.Sink: a new incarnation, with a new run id;
// what the last one left open is abandoned (a restore or the next
// checkpoint deletes it).
func (s *Sink[T]) Reset(ctx context.Context, info connector.SinkInfo) error {
	s.stopCommits()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.abandon()
	s.instance = info.Instance
	if err := s.validatePartitions(); err != nil {
		return err
	}
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		return s.errorf("run id: %w", err)
	}
	s.run, s.seq, s.job, s.instance = hex.EncodeToString(b[:]), 0, info.Job, info.Instance
	s.log = s.cfg.log
	if s.log == nil {
		s.log = info.Logger
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.ctx, s.end = context.WithCancel(context.WithoutCancel(ctx))
	s.open, s.closed, s.pending, s.cleaned, s.err = map[string]*part[T]{}, nil, nil, false, nil
	s.merged = map[string]time.Time{}
	s.resetCommits()
	return nil
}

// abandon closes the open part files without staging them; called with
// s.mu held.
func (s *Sink[T]) abandon() {
	for _, p := range s.open {
		p.f.abandon()
	}
	s.open = nil
	if s.end != nil {
		s.end()
	}
}

// Close implements io.Closer: the open part files are abandoned. With
// CommitPartitions, the partition commits decided are given up to 30 s to
// finish first (those that do not are in the last checkpoint, and commit
// after the next start).
func (s *Sink[T]) Close() error {
	s.drainCommits()
	s.stopCommits()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.abandon()
	return nil
}

// partPrefix starts the base name of every staged file of the job.
func (s *Sink[T]) partPrefix() string { return ".part-" + s.job + "-" }

// Write implements connector.Sink: v, with no event time, goes into its
// bucket's part file.
func (s *Sink[T]) Write(ctx context.Context, epoch uint64, v T) error {
	return s.WriteAt(ctx, epoch, v, noTime)
}

// WriteAt implements connector.Timed: v, of event time ts, goes into its
// bucket's part file.
func (s *Sink[T]) WriteAt(ctx context.Context, epoch uint64, v T, ts int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return s.err
	}
	if s.open == nil {
		return s.errorf("not reset")
	}
	bucket, err := s.bucket(v, ts, epoch)
	if err != nil {
		return s.errorf("record %v: %w", v, err)
	}
	p := s.open[bucket]
	if p == nil {
		var err error
		if p, err = s.startPart(ctx, bucket, s.cfg.compact > 0); err != nil {
			return s.fail(err)
		}
		s.open[bucket] = p
	}
	if err := p.w.Write(v); err != nil {
		return s.fail(s.errorf("%s: %w", p.Staging, err))
	}
	p.Rows++
	if (s.cfg.rollSize > 0 && p.w.Size() >= s.cfg.rollSize) || (s.cfg.rollInterval > 0 && time.Since(p.opened) >= s.cfg.rollInterval) {
		delete(s.open, bucket)
		if err := s.closePart(p); err != nil {
			return s.fail(err)
		}
	}
	return nil
}

// fail ends the incarnation's use with err; called with s.mu held.
func (s *Sink[T]) fail(err error) error {
	s.err = err
	return err
}

// bucket returns v's bucket: BucketBy's, or its partition's (noting the
// partition, or sending a late record where LateInto says). Called with
// s.mu held.
func (s *Sink[T]) bucket(v T, ts int64, epoch uint64) (string, error) {
	if s.part != nil {
		return s.partition(v, ts, epoch)
	}
	if s.bucketOf == nil {
		return "", nil
	}
	b := s.bucketOf(v)
	return b, validBucket(b)
}

func validBucket(b string) error {
	if b == "" {
		return nil
	}
	if strings.HasPrefix(b, "/") {
		return fmt.Errorf("bucket %q is absolute", b)
	}
	for _, e := range strings.Split(b, "/") {
		if e == "" || e == ".." || strings.HasPrefix(e, ".") {
			return fmt.Errorf("bucket %q: an element is empty, \"..\" or starts with a dot", b)
		}
	}
	return nil
}

// startPart starts a part file in bucket; called with s.mu held.
func (s *Sink[T]) startPart(ctx context.Context, bucket string, piece bool) (*part[T], error) {
	s.seq++
	format := s.format
	if piece {
		format = pieces[T]{}
	}
	base := fmt.Sprintf("part-%s-%s-%06d%s", s.job, s.run, s.seq, format.Ext())
	p := &part[T]{file: file{Staging: path.Join(bucket, "."+base+".inprogress"), Final: path.Join(bucket, base), Bucket: bucket, Piece: piece}, opened: time.Now()}
	f, err := s.t.create(ctx, p.Staging)
	if err != nil {
		return nil, s.errorf("creating %s: %w", p.Staging, err)
	}
	w, err := format.NewWriter(f)
	if err != nil {
		f.abandon()
		return nil, s.errorf("%s: %w", p.Staging, err)
	}
	p.f, p.w = f, w
	return p, nil
}

// closePart ends p and makes it durable: it joins the closed files, to be
// staged at the next barrier. Called with s.mu held.
func (s *Sink[T]) closePart(p *part[T]) error {
	if err := p.w.Close(); err != nil {
		p.f.abandon()
		return s.errorf("closing %s: %w", p.Staging, err)
	}
	if err := p.f.finish(); err != nil {
		// Never retried on the same file: after a failed fsync what the
		// file holds is unknown (PostgreSQL's fsyncgate). The run fails and
		// replays the records from the last checkpoint.
		return s.errorf("making %s durable: %w", p.Staging, err)
	}
	s.closed = append(s.closed, p.file)
	return nil
}

// SnapshotState implements connector.OperatorState: at checkpoint id's
// barrier, every open part file is closed and made durable (with
// CompactEvery, the pieces due are merged), and the state names every
// file staged and not yet published, each with the checkpoint that staged
// it.
func (s *Sink[T]) SnapshotState(id uint64) ([][]byte, error) { return s.snapshot(id, false) }

// SnapshotFinal implements connector.FinalState: SnapshotState at the
// run's final checkpoint, which merges every bucket's pieces.
func (s *Sink[T]) SnapshotFinal(id uint64) ([][]byte, error) { return s.snapshot(id, true) }

func (s *Sink[T]) snapshot(id uint64, final bool) ([][]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return nil, s.err
	}
	if !s.cleaned {
		if err := s.clean(); err != nil {
			return nil, s.fail(err)
		}
	}
	for b, p := range s.open {
		delete(s.open, b)
		if err := s.closePart(p); err != nil {
			return nil, s.fail(err)
		}
	}
	hit(pointAfterClose)
	for _, f := range s.closed {
		f.ID = id
		s.pending = append(s.pending, f)
	}
	s.closed = nil
	if s.cfg.compact > 0 {
		if err := s.compact(id, final); err != nil {
			return nil, s.fail(err)
		}
	}
	return s.stateElems(id)
}

// clean deletes the job's staged files that no checkpoint claims: those
// of other runs (a restore published the restored checkpoint's, and the
// recovery decision, made before, excludes every other checkpoint of
// theirs). Called once per incarnation, at its first barrier, with s.mu
// held.
func (s *Sink[T]) clean() error {
	names, err := s.t.list(s.ctx, s.partPrefix())
	if err != nil {
		return s.errorf("listing staged files: %w", err)
	}
	mine := s.partPrefix() + s.run + "-"
	claimed := map[string]bool{} // pieces a restore carried over
	for _, f := range s.pending {
		claimed[f.Staging] = true
	}
	for _, n := range names {
		base := path.Base(n)
		if strings.HasSuffix(base, ".inprogress") && !strings.HasPrefix(base, mine) && !claimed[n] && s.mayClean(base) {
			if err := s.t.remove(s.ctx, n); err != nil {
				return s.errorf("deleting %s, which no checkpoint claims: %w", n, err)
			}
			s.log.Info("filesink: deleted a staged file no checkpoint claims", "file", n)
		}
	}
	s.cleaned = true
	return nil
}

// mayClean reports whether the staged file base, of another run, may be
// deleted: on one process, every other run is over; on several, only the
// runs whose state this one restored are (the others may be another
// process's, in progress). Called with s.mu held.
func (s *Sink[T]) mayClean(base string) bool {
	if s.instance == "" {
		return true
	}
	run, _, _ := strings.Cut(strings.TrimPrefix(base, s.partPrefix()), "-")
	return s.restoredRuns[run]
}

// RestoreState implements connector.OperatorState: the restored
// checkpoint committed, so every file it names is published now (again,
// for those that were).
func (s *Sink[T]) RestoreState(elements [][]byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var files []file
	for _, e := range elements {
		var el stateElem
		if err := json.Unmarshal(e, &el); err != nil {
			return s.errorf("restoring a pending file %q: %w", e, err)
		}
		if s.restorePartition(el) {
			continue
		}
		f := el.file
		if f.Piece {
			s.pending = append(s.pending, f) // for the next merge
			continue
		}
		files = append(files, f)
	}
	ctx, cancel := context.WithTimeout(s.ctx, 5*time.Minute)
	defer cancel()
	if err := s.publish(ctx, files); err != nil {
		return err
	}
	// Every row the restored checkpoint names is in a file visible now. On
	// several processes the decision waits for the oldest watermark of
	// all (the first commit's); what was due is committed again.
	wm := s.wm
	if s.instance != "" {
		wm = noTime
	}
	s.decide(math.MaxUint64, wm)
	return nil
}

// publish makes files visible, in order, and deletes the pieces each
// holds; called with s.mu held.
func (s *Sink[T]) publish(ctx context.Context, files []file) error {
	for _, f := range files {
		if err := s.t.publish(ctx, f.Staging, f.Final); err != nil {
			return s.errorf("publishing %s of checkpoint %d as %s: %w", f.Staging, f.ID, f.Final, err)
		}
		for _, p := range f.Pieces {
			if err := s.t.remove(ctx, p); err != nil {
				return s.errorf("deleting piece %s of %s: %w", p, f.Final, err)
			}
		}
		hit(pointMidPublish)
	}
	return nil
}

// Finish implements connector.Follower: the files of every checkpoint ≤
// ref.ID become visible.
func (s *Sink[T]) Finish(ctx context.Context, ref checkpoint.Ref) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var due, rest []file
	for _, f := range s.pending {
		if f.ID <= ref.ID && !f.Piece {
			due = append(due, f)
		} else {
			rest = append(rest, f)
		}
	}
	if err := s.publish(ctx, due); err != nil {
		return s.fail(err)
	}
	s.pending = rest
	s.finished(ref.ID)
	return nil
}

// commitRecord is what the sink records as committed when it is the job's
// first sink.
type commitRecord struct {
	Ref     checkpoint.Ref               `json:"ref"`
	Offsets []checkpoint.PartitionOffset `json:"offsets"`
}

func (s *Sink[T]) recordName() string { return "_kord/" + s.job + ".commit" }

// Commit implements connector.Sink, for a file sink that is the job's
// first sink: the commit record (ref, offsets) is written in one atomic
// step, then the files are published.
func (s *Sink[T]) Commit(ctx context.Context, ref checkpoint.Ref, offsets []checkpoint.PartitionOffset) error {
	data, err := json.Marshal(commitRecord{Ref: ref, Offsets: offsets})
	if err != nil {
		return err
	}
	if err := s.t.put(ctx, s.recordName(), data); err != nil {
		return s.errorf("writing the commit record %s: %w", s.recordName(), err)
	}
	return s.Finish(ctx, ref)
}

// Recorded implements connector.Sink: the commit record, nil if none.
func (s *Sink[T]) Recorded(ctx context.Context) (*connector.Recorded, error) {
	data, err := s.t.get(ctx, s.recordName())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, s.errorf("reading the commit record %s: %w", s.recordName(), err)
	}
	var r commitRecord
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, s.errorf("commit record %s: %w", s.recordName(), err)
	}
	return &connector.Recorded{Ref: r.Ref, Offsets: r.Offsets, Where: fmt.Sprintf("%s in %s", s.recordName(), s.t)}, nil
}

// Forget implements connector.Forgetter: the commit record is deleted
// (the published files stay).
func (s *Sink[T]) Forget(ctx context.Context, info connector.SinkInfo) error {
	s.mu.Lock()
	s.job = info.Job
	s.mu.Unlock()
	return s.t.remove(ctx, s.recordName())
}
