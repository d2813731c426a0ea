// Command franz runs the benchmark job (../CONTRACT.md) as a consume,
// count and produce loop on franz-go's kgo.GroupTransactSession: input read
// with read_committed in the consumer group --id, one transaction every
// --commit-ms that holds the results, the counts' changelog records and the
// consumed offsets. It is the "plain Kafka client, exactly-once by hand"
// peer of the suite.
//
// The counts live in a map per input partition. To survive restarts and
// rebalances every new count is also written, in the same transaction, to
// the compacted topic <id>.counts-changelog (key uuid, value the count in
// decimal), to the partition of the input record; a partition's counts are
// read back from there, with read_committed, before its first record is
// counted. This is Kafka Streams' changelog design, kept small.
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
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

type config struct {
	brokers     []string
	input       string
	output      string
	id          string
	instance    string
	parallelism int
	commit      time.Duration
	logLevel    kgo.LogLevel
}

// session names session i: its transactional id, group instance id and
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
		fmt.Fprintln(os.Stderr, "franz:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, c); err != nil {
		fmt.Fprintln(os.Stderr, "franz:", err)
		return 1
	}
	return 0
}

func parseFlags(args []string) (*config, error) {
	var (
		c       config
		brokers string
		commit  int
		verbose bool
	)
	fs := flag.NewFlagSet("franz", flag.ContinueOnError)
	fs.StringVar(&brokers, "brokers", "", "Kafka bootstrap servers, host:port[,host:port...]")
	fs.StringVar(&c.input, "input", "", "input topic")
	fs.StringVar(&c.output, "output", "", "output topic")
	fs.StringVar(&c.id, "id", "", "the job's durable identity: consumer group, transactional id prefix, changelog topic prefix")
	fs.StringVar(&c.instance, "instance", "", "this process's name within the job, for a job run as several processes (each needs its own): sessions are named <id>-<instance>-<i> instead of <id>-<i>")
	fs.IntVar(&c.parallelism, "parallelism", 1, "transact sessions in this process, each with its own client")
	fs.IntVar(&commit, "commit-ms", 1000, "transaction commit interval in milliseconds")
	fs.BoolVar(&verbose, "v", false, "log kgo at info level (default: warnings and errors)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if brokers == "" || c.input == "" || c.output == "" || c.id == "" {
		return nil, errors.New("--brokers, --input, --output and --id are required")
	}
	if c.parallelism < 1 || commit < 1 {
		return nil, errors.New("--parallelism and --commit-ms must be positive")
	}
	c.brokers = strings.Split(brokers, ",")
	c.commit = time.Duration(commit) * time.Millisecond
	c.logLevel = kgo.LogLevelWarn
	if verbose {
		c.logLevel = kgo.LogLevelInfo
	}
	return &c, nil
}

func (c *config) logger() kgo.Logger { return kgo.BasicLogger(os.Stderr, c.logLevel, nil) }

func run(ctx context.Context, c *config) error {
	if err := ensureChangelog(ctx, c); err != nil {
		return err
	}
	workers := make([]*worker, c.parallelism)
	defer func() {
		for _, w := range workers {
			if w != nil {
				w.sess.Close()
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

	// One session failing stops the others (they commit and leave) and
	// the process, which the suite may start again.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, len(workers))
	for _, w := range workers {
		go func() { errs <- w.run(ctx) }()
	}
	var first error
	for range workers {
		if err := <-errs; err != nil && first == nil {
			slog.Error("session failed", "err", err)
			first = err
			cancel()
		}
	}
	return first
}

// ensureChangelog creates the compacted changelog topic with the input's
// partition count, or checks the count of the one that exists.
func ensureChangelog(ctx context.Context, c *config) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.brokers...), kgo.WithLogger(c.logger()))
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	topics, err := adm.ListTopics(ctx, c.input, c.changelog())
	if err != nil {
		return fmt.Errorf("list topics: %w", err)
	}
	in, ok := topics[c.input]
	if !ok || in.Err != nil {
		return fmt.Errorf("input topic %s: %v", c.input, in.Err)
	}
	parts := len(in.Partitions)
	if log, ok := topics[c.changelog()]; ok && log.Err == nil {
		if len(log.Partitions) != parts {
			return fmt.Errorf("changelog %s has %d partitions, the input %d", c.changelog(), len(log.Partitions), parts)
		}
		return nil
	}
	compact := "compact"
	_, err = adm.CreateTopic(ctx, int32(parts), -1, map[string]*string{"cleanup.policy": &compact}, c.changelog())
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		return fmt.Errorf("create changelog %s: %w", c.changelog(), err)
	}
	// A new topic takes a moment to have leaders everywhere; restores
	// list its offsets at once.
	deadline := time.Now().Add(30 * time.Second)
	for {
		ends, err := adm.ListEndOffsets(ctx, c.changelog())
		if err == nil {
			err = ends.Error()
		}
		if err == nil && len(ends[c.changelog()]) == parts {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("changelog %s not ready: %v", c.changelog(), err)
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// worker is one transact session and the counts of the partitions it owns.
// Only its run goroutine touches counts; the group's revoke and lost
// callbacks set dropped.
type worker struct {
	c    *config
	sess *kgo.GroupTransactSession
	adm  *kadm.Client

	counts map[int32]map[string]int64 // input partition -> uuid -> count

	mu      sync.Mutex
	dropped bool  // partitions were revoked or lost since the counts were last reset
	failed  error // the first produce error of the open transaction
}

func newWorker(ctx context.Context, c *config, i int) (*worker, error) {
	w := &worker{c: c, counts: map[int32]map[string]int64{}}
	name := c.session(i)
	drop := func(_ context.Context, _ *kgo.Client, parts map[string][]int32) {
		if len(parts[c.input]) > 0 {
			w.mu.Lock()
			w.dropped = true
			w.mu.Unlock()
		}
	}
	sess, err := kgo.NewGroupTransactSession(
		kgo.SeedBrokers(c.brokers...),
		kgo.WithLogger(c.logger()),
		kgo.ClientID(name),
		kgo.TransactionalID(name),
		kgo.ConsumerGroup(c.id),
		// Static membership: a session started again under the same name
		// (after SIGKILL) takes its partitions back at once instead of
		// waiting for the dead member's session timeout.
		kgo.InstanceID(name),
		kgo.ConsumeTopics(c.input),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.RequireStableFetchOffsets(), // a no-op in kgo v1.22, where it is always on
		kgo.RecordPartitioner(partitioner{changelog: c.changelog(), keyed: kgo.StickyKeyPartitioner(nil)}),
		kgo.OnPartitionsRevoked(drop),
		kgo.OnPartitionsLost(drop),
	)
	if err != nil {
		return nil, err
	}
	w.sess = sess
	w.adm = kadm.NewClient(sess.Client())
	// Loading the producer id fences an earlier process with the same
	// transactional id and aborts its open transaction, so that restores
	// below do not wait for it to time out.
	if _, _, err := sess.Client().ProducerID(ctx); err != nil {
		sess.Close()
		return nil, fmt.Errorf("session %s: init producer id: %w", name, err)
	}
	return w, nil
}

// partitioner sends changelog records to the partition set on them (the
// input record's) and everything else by key, as Kafka's Java producer does
// (murmur2).
type partitioner struct {
	changelog string
	keyed     kgo.Partitioner
}

func (p partitioner) ForTopic(topic string) kgo.TopicPartitioner {
	if topic == p.changelog {
		return kgo.ManualPartitioner().ForTopic(topic)
	}
	return p.keyed.ForTopic(topic)
}

// run is the session's loop: begin, poll and count until the commit
// interval is up, end (commit), begin again.
//
// A rebalance that takes partitions from the session ends the open
// transaction with an abort as soon as the loop sees it (the session would
// abort it at End anyway), and every count is dropped and read again from
// the changelog when its partition's next record comes: the aborted records
// never happened, and a partition that comes back may have been counted
// elsewhere meanwhile. Rebalances that only add partitions abort nothing.
func (w *worker) run(ctx context.Context) error {
	if err := w.sess.Begin(); err != nil {
		return err
	}
	next := time.Now().Add(w.c.commit)
	for {
		pctx, cancel := context.WithDeadline(ctx, next)
		fetches := w.sess.PollFetches(pctx)
		cancel()
		if fetches.IsClientClosed() {
			return errors.New("client closed")
		}
		fetches.EachError(func(t string, p int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
				slog.Warn("fetch", "topic", t, "partition", p, "err", err)
			}
		})
		end := kgo.TryCommit
		w.mu.Lock()
		dropped := w.dropped
		w.mu.Unlock()
		if dropped {
			// The abort rewinds the session to the committed offsets:
			// what this poll returned is fetched again.
			end = kgo.TryAbort
		} else if err := w.count(context.WithoutCancel(ctx), fetches); err != nil {
			// Polled records are counted even when SIGTERM came
			// meanwhile: the final commit includes their offsets.
			return err
		}
		if ctx.Err() != nil {
			// SIGTERM: commit what was counted, then leave.
			ectx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			return w.end(ectx, end)
		}
		if end == kgo.TryAbort || !time.Now().Before(next) {
			if err := w.end(ctx, end); err != nil {
				return err
			}
			if err := w.sess.Begin(); err != nil {
				return err
			}
			next = time.Now().Add(w.c.commit)
		}
	}
}

// count counts every polled record and produces its result and changelog
// record into the open transaction. End commits the polled offsets, so
// every polled record must be counted here.
func (w *worker) count(ctx context.Context, fetches kgo.Fetches) error {
	var missing []int32
	fetches.EachPartition(func(p kgo.FetchTopicPartition) {
		if _, ok := w.counts[p.Partition]; !ok && len(p.Records) > 0 {
			missing = append(missing, p.Partition)
		}
	})
	if len(missing) > 0 {
		if err := w.restore(ctx, missing); err != nil {
			return err
		}
	}
	var err error
	fetches.EachRecord(func(r *kgo.Record) {
		if err != nil {
			return
		}
		var ev event
		if ev, err = decodeEvent(r.Value); err != nil {
			err = fmt.Errorf("%s[%d]@%d: %w", r.Topic, r.Partition, r.Offset, err)
			return
		}
		counts := w.counts[r.Partition]
		n := counts[ev.UUID] + 1
		counts[ev.UUID] = n
		key := []byte(ev.UUID)
		// Produce's context only bounds waiting for buffer space: not
		// the run context, so that SIGTERM does not fail records that
		// the final commit should include.
		w.sess.Produce(context.Background(), &kgo.Record{Topic: w.c.output, Key: key, Value: encodeResult(ev, n)}, w.produced)
		w.sess.Produce(context.Background(), &kgo.Record{Topic: w.c.changelog(), Partition: r.Partition, Key: key, Value: strconv.AppendInt(nil, n, 10)}, w.produced)
	})
	return err
}

func (w *worker) produced(_ *kgo.Record, err error) {
	if err != nil {
		w.mu.Lock()
		if w.failed == nil {
			w.failed = err
		}
		w.mu.Unlock()
	}
}

// end flushes and ends the open transaction: a commit if try is TryCommit,
// no record failed and the group did not rebalance since Begin; otherwise
// an abort, after which every count is read again from the changelog.
func (w *worker) end(ctx context.Context, try kgo.TransactionEndTry) error {
	if try == kgo.TryCommit {
		if err := w.sess.Client().Flush(ctx); err != nil {
			return err
		}
	}
	w.mu.Lock()
	failed := w.failed
	w.failed = nil
	w.mu.Unlock()
	if failed != nil {
		slog.Warn("aborting the transaction: a record failed", "err", failed)
		try = kgo.TryAbort
	}
	committed, err := w.sess.End(ctx, try)
	if err != nil {
		return fmt.Errorf("end transaction: %w", err)
	}
	if !committed {
		// Reset the flag before the counts: a revoke reported after
		// this point aborts the next transaction too.
		w.mu.Lock()
		w.dropped = false
		w.mu.Unlock()
		clear(w.counts)
	}
	return nil
}

// restore reads the counts of the given input partitions from their
// changelog partitions, with read_committed, to the end.
//
// The end is the last stable offset once it equals the high watermark: no
// transaction is open on the partition then, so that a previous owner's
// commit whose markers are still being written is waited for, not missed.
// Every changelog write is transactional, so the last record below that end
// is a transaction marker: with control records kept, reading reaches
// offset end-1.
func (w *worker) restore(ctx context.Context, parts []int32) error {
	topic := w.c.changelog()
	ends := map[int32]int64{}
	deadline := time.Now().Add(2 * time.Minute) // beyond any transaction timeout
	for open := true; open; {
		high, stable, err := w.listOffsets(ctx, topic)
		if err != nil {
			return err
		}
		open = false
		for _, p := range parts {
			h, okh := high.Lookup(topic, p)
			s, oks := stable.Lookup(topic, p)
			if !okh || !oks || h.Err != nil || s.Err != nil || s.Offset != h.Offset {
				open = true
			}
			ends[p] = s.Offset
		}
		if open {
			if time.Now().After(deadline) {
				return fmt.Errorf("restore %s%v: a transaction stays open or the partitions have errors", topic, parts)
			}
			if err := sleep(ctx, 50*time.Millisecond); err != nil {
				return err
			}
		}
	}

	start := map[int32]kgo.Offset{}
	for _, p := range parts {
		w.counts[p] = map[string]int64{}
		if ends[p] > 0 {
			start[p] = kgo.NewOffset().AtStart()
		}
	}
	if len(start) == 0 {
		return nil
	}
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(w.c.brokers...),
		kgo.WithLogger(w.c.logger()),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: start}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(),
	)
	if err != nil {
		return err
	}
	defer cl.Close()
	n := 0
	for len(start) > 0 {
		fetches := cl.PollFetches(ctx)
		if err := fetches.Err(); err != nil {
			return fmt.Errorf("restore %s: %w", topic, err)
		}
		fetches.EachRecord(func(r *kgo.Record) {
			end := ends[r.Partition]
			if r.Offset >= end {
				return
			}
			if !r.Attrs.IsControl() {
				if c, err := strconv.ParseInt(string(r.Value), 10, 64); err == nil {
					w.counts[r.Partition][string(r.Key)] = c
					n++
				}
			}
			if r.Offset == end-1 {
				delete(start, r.Partition)
			}
		})
	}
	slog.Debug("restored", "partitions", parts, "records", n)
	return nil
}

// listOffsets lists the high watermarks and the last stable offsets of
// topic's partitions. Partition errors are left in the results for the
// caller to wait out.
func (w *worker) listOffsets(ctx context.Context, topic string) (high, stable kadm.ListedOffsets, err error) {
	if high, err = w.adm.ListEndOffsets(ctx, topic); err != nil {
		return nil, nil, fmt.Errorf("list end offsets of %s: %w", topic, err)
	}
	if stable, err = w.adm.ListCommittedOffsets(ctx, topic); err != nil {
		return nil, nil, fmt.Errorf("list stable offsets of %s: %w", topic, err)
	}
	return high, stable, nil
}
