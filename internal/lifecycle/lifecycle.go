package lifecycle

import (
	"fmt"
	"time"
)

// Config sets how often and how patiently checkpoints are taken.
type Config struct {
	// Interval between checkpoint triggers (Flink
	// execution.checkpointing.interval). Default 1s. Output becomes
	// visible to read_committed readers only when a checkpoint commits, so
	// end-to-end latency is about half to one interval.
	Interval time.Duration
	// Timeout after which a checkpoint that has not reached its commit is
	// aborted (Flink execution.checkpointing.timeout). Default 60s.
	Timeout time.Duration
	// MinPause between the end of one checkpoint and the next trigger
	// (Flink execution.checkpointing.min-pause). Default 0.
	MinPause time.Duration
	// TolerableFailures is how many checkpoints in a row may abort before
	// the job fails (Flink execution.checkpointing.tolerable-failed-checkpoints).
	// Default 0: the first abort fails the job, which restarts from the last
	// committed checkpoint.
	TolerableFailures int
}

// WithDefaults fills zero fields with their defaults: the one place they
// are set (keyed's options apply it).
func (c Config) WithDefaults() Config {
	if c.Interval == 0 {
		c.Interval = time.Second
	}
	if c.Timeout == 0 {
		c.Timeout = 60 * time.Second
	}
	return c
}

// Validate reports a configuration error.
func (c Config) Validate() error {
	c = c.WithDefaults()
	switch {
	case c.Interval < time.Millisecond:
		return fmt.Errorf("lifecycle: checkpoint interval %v below 1ms", c.Interval)
	case c.Timeout < 10*time.Millisecond:
		return fmt.Errorf("lifecycle: checkpoint timeout %v below 10ms", c.Timeout)
	case c.MinPause < 0:
		return fmt.Errorf("lifecycle: negative checkpoint min pause %v", c.MinPause)
	case c.TolerableFailures < 0:
		return fmt.Errorf("lifecycle: negative tolerable checkpoint failures %d", c.TolerableFailures)
	}
	return nil
}

// Reason is why a checkpoint was aborted or the job failed, from a fixed set.
type Reason int

const (
	ReasonNone            Reason = iota
	ReasonTimeout                // not committed within Config.Timeout
	ReasonTaskFailed             // a task could not snapshot its state
	ReasonMetadataFailed         // the metadata could not be made durable
	ReasonCommitFailed           // the Kafka commit failed or its outcome is unknown
	ReasonTooManyFailures        // more than TolerableFailures aborts in a row
	ReasonStopping               // the job is stopping
)

var reasonNames = [...]string{"none", "timeout", "task-failed", "metadata-failed", "commit-failed", "too-many-failures", "stopping"}

func (r Reason) String() string {
	if int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return fmt.Sprintf("reason(%d)", int(r))
}

// Kind is what the runtime must do.
type Kind int

const (
	// Trigger: inject barrier ID at the sources (recording their offsets);
	// from here the sink keeps output after the barrier in its epoch
	// buffer.
	Trigger Kind = iota + 1
	// WriteMetadata: every task acknowledged a durable snapshot; write the
	// checkpoint's metadata durably.
	WriteMetadata
	// Commit: the checkpoint is durable; commit the open transaction with
	// the checkpoint's offsets and commit record.
	Commit
	// Committed: the commit succeeded. Write the local committed marker,
	// notify tasks, apply retention, begin the next transaction and drain
	// the epoch buffer into it.
	Committed
	// Abort: the checkpoint is abandoned before its commit; its output stays
	// in the open transaction and commits with the next checkpoint (the
	// epoch buffer is drained into the open transaction).
	Abort
	// Recover: the commit failed or its outcome is unknown. Close the
	// producer, create a new one (its InitTransactions fences the old one and
	// completes a commit it had sent) and restart from the checkpoint Kafka
	// recorded. Never retry the commit on the same producer.
	Recover
	// Fail: stop the job (Reason says why).
	Fail
	// Stopped: the final checkpoint is committed; the job may exit.
	Stopped
)

var effectNames = [...]string{"", "trigger", "write-metadata", "commit", "committed", "abort", "recover", "fail", "stopped"}

func (k Kind) String() string {
	if int(k) < len(effectNames) {
		return effectNames[k]
	}
	return fmt.Sprintf("effect(%d)", int(k))
}

// Effect is one instruction to the runtime.
type Effect struct {
	Kind   Kind
	ID     uint64
	Reason Reason
	Final  bool // Trigger: the final checkpoint of a graceful stop
}

func (e Effect) String() string {
	s := fmt.Sprintf("%s %d", e.Kind, e.ID)
	if e.Reason != ReasonNone {
		s += " reason=" + e.Reason.String()
	}
	if e.Final {
		s += " final"
	}
	return s
}

// phase of the checkpoint in flight.
type phase int

const (
	phaseAcks   phase = iota + 1 // barrier injected, waiting for task snapshots
	phaseMeta                    // writing metadata
	phaseCommit                  // commit sent; outcome pending
)

type inflight struct {
	id        uint64
	triggered time.Time
	acked     map[int]bool
	phase     phase
	final     bool
}

// Lifecycle is the checkpoint lifecycle of one job as a pure state machine:
// no goroutines, no IO, time passed in. The runtime feeds it events and
// carries out the effects it returns, in order.
//
// One checkpoint is in flight at a time, and the next is triggered only
// after the previous one committed or aborted: durable is not committed
// (DESIGN.md invariant 6).
type Lifecycle struct {
	cfg   Config
	tasks int

	nextID    uint64
	committed uint64
	lastTrig  time.Time
	lastEnd   time.Time
	failures  int
	cur       *inflight
	stopping  bool
	done      bool
}

// New starts a lifecycle for tasks tasks after recovery: committed
// is the checkpoint restored (the one Kafka recorded), so the next
// checkpoint is committed+1. now starts the interval.
func New(cfg Config, tasks int, committed uint64, now time.Time) (*Lifecycle, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if tasks < 1 {
		return nil, fmt.Errorf("lifecycle: needs at least one task, got %d", tasks)
	}
	return &Lifecycle{cfg: cfg.WithDefaults(), tasks: tasks, nextID: committed + 1, committed: committed, lastTrig: now, lastEnd: now}, nil
}

// Committed returns the newest committed checkpoint id.
func (l *Lifecycle) Committed() uint64 { return l.committed }

// InFlight returns the id of the checkpoint in flight, if any.
func (l *Lifecycle) InFlight() (uint64, bool) {
	if l.cur == nil {
		return 0, false
	}
	return l.cur.id, true
}

// Tick advances time: it triggers a checkpoint when one is due and aborts
// one that timed out before its commit.
func (l *Lifecycle) Tick(now time.Time) []Effect {
	if l.done {
		return nil
	}
	if l.cur != nil {
		if l.cur.phase != phaseCommit && now.Sub(l.cur.triggered) >= l.cfg.Timeout {
			return l.abort(now, ReasonTimeout)
		}
		return nil
	}
	if l.stopping {
		return l.trigger(now, true)
	}
	if now.Sub(l.lastTrig) >= l.cfg.Interval && now.Sub(l.lastEnd) >= l.cfg.MinPause {
		return l.trigger(now, false)
	}
	return nil
}

func (l *Lifecycle) trigger(now time.Time, final bool) []Effect {
	l.cur = &inflight{id: l.nextID, triggered: now, acked: map[int]bool{}, phase: phaseAcks, final: final}
	l.nextID++
	l.lastTrig = now
	return []Effect{{Kind: Trigger, ID: l.cur.id, Final: final}}
}

// Ack records that task's snapshot for checkpoint id is durable. Acks for a
// checkpoint no longer in flight are ignored.
func (l *Lifecycle) Ack(id uint64, task int) []Effect {
	if l.cur == nil || l.cur.id != id || l.cur.phase != phaseAcks || task < 0 || task >= l.tasks {
		return nil
	}
	l.cur.acked[task] = true
	if len(l.cur.acked) < l.tasks {
		return nil
	}
	l.cur.phase = phaseMeta
	return []Effect{{Kind: WriteMetadata, ID: id}}
}

// TaskFailed reports that a task could not snapshot checkpoint id.
func (l *Lifecycle) TaskFailed(id uint64, now time.Time) []Effect {
	if l.cur == nil || l.cur.id != id || l.cur.phase != phaseAcks {
		return nil
	}
	return l.abort(now, ReasonTaskFailed)
}

// MetadataDurable reports that checkpoint id's metadata is durable: the
// checkpoint is durable, not yet committed.
func (l *Lifecycle) MetadataDurable(id uint64) []Effect {
	if l.cur == nil || l.cur.id != id || l.cur.phase != phaseMeta {
		return nil
	}
	l.cur.phase = phaseCommit
	return []Effect{{Kind: Commit, ID: id}}
}

// MetadataFailed reports that checkpoint id's metadata could not be written.
func (l *Lifecycle) MetadataFailed(id uint64, now time.Time) []Effect {
	if l.cur == nil || l.cur.id != id || l.cur.phase != phaseMeta {
		return nil
	}
	return l.abort(now, ReasonMetadataFailed)
}

// CommitDone reports that the transaction recording checkpoint id committed.
func (l *Lifecycle) CommitDone(id uint64, now time.Time) []Effect {
	if l.cur == nil || l.cur.id != id || l.cur.phase != phaseCommit {
		return nil
	}
	final := l.cur.final
	l.committed = id
	l.cur = nil
	l.failures = 0
	l.lastEnd = now
	out := []Effect{{Kind: Committed, ID: id}}
	if final {
		l.done = true
		return append(out, Effect{Kind: Stopped, ID: id})
	}
	if l.stopping {
		out = append(out, l.trigger(now, true)...)
	}
	return out
}

// CommitFailed reports that the commit of checkpoint id failed or that its
// outcome is unknown. The lifecycle ends: the runtime recovers from what
// Kafka recorded and starts a new lifecycle.
func (l *Lifecycle) CommitFailed(id uint64) []Effect {
	if l.cur == nil || l.cur.id != id || l.cur.phase != phaseCommit {
		return nil
	}
	l.cur = nil
	l.done = true
	return []Effect{{Kind: Recover, ID: id, Reason: ReasonCommitFailed}}
}

// Stop asks for a graceful stop: a final checkpoint is triggered as soon as
// none is in flight (now, or after the current one ends), and Stopped follows
// its commit.
func (l *Lifecycle) Stop(now time.Time) []Effect {
	if l.done || l.stopping {
		return nil
	}
	l.stopping = true
	if l.cur == nil {
		return l.trigger(now, true)
	}
	return nil
}

func (l *Lifecycle) abort(now time.Time, r Reason) []Effect {
	id := l.cur.id
	l.cur = nil
	l.lastEnd = now
	l.failures++
	out := []Effect{{Kind: Abort, ID: id, Reason: r}}
	if l.failures > l.cfg.TolerableFailures {
		l.done = true
		return append(out, Effect{Kind: Fail, ID: id, Reason: ReasonTooManyFailures})
	}
	if l.stopping {
		out = append(out, l.trigger(now, true)...)
	}
	return out
}
