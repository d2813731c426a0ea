package checkpoint

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kordproject/kord/consumer"
	"github.com/kordproject/kord/internal/failpoint"
	"github.com/kordproject/kord/producer"
)

// Failpoints of the checkpoint lifecycle, in order (KORD_FAILPOINTS; see
// internal/failpoint). Crash tests kill the process at each.
const (
	FailAfterBarrier        = "after-barrier"
	FailAfterSnapshots      = "after-snapshots-durable"
	FailAfterMetadata       = "after-metadata-durable"
	FailBeforeSendOffsets   = "before-send-offsets"
	FailAfterSendOffsets    = "after-send-offsets"
	FailBeforeCommit        = "before-commit"
	FailAfterCommit         = "after-commit"
	FailAfterMarker         = "after-committed-marker"
	FailDuringRestore       = "during-restore"
	FailAfterFreshCommitted = "after-fresh-start-committed"
	// The Sim failpoints are not crashes: each sends a transactional
	// request with a deadline too short to see its answer, so its outcome
	// is unknown to the job, which must end the producer and recover from
	// what Kafka recorded with a new one (DESIGN.md, on KIP-890).
	//
	// SimCommitUnknown: the CommitTransaction of a checkpoint.
	SimCommitUnknown = "sim-commit-unknown"
	// SimSendOffsetsUnknown: the SendOffsetsToTransaction of a checkpoint.
	SimSendOffsetsUnknown = "sim-send-offsets-unknown"
	// SimAbortUnknown: the abort path. At a checkpoint's commit, the
	// transaction is treated as needing an abort (as after an abortable
	// error from SendOffsetsToTransaction) and AbortTransaction is sent.
	SimAbortUnknown = "sim-abort-unknown"
)

// SimCommitStall simulates a commit whose answer does not come: instead of
// CommitTransaction, the job waits out the commit's deadline (the
// checkpoint timeout, or a graceful stop's). Nothing is sent, so Kafka
// keeps the previous record.
const SimCommitStall = "sim-commit-stall"

// SimUnknown lists the Sim failpoints that end at once.
var SimUnknown = []string{SimSendOffsetsUnknown, SimCommitUnknown, SimAbortUnknown}

// errSimAbortable stands for an abortable error, for SimAbortUnknown.
var errSimAbortable = errors.New("checkpoint: simulated abortable error")

// Failpoints lists the crash failpoints in lifecycle order.
var Failpoints = []string{FailAfterBarrier, FailAfterSnapshots, FailAfterMetadata, FailBeforeSendOffsets,
	FailAfterSendOffsets, FailBeforeCommit, FailAfterCommit, FailAfterMarker, FailDuringRestore}

// ErrStopTimeout means a graceful stop did not finish within StopTimeout.
var ErrStopTimeout = errors.New("checkpoint: graceful stop timed out")

// CountJob is the first exactly-once slice of kord: one process reads every
// partition of one topic, counts records per record key (state laid out by
// key group = Kafka partition), writes one output record per input record
// through one transactional producer, and checkpoints to a local directory
// with Kafka recording which checkpoint committed (DESIGN.md, "Exactly-once
// to Kafka with librdkafka"). The keyed engine generalizes it.
type CountJob struct {
	// Name names the job: transactional.id "kord.<Name>", commit group
	// "kord.<Name>.commit".
	Name    string
	Brokers string
	Input   string
	Output  string
	// Dir is the checkpoint directory (locked while the job runs).
	Dir string
	// FS defaults to OSFS().
	FS         FS
	Checkpoint Config
	// Emit returns the output value for an input record given the key's
	// count after it (1 for the key's first record).
	Emit func(rec consumer.Record, count int64) []byte
	// EpochBuffer bounds the output records held between a barrier and its
	// commit; when full, the job stops reading (backpressure). The bound is
	// exact: with a checkpoint in flight the job reads no more input
	// records than the buffer has room for (one output record each).
	// Default 100,000.
	EpochBuffer int
	// AcceptDuplicates: see RecoveryInput.AcceptDuplicates.
	AcceptDuplicates bool
	// StopTimeout bounds a graceful stop (Close or ctx cancelled): the
	// final checkpoint, and any recovery it needs, must commit within it
	// from the moment ctx is done, or Run returns ErrStopTimeout. Kafka
	// calls (the commit, produce, InitTransactions of a recovery) are
	// cancelled at the deadline; their outcome is then unknown, and the
	// next start recovers from what Kafka recorded (until then a
	// transaction may stay open, up to the transaction timeout). Not
	// cancellable, and so added to the bound: a checkpoint file write or
	// directory fsync in progress, and closing the producer (up to 5 s,
	// librdkafka flushing and closing) and the consumer. Default 30s.
	StopTimeout time.Duration
	// ProducerSettings and ConsumerSettings pass librdkafka settings.
	// transactional.id and transaction.timeout.ms are derived and refused
	// here; message.timeout.ms defaults to the transaction timeout and may
	// be set lower, not higher.
	ProducerSettings map[string]string
	ConsumerSettings map[string]string
	Logger           *slog.Logger
	// OnCommitted, if set, is called after each checkpoint commits (tests,
	// metrics).
	OnCommitted func(id uint64)

	commits uint64 // checkpoints committed by Run so far (Run's goroutine only)
}

// TransactionalID returns the job's transactional.id.
func (j *CountJob) TransactionalID() string { return "kord." + j.Name }

// CommitGroup returns the job's commit group, which never has members.
func (j *CountJob) CommitGroup() string { return "kord." + j.Name + ".commit" }

// TransactionTimeout is Checkpoint.TransactionTimeout().
func (j *CountJob) TransactionTimeout() time.Duration { return j.Checkpoint.TransactionTimeout() }

// Validate checks the job's declaration.
func (j *CountJob) Validate() error {
	var errs []error
	if j.Name == "" || !validField(j.Name) {
		errs = append(errs, fmt.Errorf("checkpoint: job name %q must be non-empty without ';' or '='", j.Name))
	}
	if j.Brokers == "" {
		errs = append(errs, errors.New("checkpoint: no brokers"))
	}
	if j.Input == "" || j.Output == "" {
		errs = append(errs, errors.New("checkpoint: input and output topics are required"))
	}
	if j.Input == j.Output && j.Input != "" {
		errs = append(errs, fmt.Errorf("checkpoint: input and output are both %q", j.Input))
	}
	if j.Dir == "" {
		errs = append(errs, errors.New("checkpoint: no checkpoint directory"))
	}
	if j.Emit == nil {
		errs = append(errs, errors.New("checkpoint: no Emit function"))
	}
	if err := j.Checkpoint.Validate(); err != nil {
		errs = append(errs, err)
	}
	if _, ok := j.ProducerSettings["transactional.id"]; ok {
		errs = append(errs, errors.New("checkpoint: producer setting transactional.id is derived from the job name; remove it"))
	}
	if _, ok := j.ProducerSettings["transaction.timeout.ms"]; ok {
		errs = append(errs, fmt.Errorf("checkpoint: producer setting transaction.timeout.ms is derived from the checkpoint settings (%v now; interval, timeout, min pause and tolerable failures, capped at TransactionMaxTimeout); remove it and change those instead",
			j.TransactionTimeout()))
	}
	// message.timeout.ms must not exceed the transaction timeout (DESIGN.md,
	// "Timeouts"): a record still being retried when the transaction times
	// out would outlive it. A shorter one only fails a produce sooner (an
	// abort and a replay), so it is accepted.
	if v, ok := j.ProducerSettings["message.timeout.ms"]; ok {
		ms, err := strconv.ParseInt(v, 10, 64)
		switch {
		case err != nil || ms < 1:
			errs = append(errs, fmt.Errorf("checkpoint: producer setting message.timeout.ms %q: want a positive number of milliseconds", v))
		case time.Duration(ms)*time.Millisecond > j.TransactionTimeout():
			errs = append(errs, fmt.Errorf("checkpoint: producer setting message.timeout.ms %d exceeds the transaction timeout %d ms (transaction.timeout.ms, derived from the checkpoint settings); lower it or leave it unset (it defaults to the transaction timeout)",
				ms, j.TransactionTimeout().Milliseconds()))
		}
	}
	return errors.Join(errs...)
}

// testHookBuffered, set by tests only, sees the epoch buffer's length after
// each read while a checkpoint is in flight.
var testHookBuffered func(n int)

// errRecover asks Run to start over from what Kafka recorded, with a new
// producer.
var errRecover = errors.New("checkpoint: recovering from Kafka's commit record")

// Run runs the job until ctx is done (then stops gracefully: a final
// checkpoint is committed and no transaction is left open) or a fatal error.
// A commit whose outcome is unknown restarts the job in-process from what
// Kafka recorded, with a new producer.
func (j *CountJob) Run(ctx context.Context) error {
	if err := j.Validate(); err != nil {
		return err
	}
	if j.FS == nil {
		j.FS = OSFS()
	}
	if j.Logger == nil {
		j.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if j.EpochBuffer <= 0 {
		j.EpochBuffer = 100_000
	}
	if j.StopTimeout <= 0 {
		j.StopTimeout = 30 * time.Second
	}
	store, err := OpenStore(j.FS, j.Dir)
	if err != nil {
		return err
	}
	defer store.Close()
	// Work goes on after ctx is done, for the final checkpoint, until the
	// stop deadline.
	wctx, stopWork := stopContext(ctx, j.StopTimeout)
	defer stopWork()
	recovers := 0
	for {
		run := newRunID()
		before := j.commits
		err := j.runOnce(ctx, wctx, store, run)
		if j.commits > before {
			recovers = 0 // a run that committed ends a row of recoveries
		}
		if err != nil && wctx.Err() != nil {
			// The stop deadline passed: no more recovery. The loop's own
			// ErrStopTimeout names the checkpoint in flight; anything else
			// (a cancelled commit, say) is reported under ErrStopTimeout.
			if errors.Is(err, ErrStopTimeout) && !errors.Is(err, errRecover) {
				return err
			}
			return fmt.Errorf("%w after %v: %s; the next start recovers from what Kafka recorded", ErrStopTimeout, j.StopTimeout,
				strings.TrimPrefix(err.Error(), errRecover.Error()+": "))
		}
		var te *producer.TxnError
		if !errors.Is(err, errRecover) || errors.Is(err, producer.ErrFenced) || (errors.As(err, &te) && te.Fatal) {
			// Fencing and other fatal producer errors end the job: a newer
			// incarnation owns the transactional.id.
			return err
		}
		recovers++
		if recovers > 10 {
			return fmt.Errorf("checkpoint: job %s: gave up after %d recoveries in a row: %w", j.Name, recovers, err)
		}
		// Also when stopping: the new run restores what Kafka recorded and
		// then commits a final checkpoint, so that the stop leaves no
		// transaction open and the failed checkpoint's output is not lost
		// to the stop.
		j.Logger.Warn("kord job: recovering", "job", j.Name, "err", err)
	}
}

// stopContext returns a context that ctx's cancellation does not cancel, but
// that is cancelled (cause ErrStopTimeout) stop after ctx is done, and a
// function that cancels it and ends its goroutine.
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

// countState is the keyed state: per key group (= input partition), per key,
// the count.
type countState map[int32]map[string]int64

// epoch is one checkpoint in flight.
type epoch struct {
	id        uint64
	final     bool
	positions []consumer.Position
	files     []FileRef
	done      chan snapshotResult
}

type snapshotResult struct {
	id    uint64
	files []FileRef
	err   error
}

// runOnce runs one incarnation: a new producer and source, recovery, the
// loop. ctx done asks for a graceful stop; wctx bounds the work (see
// stopContext).
func (j *CountJob) runOnce(ctx, wctx context.Context, store *Store, run string) (err error) {
	log := j.Logger.With("job", j.Name, "run", run)
	pops := []producer.Opt{
		producer.Brokers(j.Brokers), producer.TransactionalID(j.TransactionalID()), producer.Logger(j.Logger),
		producer.CloseTimeout(5 * time.Second),
		producer.Set("transaction.timeout.ms", strconv.FormatInt(j.TransactionTimeout().Milliseconds(), 10)),
		producer.Set("message.timeout.ms", strconv.FormatInt(j.TransactionTimeout().Milliseconds(), 10)),
	}
	for k, v := range j.ProducerSettings {
		pops = append(pops, producer.Set(k, v))
	}
	p, err := producer.New(producer.Bytes(), producer.Bytes(), pops...)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := p.Close(); cerr != nil && err == nil {
			log.Warn("kord job: producer close", "err", cerr)
		}
	}()
	cops := []consumer.Opt{consumer.Brokers(j.Brokers), consumer.Group(j.CommitGroup()), consumer.Logger(j.Logger)}
	for k, v := range j.ConsumerSettings {
		cops = append(cops, consumer.Set(k, v))
	}
	src, err := consumer.New(cops...)
	if err != nil {
		return err
	}
	defer src.Close()

	// Start: fence older incarnations, then read what Kafka recorded. A stop
	// requested meanwhile is honoured after startup, by the loop's final
	// checkpoint, so that startup never leaves a transaction open.
	ictx, cancel := context.WithTimeout(wctx, 60*time.Second)
	defer cancel()
	if err := p.InitTransactions(ictx); err != nil {
		return err
	}
	failpoint.Hit(FailDuringRestore)
	state, positions, committedID, err := j.recover(ictx, store, src, p, run, log)
	if err != nil {
		return err
	}
	if err := src.Assign(ictx, positions); err != nil {
		return fmt.Errorf("checkpoint: job %s: restoring checkpoint %d: %w", j.Name, committedID, err)
	}
	if err := p.BeginTransaction(); err != nil {
		return err
	}
	log.Info("kord job: running", "checkpoint", committedID, "partitions", len(positions))
	return j.loop(ctx, wctx, store, src, p, run, state, committedID, log)
}

// recover decides where to start and returns the restored state and
// positions and the committed checkpoint id.
func (j *CountJob) recover(ctx context.Context, store *Store, src *consumer.Source, p *producer.Producer[[]byte, []byte], run string, log *slog.Logger) (countState, []consumer.Position, uint64, error) {
	parts, err := src.Partitions(ctx, j.Input)
	if err != nil {
		return nil, nil, 0, err
	}
	tps := make([]consumer.TopicPartition, len(parts))
	for i, pid := range parts {
		tps[i] = consumer.TopicPartition{Topic: j.Input, Partition: pid}
	}
	committed, err := src.GroupOffsets(ctx, j.CommitGroup(), tps)
	if err != nil {
		return nil, nil, 0, err
	}
	md := make([]string, len(committed))
	for i, c := range committed {
		md[i] = c.Metadata
	}
	rec, err := CommitRecordOf(md)
	if err != nil {
		return nil, nil, 0, fmt.Errorf("checkpoint: commit group %s: %w", j.CommitGroup(), err)
	}
	local, err := ListCheckpoints(store)
	if err != nil {
		return nil, nil, 0, err
	}
	var marker *CheckpointRef
	if m, ok, err := ReadCommitted(store); err != nil {
		log.Warn("kord job: local committed marker unreadable", "err", err)
	} else if ok {
		marker = &m
	}
	d, err := Decide(RecoveryInput{Record: rec, Local: local, Marker: marker, AcceptDuplicates: j.AcceptDuplicates,
		Valid: func(r CheckpointRef) error { _, _, err := ReadCheckpoint(store, r.Run, r.ID); return err }})
	if err != nil {
		return nil, nil, 0, fmt.Errorf("checkpoint: job %s in %s: %w", j.Name, j.Dir, err)
	}
	log.Info("kord job: recovery", "decision", d.Note, "checkpoint", d.Ref.String())

	if d.Action == Fresh {
		positions, err := src.Resolve(ctx, j.Input, consumer.Earliest)
		if err != nil {
			return nil, nil, 0, err
		}
		m := &Metadata{Run: run, ID: 0, Created: time.Now(), MaxParallelism: len(parts), Offsets: toOffsets(positions)}
		if err := WriteCheckpoint(store, m, nil); err != nil {
			return nil, nil, 0, err
		}
		if err := p.BeginTransaction(); err != nil {
			return nil, nil, 0, err
		}
		if err := j.commit(ctx, p, run, 0, positions); err != nil {
			// As for any checkpoint: a new producer, then what Kafka
			// recorded (this checkpoint 0, or none and a fresh start again).
			return nil, nil, 0, fmt.Errorf("%w: commit of the fresh start: %w", errRecover, j.abortIfRequired(ctx, p, err))
		}
		if err := SetCommitted(store, CheckpointRef{Run: run, ID: 0}); err != nil {
			return nil, nil, 0, err
		}
		failpoint.Hit(FailAfterFreshCommitted)
		return countState{}, positions, 0, nil
	}

	m, files, err := ReadCheckpoint(store, d.Ref.Run, d.Ref.ID)
	if err != nil {
		return nil, nil, 0, err
	}
	if !d.Fallback {
		if err := checkGroupOffsets(j.CommitGroup(), d.Ref, m.Offsets, committed); err != nil {
			return nil, nil, 0, err
		}
	}
	state := countState{}
	for _, f := range m.Files {
		entries, err := DecodeKeyGroup(store.Path(f.Name), files[f.Name])
		if err != nil {
			return nil, nil, 0, err
		}
		kg := map[string]int64{}
		for _, e := range entries {
			if len(e.Value) != 8 {
				return nil, nil, 0, fmt.Errorf("checkpoint: %s: count of key %x is %d bytes, want 8", store.Path(f.Name), e.Key, len(e.Value))
			}
			kg[string(e.Key)] = int64(binary.BigEndian.Uint64(e.Value))
		}
		state[int32(f.KeyGroup)] = kg
	}
	positions := make([]consumer.Position, len(m.Offsets))
	for i, o := range m.Offsets {
		positions[i] = consumer.Position{Topic: o.Topic, Partition: o.Partition, Offset: o.Offset}
	}
	// Partitions added since the checkpoint start from their log start.
	have := map[int32]bool{}
	for _, o := range positions {
		have[o.Partition] = true
	}
	for _, pid := range parts {
		if !have[pid] {
			low, _, err := src.Watermarks(ctx, consumer.TopicPartition{Topic: j.Input, Partition: pid})
			if err != nil {
				return nil, nil, 0, err
			}
			positions = append(positions, consumer.Position{Topic: j.Input, Partition: pid, Offset: low})
		}
	}
	return state, positions, d.Ref.ID, nil
}

// checkGroupOffsets checks that the commit group's offsets are exactly the
// restored checkpoint's: anything else means the two were not written
// together. committed holds the group's offsets for every partition of the
// input topic (-1: none). Both directions count:
//   - a partition in the checkpoint must have the same offset in the group
//     (every commit sends the offsets of every partition its checkpoint
//     lists, so a missing one is a mismatch too);
//   - a partition with an offset in the group must be in the checkpoint.
//     A partition added to the topic after the checkpoint was taken is not
//     in it, but no commit of ours ever named it either, so the group has no
//     offset for it and it passes; an offset there was written by something
//     other than this checkpoint's commit.
func checkGroupOffsets(group string, ref CheckpointRef, ckpt []PartitionOffset, committed []consumer.Committed) error {
	want := make(map[consumer.TopicPartition]int64, len(ckpt))
	for _, o := range ckpt {
		want[consumer.TopicPartition{Topic: o.Topic, Partition: o.Partition}] = o.Offset
	}
	got := make(map[consumer.TopicPartition]int64, len(committed))
	for _, c := range committed {
		if c.Offset >= 0 {
			got[consumer.TopicPartition{Topic: c.Topic, Partition: c.Partition}] = c.Offset
		}
	}
	var errs []error
	for _, o := range ckpt {
		tp := consumer.TopicPartition{Topic: o.Topic, Partition: o.Partition}
		if g, ok := got[tp]; !ok {
			errs = append(errs, fmt.Errorf("%w: %s has no offset in group %s, %d in checkpoint %s", ErrOffsetsDiffer, tp, group, o.Offset, ref))
		} else if g != o.Offset {
			errs = append(errs, fmt.Errorf("%w: %s is at %d in group %s, %d in checkpoint %s", ErrOffsetsDiffer, tp, g, group, o.Offset, ref))
		}
	}
	for _, c := range committed {
		tp := consumer.TopicPartition{Topic: c.Topic, Partition: c.Partition}
		if _, ok := want[tp]; !ok && c.Offset >= 0 {
			errs = append(errs, fmt.Errorf("%w: %s is at %d in group %s but not in checkpoint %s", ErrOffsetsDiffer, tp, c.Offset, group, ref))
		}
	}
	return errors.Join(errs...)
}

func toOffsets(ps []consumer.Position) []PartitionOffset {
	out := make([]PartitionOffset, len(ps))
	for i, p := range ps {
		out[i] = PartitionOffset{Topic: p.Topic, Partition: p.Partition, Offset: p.Offset}
	}
	return out
}

// commit sends the checkpoint's offsets with its commit record and commits
// the open transaction. Any error means the outcome may be unknown: the
// caller must not retry on this producer.
func (j *CountJob) commit(ctx context.Context, p *producer.Producer[[]byte, []byte], run string, id uint64, positions []consumer.Position) error {
	meta := CommitRecord{Run: run, Checkpoint: id, Job: j.Name}.String()
	offs := make([]producer.Offset, len(positions))
	for i, pos := range positions {
		offs[i] = producer.Offset{Topic: pos.Topic, Partition: pos.Partition, Offset: pos.Offset, Metadata: meta}
	}
	failpoint.Hit(FailBeforeSendOffsets)
	cctx, cancel := context.WithTimeout(ctx, j.Checkpoint.withDefaults().Timeout)
	defer cancel()
	if failpoint.Active(SimAbortUnknown) {
		return fmt.Errorf("checkpoint %d: send offsets: %w", id, errSimAbortable)
	}
	if failpoint.Active(SimSendOffsetsUnknown) {
		// Send the offsets but give up on the answer at once.
		sctx, scancel := context.WithTimeout(ctx, time.Millisecond)
		err := p.SendOffsetsToTransaction(sctx, j.CommitGroup(), offs)
		scancel()
		return fmt.Errorf("checkpoint %d: simulated unknown send-offsets outcome (send offsets returned %v)", id, err)
	}
	if err := p.SendOffsetsToTransaction(cctx, j.CommitGroup(), offs); err != nil {
		return err
	}
	failpoint.Hit(FailAfterSendOffsets)
	failpoint.Hit(FailBeforeCommit)
	if failpoint.Active(SimCommitStall) {
		<-cctx.Done()
		return fmt.Errorf("checkpoint %d: simulated stalled commit: %w", id, context.Cause(cctx))
	}
	if failpoint.Active(SimCommitUnknown) {
		// Send the commit but give up on its answer at once.
		sctx, scancel := context.WithTimeout(ctx, time.Millisecond)
		err := p.CommitTransaction(sctx)
		scancel()
		return fmt.Errorf("checkpoint %d: simulated unknown commit outcome (commit returned %v)", id, err)
	}
	if err := p.CommitTransaction(cctx); err != nil {
		return err
	}
	failpoint.Hit(FailAfterCommit)
	return nil
}

// abortIfRequired aborts on p when err requires it, bounded by the
// checkpoint timeout (see producer.AbortIfRequired).
func (j *CountJob) abortIfRequired(ctx context.Context, p *producer.Producer[[]byte, []byte], err error) error {
	if errors.Is(err, errSimAbortable) {
		// SimAbortUnknown: send the abort but give up on its answer at once.
		sctx, scancel := context.WithTimeout(ctx, time.Millisecond)
		aerr := p.AbortTransaction(sctx)
		scancel()
		return fmt.Errorf("simulated unknown abort outcome (abort returned %v) after: %w", aerr, err)
	}
	actx, cancel := context.WithTimeout(ctx, j.Checkpoint.withDefaults().Timeout)
	defer cancel()
	return p.AbortIfRequired(actx, err)
}

func (j *CountJob) loop(ctx, wctx context.Context, store *Store, src *consumer.Source, p *producer.Producer[[]byte, []byte], run string, state countState, committedID uint64, log *slog.Logger) error {
	lc, err := NewLifecycle(j.Checkpoint, 1, committedID, time.Now())
	if err != nil {
		return err
	}
	// Snapshot goroutines end before the loop returns.
	var snaps sync.WaitGroup
	defer snaps.Wait()
	var (
		cur      *epoch
		buffer   []producer.Record[[]byte, []byte]
		stopping bool
	)
	produce := func(r producer.Record[[]byte, []byte]) error {
		err := p.Produce(wctx, r, nil)
		if producer.RequiresAbort(err) {
			// The transaction failed under us: abort it here (a zombie is
			// refused as fenced and stops), then recover from Kafka.
			err = j.abortIfRequired(wctx, p, err)
			if !errors.Is(err, producer.ErrFenced) {
				err = fmt.Errorf("%w: produce: %w", errRecover, err)
			}
		}
		return err
	}
	drain := func() error {
		for _, r := range buffer {
			if err := produce(r); err != nil {
				return err
			}
		}
		buffer = buffer[:0]
		return nil
	}

	var handle func(effs []Effect) (bool, error)
	handle = func(effs []Effect) (bool, error) {
		for _, e := range effs {
			switch e.Kind {
			case Trigger:
				// The barrier: offsets and state are exactly those after the
				// last record processed before it.
				cur = &epoch{id: e.ID, final: e.Final, positions: src.Positions(), done: make(chan snapshotResult, 1)}
				failpoint.Hit(FailAfterBarrier)
				snap := cloneState(state)
				snaps.Add(1)
				go func(id uint64, done chan snapshotResult) {
					defer snaps.Done()
					j.snapshot(store, run, id, snap, done)
				}(e.ID, cur.done)
			case WriteMetadata:
				m := &Metadata{Run: run, ID: e.ID, Created: time.Now(), MaxParallelism: len(cur.positions), Offsets: toOffsets(cur.positions), Files: cur.files}
				if err := PutMetadata(store, m); err != nil {
					log.Warn("kord job: checkpoint metadata", "checkpoint", e.ID, "err", err)
					more, err := handle(lc.MetadataFailed(e.ID, time.Now()))
					return more, err
				}
				failpoint.Hit(FailAfterMetadata)
				return handle(lc.MetadataDurable(e.ID))
			case Commit:
				if err := j.commit(wctx, p, run, e.ID, cur.positions); err != nil {
					lc.CommitFailed(e.ID)
					// An abortable error is aborted on this producer first:
					// a zombie is refused there as fenced and stops, instead
					// of fencing the live copy with a new producer.
					return false, fmt.Errorf("%w: commit of checkpoint %d: %w", errRecover, e.ID, j.abortIfRequired(wctx, p, err))
				}
				return handle(lc.CommitDone(e.ID, time.Now()))
			case Committed:
				j.commits++
				if err := SetCommitted(store, CheckpointRef{Run: run, ID: e.ID}); err != nil {
					// The commit is in Kafka; the marker only matters when
					// Kafka's record expires. Report and go on.
					log.Error("kord job: local committed marker", "checkpoint", e.ID, "err", err)
				}
				failpoint.Hit(FailAfterMarker)
				if err := Retain(store, CheckpointRef{Run: run, ID: e.ID}, 1); err != nil {
					log.Warn("kord job: retention", "err", err)
				}
				if j.OnCommitted != nil {
					j.OnCommitted(e.ID)
				}
				final := cur.final
				cur = nil
				if final {
					continue // no new transaction: nothing is left open
				}
				if err := p.BeginTransaction(); err != nil {
					return false, fmt.Errorf("%w: begin transaction: %w", errRecover, j.abortIfRequired(wctx, p, err))
				}
				if err := drain(); err != nil {
					return false, err
				}
			case Abort:
				log.Warn("kord job: checkpoint aborted; its output commits with the next", "checkpoint", e.ID, "reason", e.Reason)
				cur = nil
				if err := drain(); err != nil {
					return false, err
				}
			case Fail:
				return false, fmt.Errorf("checkpoint: job %s: checkpoint %d: %s", j.Name, e.ID, e.Reason)
			case Stopped:
				return false, nil
			}
		}
		return true, nil
	}

	tick := time.NewTicker(minDuration(j.Checkpoint.withDefaults().Interval/4, 50*time.Millisecond))
	defer tick.Stop()
	for {
		if !stopping && ctx.Err() != nil {
			stopping = true
			log.Info("kord job: stopping: final checkpoint")
			if more, err := handle(lc.Stop(time.Now())); !more || err != nil {
				return err
			}
		}
		if stopping && wctx.Err() != nil {
			id, _ := lc.InFlight()
			return fmt.Errorf("%w after %v: checkpoint %d not committed", ErrStopTimeout, j.StopTimeout, id)
		}
		// Snapshot results.
		if cur != nil {
			select {
			case r := <-cur.done:
				if r.err != nil {
					log.Warn("kord job: snapshot", "checkpoint", r.id, "err", r.err)
					if more, err := handle(lc.TaskFailed(r.id, time.Now())); !more || err != nil {
						return err
					}
				} else {
					cur.files = r.files
					failpoint.Hit(FailAfterSnapshots)
					if more, err := handle(lc.Ack(r.id, 0)); !more || err != nil {
						return err
					}
				}
				continue
			default:
			}
		}
		// Records: not while stopping (the final barrier is in), nor with a
		// full epoch buffer (backpressure).
		if !stopping && (cur == nil || len(buffer) < j.EpochBuffer) {
			max := 1000
			if cur != nil {
				// One output record per input record: read no more than the
				// buffer has room for, so that the bound is exact.
				max = min(max, j.EpochBuffer-len(buffer))
			}
			recs, err := src.Poll(wctx, max, 10*time.Millisecond)
			if err != nil {
				return err
			}
			for _, r := range recs {
				kg := state[r.Partition]
				if kg == nil {
					kg = map[string]int64{}
					state[r.Partition] = kg
				}
				n := kg[string(r.Key)] + 1
				kg[string(r.Key)] = n
				out := producer.Record[[]byte, []byte]{Topic: j.Output, Key: r.Key, Value: j.Emit(r, n)}
				if cur != nil {
					buffer = append(buffer, out)
				} else if err := produce(out); err != nil {
					return err
				}
			}
			if testHookBuffered != nil && cur != nil {
				testHookBuffered(len(buffer))
			}
		} else {
			select {
			case <-tick.C:
			case <-time.After(5 * time.Millisecond):
			}
		}
		if more, err := handle(lc.Tick(time.Now())); !more || err != nil {
			return err
		}
	}
}

func minDuration(a, b time.Duration) time.Duration {
	if a < b {
		return a
	}
	return b
}

func cloneState(s countState) countState {
	out := make(countState, len(s))
	for kg, m := range s {
		c := make(map[string]int64, len(m))
		for k, v := range m {
			c[k] = v
		}
		out[kg] = c
	}
	return out
}

// snapshot encodes and writes one state file per key group durably and
// reports the files. It runs on its own goroutine, which ends when it has
// reported.
func (j *CountJob) snapshot(store *Store, run string, id uint64, s countState, done chan<- snapshotResult) {
	kgs := make([]int32, 0, len(s))
	for kg := range s {
		kgs = append(kgs, kg)
	}
	sort.Slice(kgs, func(a, b int) bool { return kgs[a] < kgs[b] })
	var files []FileRef
	for _, kg := range kgs {
		m := s[kg]
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		entries := make([]Entry, len(keys))
		for i, k := range keys {
			entries[i] = Entry{Key: []byte(k), Value: binary.BigEndian.AppendUint64(nil, uint64(m[k]))}
		}
		data, err := EncodeKeyGroup(entries)
		if err != nil {
			done <- snapshotResult{id: id, err: err}
			return
		}
		name := StateFileName(run, id, "count", int(kg))
		if err := store.Put(name, data); err != nil {
			done <- snapshotResult{id: id, err: err}
			return
		}
		files = append(files, FileRef{Name: name, Size: int64(len(data)), CRC32C: Checksum(data), Operator: "count", KeyGroup: int(kg)})
	}
	done <- snapshotResult{id: id, files: files}
}
