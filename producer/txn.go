package producer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// Transactions, on a producer made with TransactionalID. These are thin,
// context-aware wrappers over librdkafka's transactional API that add what
// failed to the error; the checkpoint package builds kord's exactly-once
// protocol on them (DESIGN.md). librdkafka cannot resume another producer's
// transaction: InitTransactions completes a commit an earlier incarnation had
// already sent and aborts anything else, and it fences every older producer
// with the same transactional.id.

// ErrFenced means another producer with the same transactional.id took over.
// It is fatal: this producer can do nothing more.
var ErrFenced = errors.New("producer: fenced by a newer producer with the same transactional.id")

// TxnError is a failed transactional call. Fatal: the producer is unusable
// (fenced, or librdkafka's state is lost) and must be closed. Abortable: the
// current transaction must be aborted. Retriable: the same call may be
// retried, but kord's protocol never retries a call whose outcome is unknown
// on the same producer (see DESIGN.md on KIP-890).
type TxnError struct {
	Op        string
	ID        string // transactional.id
	Fatal     bool
	Abortable bool
	Retriable bool
	Err       error
}

func (e *TxnError) Error() string {
	kind := ""
	switch {
	case e.Fatal:
		kind = " (fatal)"
	case e.Abortable:
		kind = " (abort required)"
	case e.Retriable:
		kind = " (retriable)"
	}
	return fmt.Sprintf("producer: %s, transactional.id %q%s: %v", e.Op, e.ID, kind, e.Err)
}

func (e *TxnError) Unwrap() error { return e.Err }

func (c *client) txnErr(op string, err error) error {
	if err == nil {
		return nil
	}
	te := &TxnError{Op: op, ID: c.cfg.transactionalID, Err: err}
	// After a fatal error (fencing, say, seen first by a produce request)
	// librdkafka answers later calls with a generic "erroneous state":
	// report the fatal error that caused it.
	if fe := c.kp.GetFatalError(); fe != nil {
		var fk kafka.Error
		if errors.As(fe, &fk) && !errors.Is(err, fe) {
			err = fmt.Errorf("%w (producer failed earlier: %w)", err, fk)
			te.Err = err
		}
	}
	var kerr kafka.Error
	if errors.As(err, &kerr) {
		te.Fatal = kerr.IsFatal()
		te.Abortable = kerr.TxnRequiresAbort()
		te.Retriable = kerr.IsRetriable()
		code := kerr.Code()
		var fk kafka.Error
		if fe := c.kp.GetFatalError(); fe != nil && errors.As(fe, &fk) {
			te.Fatal = true
			code = fk.Code()
		}
		switch code {
		case kafka.ErrFenced, kafka.ErrProducerFenced, kafka.ErrInvalidProducerEpoch:
			te.Fatal = true
			te.Err = fmt.Errorf("%w: %w", ErrFenced, err)
		case kafka.ErrInvalidTransactionTimeout:
			te.Fatal = true
			te.Err = fmt.Errorf("%w: transaction.timeout.ms is above the broker's transaction.max.timeout.ms (lower it, or raise the broker's limit): %w", ErrConfig, err)
		}
	}
	if te.Fatal {
		c.fail(te)
	}
	return te
}

// txnGuard runs fn with the librdkafka handle, refusing on a closed or
// non-transactional producer.
func (c *client) txnGuard(op string, fn func(kp *kafka.Producer) error) error {
	if c.cfg.transactionalID == "" {
		return fmt.Errorf("%w: %s needs producer.TransactionalID", ErrConfig, op)
	}
	c.closeMu.RLock()
	defer c.closeMu.RUnlock()
	if c.closed {
		return ErrClosed
	}
	return c.txnErr(op, fn(c.kp))
}

// stuckGrace is how long a transactional call may outlast its context's
// deadline, which librdkafka is given as the call's timeout, before the
// producer stops waiting for it (txnCall).
const stuckGrace = 2 * time.Second

// testHookTxnCall, set by tests only, runs on the goroutine of each
// transactional call that txnCall bounds, before librdkafka is called.
var testHookTxnCall func(op string)

// txnCall runs fn, a transactional call that librdkafka bounds by ctx's
// deadline, as txnGuard does, but returns stuckGrace after that deadline
// even when librdkafka has not: rd_kafka_send_offsets_to_transaction never
// checks its timeout for the request to the group coordinator (librdkafka
// issue #5456), and waits for a broker to change state when the
// coordinator it cached was decommissioned, as a broker is once it leaves
// the metadata (killed, then fenced), which may be never (#5511). A job's
// commit then blocked for good, and with it the job's stop. The call left
// behind goes on in the background holding the handle; the producer is
// failed (a fatal TxnError wrapping context.DeadlineExceeded: what the call
// did is unknown), and Close leaves the handle to be closed when the call
// returns. Without a deadline it waits as long as librdkafka does.
func (c *client) txnCall(ctx context.Context, op string, fn func(kp *kafka.Producer) error) error {
	if c.cfg.transactionalID == "" {
		return fmt.Errorf("%w: %s needs producer.TransactionalID", ErrConfig, op)
	}
	c.closeMu.RLock()
	if c.closed {
		c.closeMu.RUnlock()
		return ErrClosed
	}
	call := &txnCallState{}
	done := make(chan error, 1)
	go func() {
		if testHookTxnCall != nil {
			testHookTxnCall(op)
		}
		err := fn(c.kp)
		c.closeMu.RUnlock()
		done <- err
		if call.back() && c.abandoned.Add(-1) == 0 && c.closeLater.Load() {
			_ = c.close()
		}
	}()
	deadline, ok := ctx.Deadline()
	if !ok {
		return c.txnErr(op, <-done)
	}
	t := time.NewTimer(time.Until(deadline) + stuckGrace)
	defer t.Stop()
	select {
	case err := <-done:
		return c.txnErr(op, err)
	case <-t.C:
	}
	if !call.abandon(&c.abandoned) {
		return c.txnErr(op, <-done) // it returned meanwhile
	}
	te := &TxnError{Op: op, ID: c.cfg.transactionalID, Fatal: true,
		Err: fmt.Errorf("librdkafka has not returned %v after the call's deadline (librdkafka issues #5456 and #5511), and the producer is given up: %w", stuckGrace, context.DeadlineExceeded)}
	c.fail(te)
	c.log.Error("kord producer: a transactional call outlived its deadline; the producer is given up and its handle closed once the call returns", "op", op, "transactional_id", c.cfg.transactionalID)
	return te
}

// txnCallState is whether a call of txnCall came back, and whether its
// caller stopped waiting for it first.
type txnCallState struct {
	mu                  sync.Mutex
	returned, abandoned bool
}

// abandon marks the call abandoned, counting it in n, unless it came back
// already; it reports whether it did.
func (s *txnCallState) abandon(n *atomic.Int32) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.returned {
		return false
	}
	s.abandoned = true
	n.Add(1)
	return true
}

// back marks the call returned and reports whether it had been abandoned.
func (s *txnCallState) back() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.returned = true
	return s.abandoned
}

// InitTransactions registers the transactional.id with the broker, fencing
// older producers with the same id and completing or aborting what they left
// open. Bounded by ctx.
func (p *Producer[K, V]) InitTransactions(ctx context.Context) error {
	return p.c.initTransactions(ctx)
}

// initTransactions calls librdkafka's init once, bounded by ctx's
// deadline (librdkafka's init takes a timeout, which confluent-kafka-go
// derives from the deadline; cancelling ctx does not end it). A timeout
// is classified: the producer's ErrAuth when the cluster refused it
// meanwhile, ErrUnreachable when no broker ever answered, else explained
// by the client's last error from the cluster. (It is one call, not
// sliced as kafkaconf's Conn.Do slices: resuming it after a slice made a
// restarted broker's recovery flaky. A job meets a refusal or an
// unreachable cluster first in the metadata requests before it, which are
// sliced; see DESIGN.md, "Errors".)
func (c *client) initTransactions(ctx context.Context) error {
	if err := c.failure(); err != nil {
		return &TxnError{Op: "init transactions", ID: c.cfg.transactionalID, Fatal: true, Err: err}
	}
	err := c.txnCall(ctx, "init transactions", func(kp *kafka.Producer) error { return kp.InitTransactions(ctx) })
	if err == nil {
		c.conn.Served()
		return nil
	}
	var kerr kafka.Error
	var te *TxnError
	if errors.As(err, &kerr) && kerr.Code() == kafka.ErrTimedOut && errors.As(err, &te) {
		te.Err = c.conn.Classify(te.Err)
		if errors.Is(te.Err, ErrAuth) {
			te.Fatal, te.Retriable = true, false // refused for good
		}
	}
	return err
}

// BeginTransaction starts a transaction; records produced until it is
// committed or aborted belong to it.
func (p *Producer[K, V]) BeginTransaction() error {
	return p.c.txnGuard("begin transaction", func(kp *kafka.Producer) error { return kp.BeginTransaction() })
}

// Offset is a consumed position to commit with a transaction: the next
// offset to read, and a metadata string stored with it.
type Offset struct {
	Topic     string
	Partition int32
	Offset    int64
	Metadata  string
}

// SendOffsetsToTransaction adds consumed positions to the current
// transaction, committed to group when the transaction commits. The group
// need not have members: kord's commit group never does, and the commit is
// made with generation -1 and no member id.
//
// Like InitTransactions, CommitTransaction and AbortTransaction, it is
// bounded by ctx's deadline, which librdkafka gets as its timeout. When
// librdkafka overstays it by 2 s (it can wait for good on a group
// coordinator that left the cluster: librdkafka issues #5456 and #5511),
// the call returns a fatal *TxnError wrapping context.DeadlineExceeded and
// the producer is given up: what the call did is unknown, and the handle
// stays in use by it until it returns (see Close).
func (p *Producer[K, V]) SendOffsetsToTransaction(ctx context.Context, group string, offsets []Offset) error {
	gm, err := kafka.NewTestConsumerGroupMetadata(group)
	if err != nil {
		return fmt.Errorf("producer: group metadata for %q: %w", group, err)
	}
	return p.sendOffsets(ctx, group, gm, offsets)
}

// GroupMember is a live member of a consumer group (consumer.Member):
// its group metadata (generation, member id, instance id) goes with a
// transactional offset commit.
type GroupMember interface {
	Group() string
	KafkaGroupMetadata() (*kafka.ConsumerGroupMetadata, error)
}

// SendOffsetsToTransactionFor adds consumed positions to the current
// transaction, committed to member's group with member's group metadata
// when the transaction commits (KIP-447, Kafka's
// KafkaProducer.sendOffsetsToTransaction(offsets, groupMetadata)): the
// group coordinator refuses the commit of a member of an older generation,
// or of one no longer in the group, and the transaction must then be
// aborted (RequiresAbort). That is how a zombie that lost its partitions in
// a rebalance is kept from committing their offsets.
func (p *Producer[K, V]) SendOffsetsToTransactionFor(ctx context.Context, member GroupMember, offsets []Offset) error {
	gm, err := member.KafkaGroupMetadata()
	if err != nil {
		return fmt.Errorf("producer: group metadata of %q: %w", member.Group(), err)
	}
	if err := p.sendOffsets(ctx, member.Group(), gm, offsets); err != nil {
		if notMemberCode(err) {
			return fmt.Errorf("%w: %w", ErrNotMember, err)
		}
		return err
	}
	return nil
}

// notMemberCode reports whether err is the group coordinator's word that
// the group metadata's member is not in the group now: Kafka's
// TxnOffsetCommit refusals that Java's producer raises as
// CommitFailedException (TransactionManager, TxnOffsetCommitHandler), on
// which Kafka Streams takes the member's tasks as migrated and rejoins.
// FENCED_INSTANCE_ID is left out: a newer static member took the instance
// id, and the member's own client learns it at its next heartbeat, as a
// fatal error (consumer.ErrInstanceFenced), which its owner acts on.
// Acting on the refusal instead closed the member while that error was
// on its way, and confluent-kafka-go's Close of a consumer that turns
// fatal while closing did not return (TestScaledInstanceFenced, on kfake
// and on Kafka 4.4.0: 6 of 27 runs hung).
func notMemberCode(err error) bool {
	return hasCode(err, kafka.ErrUnknownMemberID, kafka.ErrIllegalGeneration)
}

// hasCode reports whether err holds a kafka.Error with one of codes.
func hasCode(err error, codes ...kafka.ErrorCode) bool {
	var kerr kafka.Error
	return errors.As(err, &kerr) && slices.Contains(codes, kerr.Code())
}

func (p *Producer[K, V]) sendOffsets(ctx context.Context, group string, gm *kafka.ConsumerGroupMetadata, offsets []Offset) error {
	tps := make([]kafka.TopicPartition, len(offsets))
	for i, o := range offsets {
		topic, md := o.Topic, o.Metadata
		tps[i] = kafka.TopicPartition{Topic: &topic, Partition: o.Partition, Offset: kafka.Offset(o.Offset), Metadata: &md}
	}
	return p.c.txnCall(ctx, fmt.Sprintf("send offsets to transaction (group %q)", group), func(kp *kafka.Producer) error {
		return kp.SendOffsetsToTransaction(ctx, tps, gm)
	})
}

// CommitTransaction flushes the transaction's records and commits it.
func (p *Producer[K, V]) CommitTransaction(ctx context.Context) error {
	return p.c.txnCall(ctx, "commit transaction", func(kp *kafka.Producer) error { return kp.CommitTransaction(ctx) })
}

// AbortTransaction aborts the current transaction; its records are never
// seen by read_committed consumers.
func (p *Producer[K, V]) AbortTransaction(ctx context.Context) error {
	return p.c.txnCall(ctx, "abort transaction", func(kp *kafka.Producer) error { return kp.AbortTransaction(ctx) })
}

// fencedCode reports whether err is librdkafka's or the broker's word that
// a newer producer with the same transactional.id exists.
func fencedCode(err error) bool {
	return hasCode(err, kafka.ErrFenced, kafka.ErrProducerFenced, kafka.ErrInvalidProducerEpoch)
}

// RequiresAbort reports whether err leaves the current transaction in a
// state that only an abort ends: a transactional call's TxnError.Abortable,
// or a Produce refused with librdkafka's "erroneous state" (its
// transaction failed, for instance because the broker aborted it when a
// newer producer with the same transactional.id initialised).
func RequiresAbort(err error) bool {
	var te *TxnError
	if errors.As(err, &te) {
		return te.Abortable && !te.Fatal
	}
	var pe *Error
	var kerr kafka.Error
	return errors.As(err, &pe) && pe.Op == "produce" && errors.As(err, &kerr) && kerr.Code() == kafka.ErrState
}

// AbortIfRequired handles a failed call whose error says the transaction
// must be aborted (RequiresAbort): it aborts on this same producer and
// returns cause, or, when the abort fails, the abort's error followed by
// cause. Any other cause is returned as is.
//
// This is how a paused copy of a job learns it is a zombie. When a newer
// producer with the same transactional.id initialises, the broker aborts
// the old producer's transaction; the old one may first see that as an
// abortable error (kfake answers its produce requests with
// INVALID_TXN_STATE, and librdkafka then refuses further records as in an
// erroneous state). Starting a new producer at that point would fence the
// live copy in turn. Aborting with the old epoch is refused as fenced
// instead, and the returned error then wraps ErrFenced.
func (p *Producer[K, V]) AbortIfRequired(ctx context.Context, cause error) error {
	if cause == nil || !RequiresAbort(cause) || p.c.cfg.transactionalID == "" {
		return cause
	}
	if err := p.AbortTransaction(ctx); err != nil {
		return fmt.Errorf("%w; after: %w", err, cause)
	}
	return cause
}
