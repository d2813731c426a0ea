// Command librdkafka runs the benchmark job (../CONTRACT.md) as a consume,
// count and produce loop on confluent-kafka-go (librdkafka), written by
// hand: input read with read_committed in the consumer group --id, one
// transaction every --commit-ms that holds the results, the counts'
// changelog records and the consumed offsets (KIP-447:
// SendOffsetsToTransaction with the consumer's group metadata). It is the
// raw librdkafka transactional loop kord is measured against, made to run
// the suite's job; kord's Kafka I/O is librdkafka too, so what kord adds
// on top of this loop is what the suite shows.
//
// The design is the franz peer's (../franz), so that the two loops compare:
// --parallelism workers, each a consumer in the group with its own
// transactional producer; the counts live in a map per input partition,
// and every new count is also written, in the same transaction, to the
// compacted topic <id>.counts-changelog (key uuid, value the count in
// decimal), to the partition of the input record; a partition's counts are
// read back from there, with read_committed, when it is assigned, before
// its first record is counted.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

type config struct {
	brokers     string
	input       string
	output      string
	id          string
	instance    string
	parallelism int
	commit      time.Duration
	logLevel    int // librdkafka's log_level (syslog levels)
}

// session names worker i: its transactional id, group instance id and
// client id.
func (c *config) session(i int) string {
	if c.instance == "" {
		return fmt.Sprintf("%s-%d", c.id, i)
	}
	return fmt.Sprintf("%s-%s-%d", c.id, c.instance, i)
}

// changelog is the name of the job's counts changelog topic.
func (c *config) changelog() string { return c.id + ".counts-changelog" }

func main() { os.Exit(cli(os.Args[1:])) }

// cli parses args, runs the job until SIGTERM or SIGINT (a graceful stop:
// the open transaction commits) and returns the exit code.
func cli(args []string) int {
	c, err := parseFlags(args)
	if err != nil {
		fmt.Fprintln(os.Stderr, "librdkafka:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, c); err != nil {
		fmt.Fprintln(os.Stderr, "librdkafka:", err)
		return 1
	}
	return 0
}

func parseFlags(args []string) (*config, error) {
	var (
		c       config
		commit  int
		verbose bool
	)
	fs := flag.NewFlagSet("librdkafka", flag.ContinueOnError)
	fs.StringVar(&c.brokers, "brokers", "", "Kafka bootstrap servers, host:port[,host:port...]")
	fs.StringVar(&c.input, "input", "", "input topic")
	fs.StringVar(&c.output, "output", "", "output topic")
	fs.StringVar(&c.id, "id", "", "the job's durable identity: consumer group, transactional id prefix, changelog topic prefix")
	fs.StringVar(&c.instance, "instance", "", "this process's name within the job, for a job run as several processes (each needs its own): workers are named <id>-<instance>-<i> instead of <id>-<i>")
	fs.IntVar(&c.parallelism, "parallelism", 1, "workers in this process, each a consumer and a transactional producer")
	fs.IntVar(&commit, "commit-ms", 1000, "transaction commit interval in milliseconds")
	fs.BoolVar(&verbose, "v", false, "log librdkafka at info level (default: warnings and errors)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if c.brokers == "" || c.input == "" || c.output == "" || c.id == "" {
		return nil, errors.New("--brokers, --input, --output and --id are required")
	}
	if c.parallelism < 1 || commit < 1 {
		return nil, errors.New("--parallelism and --commit-ms must be positive")
	}
	c.commit = time.Duration(commit) * time.Millisecond
	c.logLevel = 4 // warning
	if verbose {
		c.logLevel = 6 // info
	}
	return &c, nil
}

// consumerConfig is every consumer's configuration: the group's workers
// and the changelog readers.
func (c *config) consumerConfig(name, group string) *kafka.ConfigMap {
	return &kafka.ConfigMap{
		"bootstrap.servers":        c.brokers,
		"client.id":                name,
		"group.id":                 group,
		"isolation.level":          "read_committed",
		"enable.auto.commit":       false,
		"enable.auto.offset.store": false,
		"auto.offset.reset":        "earliest",
		// librdkafka's default is 1000 ms: a consumer that has read its
		// fetch queue empty waits that long before fetching again, which
		// stalls a fast reader (bench/RESULTS.md, (b): 2.7 times slower).
		// kord's consumer sets 10 ms, as bench/rawloop's loop did; so does
		// this loop, which stands for them (README.md, "Settings").
		"fetch.queue.backoff.ms": 10,
		"log_level":              c.logLevel,
	}
}

func run(ctx context.Context, c *config) error {
	if err := ensureChangelog(ctx, c); err != nil {
		return err
	}
	workers := make([]*worker, c.parallelism)
	defer func() {
		for _, w := range workers {
			if w != nil {
				w.close()
			}
		}
	}()
	for i := range workers {
		w, err := newWorker(ctx, c, i)
		if err != nil {
			return err
		}
		workers[i] = w
	}
	fmt.Println("ready")

	// One worker failing stops the others (they commit and stop) and the
	// process, which the suite may start again.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, len(workers))
	for _, w := range workers {
		go func() { errs <- w.run(ctx) }()
	}
	var first error
	for range workers {
		if err := <-errs; err != nil && first == nil {
			slog.Error("worker failed", "err", err)
			first = err
			cancel()
		}
	}
	return first
}

// ensureChangelog creates the compacted changelog topic with the input's
// partition count, or checks the count of the one that exists.
func ensureChangelog(ctx context.Context, c *config) error {
	adm, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": c.brokers, "log_level": c.logLevel})
	if err != nil {
		return err
	}
	defer adm.Close()
	parts, err := partitionCount(adm, c.input)
	if err != nil {
		return fmt.Errorf("input topic %s: %w", c.input, err)
	}
	if n, err := partitionCount(adm, c.changelog()); err == nil {
		if n != parts {
			return fmt.Errorf("changelog %s has %d partitions, the input %d", c.changelog(), n, parts)
		}
		return nil
	}
	res, err := adm.CreateTopics(ctx, []kafka.TopicSpecification{{
		Topic: c.changelog(), NumPartitions: parts, // replication: the broker's default
		Config: map[string]string{"cleanup.policy": "compact"},
	}})
	if err != nil {
		return fmt.Errorf("create changelog %s: %w", c.changelog(), err)
	}
	for _, r := range res {
		if code := r.Error.Code(); code != kafka.ErrNoError && code != kafka.ErrTopicAlreadyExists {
			return fmt.Errorf("create changelog %s: %w", c.changelog(), r.Error)
		}
	}
	// A new topic takes a moment to have leaders everywhere; restores
	// list its offsets at once.
	topic := c.changelog()
	spec := map[kafka.TopicPartition]kafka.OffsetSpec{}
	for p := range int32(parts) {
		spec[kafka.TopicPartition{Topic: &topic, Partition: p}] = kafka.LatestOffsetSpec
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		ends, err := adm.ListOffsets(lctx, spec)
		cancel()
		if err == nil {
			for _, r := range ends.ResultInfos {
				if r.Error.Code() != kafka.ErrNoError {
					err = r.Error
				}
			}
		}
		if err == nil && len(ends.ResultInfos) == parts {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("changelog %s not ready: %v", topic, err)
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
}

// partitionCount is topic's partition count, from the metadata.
func partitionCount(adm *kafka.AdminClient, topic string) (int, error) {
	md, err := adm.GetMetadata(&topic, false, 10000)
	if err != nil {
		return 0, err
	}
	t, ok := md.Topics[topic]
	if !ok {
		return 0, errors.New("not in the metadata")
	}
	if t.Error.Code() != kafka.ErrNoError {
		return 0, t.Error
	}
	if len(t.Partitions) == 0 {
		return 0, errors.New("no partitions")
	}
	return len(t.Partitions), nil
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// worker is one consumer in the group, its transactional producer and the
// counts of the partitions it owns. Everything in it is touched by its run
// goroutine only: the rebalance callback runs inside the consumer's Poll.
type worker struct {
	c         *config
	name      string
	input     string
	output    string
	changelog string
	cons      *kafka.Consumer
	prod      *kafka.Producer
	adm       *kafka.AdminClient // the producer's handle, for ListOffsets

	counts   map[int32]map[string]int64 // input partition -> uuid -> count
	assigned map[int32]bool             // input partitions the group gave this worker
	pending  map[int32]bool             // assigned partitions whose counts are not read back yet
	offsets  map[int32]kafka.Offset     // input partition -> next offset, of the records in the open transaction
	open     bool                       // a transaction is begun (lazily, at the first record after a commit)
	deadline time.Time                  // when the open transaction commits
	rewind   bool                       // the open transaction was aborted: the assignment goes back to the committed offsets
	closing  bool                       // the final commit is done: revocations abort nothing
	err      error                      // the rebalance callback's failure
}

func newWorker(ctx context.Context, c *config, i int) (*worker, error) {
	name := c.session(i)
	w := &worker{c: c, name: name, input: c.input, output: c.output, changelog: c.changelog(),
		counts: map[int32]map[string]int64{}, assigned: map[int32]bool{}, pending: map[int32]bool{}, offsets: map[int32]kafka.Offset{}}
	cc := c.consumerConfig(name, c.id)
	// Static membership: a worker started again under the same name
	// (after SIGKILL) takes its partitions back at once instead of
	// waiting for the dead member's session timeout (the franz peer
	// does the same).
	_ = cc.SetKey("group.instance.id", name)
	// Cooperative rebalancing, as franz-go's default balancer
	// (cooperative-sticky): a rebalance revokes only the partitions that
	// move, so a worker aborts its transaction only when it loses some.
	// librdkafka's default (range,roundrobin) is eager: every rebalance
	// revokes every partition of every member.
	_ = cc.SetKey("partition.assignment.strategy", "cooperative-sticky")
	cons, err := kafka.NewConsumer(cc)
	if err != nil {
		return nil, fmt.Errorf("worker %s: consumer: %w", name, err)
	}
	w.cons = cons
	prod, err := kafka.NewProducer(&kafka.ConfigMap{
		"bootstrap.servers": c.brokers,
		"client.id":         name,
		"transactional.id":  name,
		// Kafka's Java placement of keyed records; librdkafka's default
		// (consistent_random) is CRC32. CONFIGURATION.md: "murmur2_random
		// - Java Producer compatible Murmur2 hash of key (NULL keys are
		// randomly partitioned. This is functionally equivalent to the
		// default partitioner in the Java Producer.)". Every key here is
		// a uuid, never NULL.
		"partitioner": "murmur2_random",
		// No per-record delivery reports: CommitTransaction fails when a
		// record of the transaction failed, which is all the loop needs.
		"go.delivery.reports": false,
		"log_level":           c.logLevel,
	})
	if err != nil {
		cons.Close()
		return nil, fmt.Errorf("worker %s: producer: %w", name, err)
	}
	w.prod = prod
	go w.producerEvents()
	adm, err := kafka.NewAdminClientFromProducer(prod)
	if err != nil {
		w.close()
		return nil, err
	}
	w.adm = adm
	// InitTransactions fences an earlier process with the same
	// transactional id and aborts its open transaction, so that restores
	// do not wait for it to time out.
	ictx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := prod.InitTransactions(ictx); err != nil {
		w.close()
		return nil, fmt.Errorf("worker %s: init transactions: %w", name, err)
	}
	return w, nil
}

// producerEvents logs the producer's client-level errors (no delivery
// reports come: go.delivery.reports is off). It ends when the producer is
// closed.
func (w *worker) producerEvents() {
	for ev := range w.prod.Events() {
		if e, ok := ev.(kafka.Error); ok {
			slog.Warn("producer", "worker", w.name, "err", e)
		}
	}
}

func (w *worker) close() {
	if w.adm != nil {
		w.adm.Close()
	}
	if w.cons != nil {
		_ = w.cons.Close()
	}
	if w.prod != nil {
		w.prod.Close()
	}
}

// run is the worker's loop: poll a record, count it and produce its result
// and changelog record into the open transaction; commit it with the
// consumed offsets every --commit-ms.
//
// A rebalance that takes partitions from the worker while a transaction
// is open aborts it (rebalance), and every count is dropped and read again
// from the changelog: the aborted records never happened, and the
// partitions that stay are read again from their committed offsets.
// Rebalances that only add partitions abort nothing.
func (w *worker) run(ctx context.Context) error {
	if err := w.cons.Subscribe(w.input, w.rebalance); err != nil {
		return fmt.Errorf("subscribe %s: %w", w.input, err)
	}
	for {
		if ctx.Err() != nil {
			// SIGTERM: commit what was counted, then stop.
			return w.stop()
		}
		wait := 100 * time.Millisecond
		if w.open {
			wait = min(wait, max(time.Until(w.deadline), time.Millisecond))
		}
		ev := w.cons.Poll(int(wait.Milliseconds()))
		if w.err != nil {
			return w.err
		}
		if w.rewind {
			// A record polled after the abort was fetched before the
			// rewind: it comes again.
			if _, ok := ev.(*kafka.Message); ok {
				ev = nil
			}
			if err := w.seekCommitted(); err != nil {
				return err
			}
		}
		if len(w.pending) > 0 {
			// Restores do not stop at SIGTERM: the final commit
			// includes what is counted after them.
			if err := w.restore(context.WithoutCancel(ctx)); err != nil {
				return err
			}
		}
		switch e := ev.(type) {
		case *kafka.Message:
			if err := w.count(e); err != nil {
				return err
			}
		case kafka.Error:
			if e.IsFatal() {
				return fmt.Errorf("consumer: %w", e)
			}
			slog.Warn("consumer", "worker", w.name, "err", e)
		}
		if w.open && !time.Now().Before(w.deadline) {
			if err := w.commit(ctx); err != nil {
				return err
			}
		}
	}
}

// stop commits the open transaction at SIGTERM.
func (w *worker) stop() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if w.open {
		if err := w.commit(ctx); err != nil {
			return err
		}
	}
	w.closing = true
	return nil
}

// count counts one record and produces its result and changelog record
// into the open transaction, which it begins if none is open.
func (w *worker) count(m *kafka.Message) error {
	p := m.TopicPartition.Partition
	if !w.assigned[p] {
		return nil // revoked since it was fetched
	}
	ev, err := decodeEvent(m.Value)
	if err != nil {
		return fmt.Errorf("%s[%d]@%d: %w", w.input, p, m.TopicPartition.Offset, err)
	}
	if w.counts[p] == nil {
		// Not read back yet (run restores every pending partition after
		// each poll, so this does not happen; kept for safety).
		w.pending[p] = true
		if err := w.restore(context.Background()); err != nil {
			return err
		}
	}
	if !w.open {
		if err := w.prod.BeginTransaction(); err != nil {
			return fmt.Errorf("begin transaction: %w", err)
		}
		w.open, w.deadline = true, time.Now().Add(w.c.commit)
	}
	counts := w.counts[p]
	n := counts[ev.UUID] + 1
	counts[ev.UUID] = n
	key := []byte(ev.UUID)
	if err := w.produce(&kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &w.output, Partition: kafka.PartitionAny}, Key: key, Value: encodeResult(ev, n)}); err != nil {
		return w.produceFailed(err)
	}
	if err := w.produce(&kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &w.changelog, Partition: p}, Key: key, Value: strconv.AppendInt(nil, n, 10)}); err != nil {
		return w.produceFailed(err)
	}
	w.offsets[p] = m.TopicPartition.Offset + 1
	return nil
}

// produceFailed handles a record the producer refused. librdkafka refuses
// records (Local: Erroneous state) once the open transaction has failed
// with an abortable error, for instance OUT_OF_ORDER_SEQUENCE_NUMBER when
// records purged by the previous abort were still in flight: the
// transaction is aborted and its records are read again. If the abort
// fails too (a fatal error, such as being fenced), the worker fails.
func (w *worker) produceFailed(err error) error {
	slog.Warn("aborting the transaction: a record was refused", "worker", w.name, "err", err)
	if aerr := w.abort(); aerr != nil {
		return fmt.Errorf("produce: %w (then %v)", err, aerr)
	}
	return nil
}

// produce enqueues m, waiting while librdkafka's queue is full
// (queue.buffering.max.messages, 100,000 by default).
func (w *worker) produce(m *kafka.Message) error {
	for {
		err := w.prod.Produce(m, nil)
		var ke kafka.Error
		if err == nil || !errors.As(err, &ke) || ke.Code() != kafka.ErrQueueFull {
			return err
		}
		time.Sleep(200 * time.Microsecond)
	}
}

// commit sends the consumed offsets to the open transaction and commits
// it. An error that requires an abort aborts it instead (every count is
// read again); a retriable one is retried; any other fails the worker.
func (w *worker) commit(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if len(w.offsets) > 0 {
		meta, err := w.cons.GetConsumerGroupMetadata()
		if err != nil {
			return fmt.Errorf("group metadata: %w", err)
		}
		offsets := make([]kafka.TopicPartition, 0, len(w.offsets))
		for p, o := range w.offsets {
			offsets = append(offsets, kafka.TopicPartition{Topic: &w.input, Partition: p, Offset: o})
		}
		if err := retry(ctx, func() error { return w.prod.SendOffsetsToTransaction(ctx, offsets, meta) }); err != nil {
			return w.abortAfter("send offsets to the transaction", err)
		}
	}
	if err := retry(ctx, func() error { return w.prod.CommitTransaction(ctx) }); err != nil {
		return w.abortAfter("commit transaction", err)
	}
	w.open = false
	clear(w.offsets)
	return nil
}

// retry calls f again while it fails with a retriable error.
func retry(ctx context.Context, f func() error) error {
	for {
		err := f()
		var ke kafka.Error
		if err == nil || !errors.As(err, &ke) || !ke.IsRetriable() || ke.TxnRequiresAbort() || ctx.Err() != nil {
			return err
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// abortAfter aborts the open transaction after err if librdkafka says
// it requires that (for instance a rebalance made the group metadata
// stale), or fails the worker with err.
func (w *worker) abortAfter(what string, err error) error {
	var ke kafka.Error
	if !errors.As(err, &ke) || !ke.TxnRequiresAbort() {
		return fmt.Errorf("%s: %w", what, err)
	}
	slog.Warn("aborting the transaction", "worker", w.name, "after", what, "err", err)
	return w.abort()
}

// abort aborts the open transaction, drops every count and marks the
// assignment for a rewind to the committed offsets.
func (w *worker) abort() error {
	if w.open {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := retry(ctx, func() error { return w.prod.AbortTransaction(ctx) }); err != nil {
			return fmt.Errorf("abort transaction: %w", err)
		}
		w.open = false
	}
	clear(w.offsets)
	clear(w.counts)
	for p := range w.assigned {
		w.pending[p] = true
	}
	w.rewind = true
	return nil
}

// rebalance is the consumer's rebalance callback (cooperative: the
// partitions given or taken, not the whole assignment). It runs inside
// Poll, on the worker's goroutine.
func (w *worker) rebalance(c *kafka.Consumer, ev kafka.Event) error {
	switch e := ev.(type) {
	case kafka.AssignedPartitions:
		for _, tp := range e.Partitions {
			w.assigned[tp.Partition] = true
			w.pending[tp.Partition] = true
		}
		if err := c.IncrementalAssign(e.Partitions); err != nil {
			w.fail(fmt.Errorf("incremental assign: %w", err))
		}
	case kafka.RevokedPartitions:
		if w.open && !w.closing {
			// Records of the revoked partitions are in the open
			// transaction: it must not commit, and their new owner
			// must not wait for it.
			if err := w.abort(); err != nil {
				w.fail(err)
			}
		}
		for _, tp := range e.Partitions {
			delete(w.assigned, tp.Partition)
			delete(w.pending, tp.Partition)
			delete(w.counts, tp.Partition)
		}
		if err := c.IncrementalUnassign(e.Partitions); err != nil {
			w.fail(fmt.Errorf("incremental unassign: %w", err))
		}
	}
	return nil
}

func (w *worker) fail(err error) {
	if w.err == nil {
		w.err = err
	}
}

// seekCommitted moves every assigned partition back to its committed
// offset (the start when none is committed), after an abort.
func (w *worker) seekCommitted() error {
	w.rewind = false
	var tps []kafka.TopicPartition
	for p := range w.assigned {
		tps = append(tps, kafka.TopicPartition{Topic: &w.input, Partition: p})
	}
	if len(tps) == 0 {
		return nil
	}
	committed, err := w.cons.Committed(tps, 60000)
	if err != nil {
		return fmt.Errorf("committed offsets: %w", err)
	}
	for i := range committed {
		if committed[i].Offset < 0 {
			committed[i].Offset = kafka.OffsetBeginning
		}
	}
	res, err := w.cons.SeekPartitions(committed)
	if err != nil {
		return fmt.Errorf("seek to the committed offsets: %w", err)
	}
	for _, tp := range res {
		if tp.Error != nil {
			return fmt.Errorf("seek %s[%d] to the committed offset: %w", w.input, tp.Partition, tp.Error)
		}
	}
	return nil
}

// restore reads the counts of the pending partitions from their changelog
// partitions, with read_committed, to the end.
//
// The end is the last stable offset once it equals the high watermark: no
// transaction is open on the partition then, so that a previous owner's
// commit whose markers are still being written is waited for, not missed.
// Every changelog write is transactional, so the last record below that end
// is a transaction marker, which a read_committed consumer does not
// deliver: a partition is read when its end-of-partition event reports the
// end.
func (w *worker) restore(ctx context.Context) error {
	parts := make([]int32, 0, len(w.pending))
	for p := range w.pending {
		parts = append(parts, p)
	}
	ends, err := w.stableEnds(ctx, parts)
	if err != nil {
		return err
	}
	var start []kafka.TopicPartition
	for _, p := range parts {
		w.counts[p] = map[string]int64{}
		if ends[p] > 0 {
			start = append(start, kafka.TopicPartition{Topic: &w.changelog, Partition: p, Offset: kafka.OffsetBeginning})
		}
	}
	clear(w.pending)
	if len(start) == 0 {
		return nil
	}
	cc := w.c.consumerConfig(w.name+"-restore", w.c.id+".restore") // assigned, never joins or commits
	_ = cc.SetKey("enable.partition.eof", true)
	r, err := kafka.NewConsumer(cc)
	if err != nil {
		return err
	}
	defer r.Close()
	if err := r.Assign(start); err != nil {
		return fmt.Errorf("restore %s: %w", w.changelog, err)
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	left, n := len(start), 0
	done := map[int32]bool{}
	finish := func(p int32) {
		if !done[p] {
			done[p] = true
			left--
		}
	}
	for left > 0 {
		if ctx.Err() != nil {
			return fmt.Errorf("restore %s: %d partitions not read to the end: %w", w.changelog, left, ctx.Err())
		}
		switch e := r.Poll(100).(type) {
		case *kafka.Message:
			p, o := e.TopicPartition.Partition, int64(e.TopicPartition.Offset)
			if o >= ends[p] {
				finish(p)
				continue
			}
			if c, err := strconv.ParseInt(string(e.Value), 10, 64); err == nil {
				w.counts[p][string(e.Key)] = c
				n++
			}
			if o >= ends[p]-1 {
				finish(p)
			}
		case kafka.PartitionEOF:
			if int64(e.Offset) >= ends[e.Partition] {
				finish(e.Partition)
			}
		case kafka.Error:
			if e.IsFatal() {
				return fmt.Errorf("restore %s: %w", w.changelog, e)
			}
		}
	}
	slog.Debug("restored", "worker", w.name, "partitions", parts, "records", n)
	return nil
}

// stableEnds waits until no transaction is open on the given changelog
// partitions (the last stable offset equals the high watermark) and
// returns those offsets.
func (w *worker) stableEnds(ctx context.Context, parts []int32) (map[int32]int64, error) {
	spec := map[kafka.TopicPartition]kafka.OffsetSpec{}
	for _, p := range parts {
		spec[kafka.TopicPartition{Topic: &w.changelog, Partition: p}] = kafka.LatestOffsetSpec
	}
	list := func(level kafka.IsolationLevel) (map[int32]int64, error) {
		lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		res, err := w.adm.ListOffsets(lctx, spec, kafka.SetAdminIsolationLevel(level))
		if err != nil {
			return nil, err
		}
		out := map[int32]int64{}
		for tp, r := range res.ResultInfos {
			if r.Error.Code() != kafka.ErrNoError {
				return nil, r.Error
			}
			out[tp.Partition] = int64(r.Offset)
		}
		return out, nil
	}
	deadline := time.Now().Add(2 * time.Minute) // beyond any transaction timeout
	for {
		high, err := list(kafka.IsolationLevelReadUncommitted)
		var stable map[int32]int64
		if err == nil {
			stable, err = list(kafka.IsolationLevelReadCommitted)
		}
		open := err != nil
		for _, p := range parts {
			if h, ok := high[p]; !ok || stable[p] != h {
				open = true
			}
		}
		if !open {
			return stable, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("restore %s%v: a transaction stays open or the partitions have errors (%v)", w.changelog, parts, err)
		}
		if err := sleep(ctx, 50*time.Millisecond); err != nil {
			return nil, err
		}
	}
}
