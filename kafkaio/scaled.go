package kafkaio

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/kordproject/kord/admin"
	"github.com/kordproject/kord/checkpoint"
	"github.com/kordproject/kord/consumer"
	"github.com/kordproject/kord/keyed"
	"github.com/kordproject/kord/keyed/connector"
	"github.com/kordproject/kord/producer"
)

// A job on several processes (DESIGN.md, "Several processes"). Every
// process is a static member of the job's commit group, which Kafka uses
// to assign the input partitions; each has its own transactional producer,
// kord.<job>.<instance>, and commits each partition's offset with its
// commit record and the member's group metadata (KIP-447).

// InstanceTransactionalID is the transactional.id of instance of job.
func InstanceTransactionalID(job, instance string) string {
	return TransactionalID(job) + "." + instance
}

var _ connector.Membership = (*sink[int])(nil)

// membership is a scaled sink's view of one member's assignment.
type membership struct {
	mu       sync.Mutex
	owned    map[consumer.TopicPartition]bool
	changed  chan struct{} // closed when owned changes
	running  bool          // a run holds owned (Assignment until Released)
	released chan struct{} // closed by Released
	failed   error         // the member is out of the group (consumer.Hooks.Failed)
}

// Fencings of this instance's member allowed within fenceWindow: one more
// fails the job (see join).
const (
	maxFencings = 3
	fenceWindow = 10 * time.Minute
)

// validInstance reports whether id is a valid group.instance.id: Kafka
// refuses one that is empty, longer than 249 characters or holds others
// than ASCII letters, digits, '.', '_' and '-' (JoinGroupRequest's
// validateGroupInstanceId, the rule of topic names).
func validInstance(id string) bool {
	if id == "" || len(id) > 249 {
		return false
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// scaled reports whether the job runs on several processes, this one its
// instance SinkInfo.Instance (keyed.Instance).
func (s *sink[T]) scaled() bool { return s.info.Instance != "" }

// join makes the member at the first Reset; it lives until Close, unless
// it falls out of the group for good (consumer.Member.Err), or the group
// coordinator refused its offsets as not a member (producer.ErrNotMember,
// which marks the membership failed): a later Reset then closes it and
// joins a new one. The usual cause is a static member
// whose session expired (a process too loaded to heartbeat, or paused):
// the group gave its instance id to a newer member
// (consumer.ErrInstanceFenced). The new producer's InitTransactions has
// fenced whatever the old member's run left open, and the new member gets
// its assignment afresh. Being fenced maxFencings times within fenceWindow
// fails the job: two running processes share the instance id.
func (s *sink[T]) join(ctx context.Context, info connector.SinkInfo) error {
	if s.member != nil {
		merr := s.member.Err()
		if merr == nil {
			merr = s.memberErr() // the coordinator refused its offsets: not in the group
		}
		if merr == nil {
			return nil
		}
		if err := s.member.Close(); err != nil {
			s.log.Warn("kafkaio: sink: closing the member that fell out of the group", "instance", s.info.Instance, "err", err)
		}
		s.member, s.ms = nil, nil
		if err := classify(merr); errors.Is(err, keyed.ErrPermanent) {
			return err
		}
		if s.fencedAgain() >= maxFencings {
			return keyed.Permanent(sinkErrorf(s.topic, "instance %q fell out of group %s %d times within %v, last: %w; another running process may use the same instance id (keyed.Instance: give each process its own), or this one cannot heartbeat within session.timeout.ms (kafkaio.SessionTimeout)",
				s.info.Instance, CommitGroup(info.Job), len(s.fencings), fenceWindow, merr))
		}
		s.log.Warn("kafkaio: sink: the group member fell out of the group; joining again", "instance", s.info.Instance, "group", CommitGroup(info.Job), "err", merr)
	}
	if !s.exactlyOnce() {
		return keyed.Permanent(sinkErrorf(s.topic, "keyed.Instance (several processes) runs exactly-once jobs only"))
	}
	ms := &membership{owned: map[consumer.TopicPartition]bool{}, changed: make(chan struct{})}
	opts := []consumer.Opt{consumer.Cluster(s.c.Cluster()), consumer.Logger(s.log), consumer.Group(CommitGroup(info.Job)), consumer.InstanceID(s.info.Instance)}
	for k, v := range s.cfg.memberSettings() {
		opts = append(opts, consumer.Set(k, v))
	}
	// The hooks run on the member's goroutine, outside s.mu: they use the
	// logger as it is now (Reset sets s.log under s.mu).
	log := s.log
	hooks := consumer.Hooks{
		Assigned: func(_ context.Context, ps []consumer.TopicPartition) {
			s.assignedParts.Add(int64(len(ps)))
			ms.assigned(ps)
		},
		Revoked: func(ctx context.Context, ps []consumer.TopicPartition, lost bool) {
			s.revokedParts.Add(int64(len(ps)))
			if ms.revoked(ctx, ps) && lost {
				log.Warn("kafkaio: sink: partitions lost (the session expired): the run over them ends, and its commit will be refused", "partitions", ps)
			}
		},
		Failed: ms.fail,
	}
	m, err := consumer.Join(ctx, info.Inputs, hooks, opts...)
	if err != nil {
		return classify(err)
	}
	s.member, s.ms = m, ms
	return nil
}

// fencedAgain counts one more fencing of this instance, of its member or
// of its producer, and returns how many fell within fenceWindow; called
// with s.mu held.
func (s *sink[T]) fencedAgain() int {
	now := time.Now()
	recent := s.fencings[:0]
	for _, t := range s.fencings {
		if now.Sub(t) < fenceWindow {
			recent = append(recent, t)
		}
	}
	s.fencings = append(recent, now)
	return len(s.fencings)
}

// producerFenced classifies err, which is producer.ErrFenced, on a job of
// several processes: an unknown outcome, which the engine recovers from
// with a new producer (Reset), unless this instance was fenced
// maxFencings times within fenceWindow. A survivor fences the
// transactional id of an instance that left the group (fenceDeparted); a
// process paused past its session comes back to a fenced producer, and
// must go on, as it goes on after its member was fenced (join). Two
// running processes with one instance id fence each other in turn, and
// fail here. Called with s.mu held.
func (s *sink[T]) producerFenced(err error) error {
	if n := s.fencedAgain(); n >= maxFencings {
		return keyed.Permanent(fmt.Errorf("instance %q fenced %d times within %v (another running process may use the same instance id: keyed.Instance must be unique): %w",
			s.info.Instance, n, fenceWindow, err))
	}
	s.log.Warn("kafkaio: sink: the producer was fenced (this instance was out of the group, and another process fenced its transactional id): the run ends uncommitted, and the next starts with a new producer",
		"instance", s.info.Instance, "err", err)
	return keyed.OutcomeUnknown(err)
}

// change closes changed and makes a new one; called with ms.mu held.
func (ms *membership) change() {
	close(ms.changed)
	ms.changed = make(chan struct{})
}

func (ms *membership) assigned(ps []consumer.TopicPartition) {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	for _, p := range ps {
		ms.owned[p] = true
	}
	ms.change()
}

// revoked takes ps out of what the next run covers, ends the run holding
// them (it commits a final checkpoint) and waits until it has. It reports
// whether a run held them.
func (ms *membership) revoked(ctx context.Context, ps []consumer.TopicPartition) bool {
	ms.mu.Lock()
	for _, p := range ps {
		delete(ms.owned, p)
	}
	ms.change()
	running, released := ms.running, ms.released
	ms.mu.Unlock()
	if !running {
		return false
	}
	// Kafka removes a member that holds a revocation longer than
	// max.poll.interval.ms (5 min by default).
	select {
	case <-released:
	case <-ctx.Done():
	case <-time.After(4 * time.Minute):
	}
	return true
}

// fail is the member's Failed hook: everything it owned is lost, and the
// run over it ends; its commit is refused (Commit).
func (ms *membership) fail(err error) {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	clear(ms.owned)
	ms.failed = err
	ms.change()
}

// memberErr is why the member is out of the group, or nil; called with
// s.mu held.
func (s *sink[T]) memberErr() error {
	if s.ms == nil {
		return nil
	}
	s.ms.mu.Lock()
	defer s.ms.mu.Unlock()
	return s.ms.failed
}

// outOfGroup classifies the error of a member out of the group: permanent
// when no new member could mend it (refused credentials), else an unknown
// outcome, which the engine recovers from at once with a new sink
// incarnation (Reset joins a new member).
func outOfGroup(err error) error {
	if c := classify(err); errors.Is(c, keyed.ErrPermanent) {
		return c
	}
	return keyed.OutcomeUnknown(err)
}

// Assignment implements connector.Membership.
func (s *sink[T]) Assignment(ctx context.Context) (map[string][]int32, <-chan struct{}, error) {
	s.mu.Lock()
	m, ms := s.member, s.ms
	s.mu.Unlock()
	if m == nil {
		return nil, nil, sinkErrorf(s.topic, "Assignment before Reset")
	}
	for {
		ms.mu.Lock()
		if len(ms.owned) > 0 && ms.failed == nil {
			out := map[string][]int32{}
			for tp := range ms.owned {
				out[tp.Topic] = append(out[tp.Topic], tp.Partition)
			}
			for _, ps := range out {
				sort.Slice(ps, func(i, j int) bool { return ps[i] < ps[j] })
			}
			ms.running, ms.released = true, make(chan struct{})
			changed := ms.changed
			ms.mu.Unlock()
			return out, changed, nil
		}
		wait, failed := ms.changed, ms.failed
		ms.mu.Unlock()
		if failed != nil {
			return nil, nil, outOfGroup(sinkErrorf(s.topic, "instance %q: %w", s.info.Instance, failed))
		}
		select {
		case <-wait:
		case <-time.After(time.Second):
		case <-ctx.Done():
			return nil, nil, context.Cause(ctx)
		}
	}
}

// Released implements connector.Membership.
func (s *sink[T]) Released() {
	s.mu.Lock()
	ms := s.ms
	s.mu.Unlock()
	if ms == nil {
		return
	}
	ms.mu.Lock()
	defer ms.mu.Unlock()
	if ms.running {
		ms.running = false
		close(ms.released)
	}
}

// recordedParts reads every input partition's committed offset and record
// in the commit group (stable offsets: a pending transactional commit is
// waited for), and fences the instances those records name that have left
// the group (fenceDeparted).
func (s *sink[T]) recordedParts(ctx context.Context, group string, offs []admin.Committed) (*connector.Recorded, error) {
	rec := &connector.Recorded{Where: "commit group " + group}
	var crs []commitRecord
	for _, o := range offs {
		if o.Offset < 0 {
			continue
		}
		cr, err := parseCommitRecord(o.Metadata)
		if err != nil {
			return nil, fmt.Errorf("kafkaio: commit group %s: %s[%d] offset %d: %w", group, o.Topic, o.Partition, o.Offset, err)
		}
		rec.Parts = append(rec.Parts, connector.PartitionRecord{Topic: o.Topic, Partition: o.Partition, Offset: o.Offset,
			Ref: checkpoint.Ref{Run: cr.Run, ID: cr.Checkpoint}})
		crs = append(crs, cr)
	}
	s.fenceDeparted(ctx, group, crs)
	if len(rec.Parts) == 0 {
		return nil, nil
	}
	return rec, nil
}

// sendOffsets adds offs to the open transaction: with the member's group
// metadata on several processes, else to the memberless commit group.
func (s *sink[T]) sendOffsets(ctx context.Context, group string, offs []producer.Offset) error {
	if s.member != nil {
		if simulated(simSendOffsetsNotMember) {
			// What SendOffsetsToTransactionFor returns when the
			// coordinator no longer knows the member: abortable.
			return fmt.Errorf("%w: %w", producer.ErrNotMember, &producer.TxnError{Op: "send offsets", ID: InstanceTransactionalID(s.info.Job, s.info.Instance), Abortable: true,
				Err: errors.New("simulated refusal: Broker: Unknown member")})
		}
		return s.p.SendOffsetsToTransactionFor(ctx, s.member, offs)
	}
	return s.p.SendOffsetsToTransaction(ctx, group, offs)
}

// fenceTimeout bounds the fencing of the departed instances at a run's
// start (fenceDeparted); past it the run goes on, and a departed
// instance's open transaction ends at its timeout as before.
const fenceTimeout = 10 * time.Second

// fenceDeparted fences the transactional id of every instance that
// committed one of the job's input partitions (its commit record names
// it: recs) and is no longer a member of the commit group: a process that
// died, or stopped, and whose session has expired. Its InitTransactions
// aborts what the departed process left open, at once, where the
// transaction's timeout (transaction.timeout.ms, about 71 s with kord's
// derived settings) would otherwise hold every read_committed reader of
// the partitions it wrote back, the survivors' output included: the last
// stable offset cannot pass an open transaction. Kafka Streams keeps that
// wait short instead, with a 10 s transaction timeout under exactly-once.
//
// A live process is never fenced: it is a member until its session
// expires, and its partitions move only then. A process that was paused
// past its session and comes back finds its producer fenced as well as
// its generation (KIP-447); both end its run, uncommitted, and it joins
// again with a new producer (failed). An instance restarted under its id
// while a survivor fences it can have its new producer fenced the same
// way, and recovers the same way.
//
// Each departure is fenced once by this sink; one that fails is logged
// and tried again at the next run. Runs at the start of every run over a
// new assignment (Recorded), where a departed process's partitions arrive.
func (s *sink[T]) fenceDeparted(ctx context.Context, group string, recs []commitRecord) {
	s.mu.Lock()
	self, job, settings, log := s.info.Instance, s.info.Job, s.settings, s.log
	s.mu.Unlock()
	named := map[string]bool{}
	for _, r := range recs {
		if r.Instance != "" && r.Instance != self {
			named[r.Instance] = true
		}
	}
	if len(named) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, fenceTimeout)
	defer cancel()
	a, err := s.c.admin(log)
	if err != nil {
		log.Warn("kafkaio: sink: cannot list the commit group's members to fence departed instances", "group", group, "err", err)
		return
	}
	members, err := a.GroupMembers(ctx, group)
	a.Close()
	if err != nil {
		log.Warn("kafkaio: sink: cannot list the commit group's members to fence departed instances", "group", group, "err", err)
		return
	}
	s.mu.Lock()
	if s.departed == nil {
		s.departed = map[string]bool{}
	}
	for _, m := range members {
		delete(named, m.InstanceID)
		delete(s.departed, m.InstanceID)
	}
	var fence []string
	for id := range named {
		if !s.departed[id] {
			fence = append(fence, id)
		}
	}
	s.mu.Unlock()
	sort.Strings(fence)
	for _, id := range fence {
		tid := InstanceTransactionalID(job, id)
		began := time.Now()
		if err := fenceTransactionalID(ctx, s.c, log, settings, tid); err != nil {
			log.Warn("kafkaio: sink: fencing a departed instance failed: its open transaction, if any, ends at its timeout", "instance", id, "transactional_id", tid, "err", err)
			continue
		}
		s.fencedOthers.Add(1)
		s.mu.Lock()
		s.departed[id] = true
		s.mu.Unlock()
		log.Info("kafkaio: sink: fenced a departed instance: it is no longer in the commit group, and what it left open is aborted",
			"instance", id, "transactional_id", tid, "group", group, "took", time.Since(began).Round(time.Millisecond))
	}
}

// fenceTransactionalID starts a producer under tid and initializes its
// transactions, which fences every earlier producer of tid and aborts its
// open transaction, then closes it.
func fenceTransactionalID(ctx context.Context, c *Client, log *slog.Logger, settings map[string]string, tid string) error {
	opts := append(c.producerOpts(log, settings), producer.TransactionalID(tid), producer.CloseTimeout(5*time.Second), producer.Logger(log))
	p, err := producer.New[[]byte, []byte](nil, nil, opts...)
	if err != nil {
		return err
	}
	defer p.Close()
	return p.InitTransactions(ctx)
}
