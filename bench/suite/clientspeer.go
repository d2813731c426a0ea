package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/kordproject/kord/consumer"
	"github.com/kordproject/kord/producer"
	"github.com/kordproject/kord/serde"
)

// clientsPeer is the benchmark job on kord's client packages alone, with
// no engine: `suite clients-peer`, the suite's system kord-clients (run
// only when -systems names it). Each of --parallelism readers reads its
// share of the input's partitions with a consumer.Source (the batch read
// kord's sources use, read_committed, kord's fetch-queue defaults),
// decodes each event with the same codec as kord-peer (serde.JSON),
// counts it in a map of its own, encodes its result and hands the batch
// to a writer. A writer queues the batches it gets with ProduceBatch on a
// transactional producer with CommitReports (the batch write kord's
// exactly-once sink uses, with the sink's 4096 KiB produce queue), and
// every --commit-ms commits the transaction with the offsets after its
// last batches. --writers 1 (the default) is kord's shape, one sink for
// the job; --writers N gives every reader a producer of its own.
//
// With --copy it writes each input record unchanged instead (the suite's
// kord-clients-copy, checked only for every event's presence): the job's
// reading, transactions and writing without its decoding, counting and
// encoding.
//
// It measures how fast the job can go on these clients, librdkafka
// underneath, on this machine: the ceiling for any engine built on them.
// It is a measurement, not a peer: the counts are not kept anywhere but
// in memory, so a restart counts again from zero (the throughput runs
// never restart a system), and a partition is never rebalanced.
func clientsPeer(args []string) int {
	fs := flag.NewFlagSet("clients-peer", flag.ContinueOnError)
	brokers := fs.String("brokers", "", "bootstrap servers")
	input := fs.String("input", "", "input topic")
	output := fs.String("output", "", "output topic")
	id := fs.String("id", "", "transactional.id prefix and the group the offsets are committed to")
	par := fs.Int("parallelism", 2, "readers, each with its own consumer")
	writers := fs.Int("writers", 1, "writers, each with its own transactional producer, fed by every writers-th reader (at most --parallelism)")
	commit := fs.Int("commit-ms", 1000, "transaction interval in ms")
	copyOnly := fs.Bool("copy", false, "write each input record's key and value unchanged: no decoding, counting or encoding (the suite's kord-clients-copy)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *brokers == "" || *input == "" || *output == "" || *id == "" || *par < 1 || *writers < 1 || *writers > *par {
		fmt.Fprintln(os.Stderr, "clients-peer: --brokers, --input, --output and --id are required; 1 <= --writers <= --parallelism")
		return 2
	}
	sig, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// A failure anywhere stops everything, as a stop does.
	ctx, fail := context.WithCancelCause(sig)
	defer fail(nil)
	addrs := strings.Split(*brokers, ",")
	meta, err := consumer.New(consumer.Brokers(addrs...))
	if err != nil {
		fmt.Fprintln(os.Stderr, "clients-peer:", err)
		return 1
	}
	start, err := meta.Resolve(ctx, *input, consumer.FromGroup(*id).OrReset(consumer.ResetEarliest))
	meta.Close()
	if err != nil {
		fmt.Fprintln(os.Stderr, "clients-peer:", err)
		return 1
	}
	var (
		wg      sync.WaitGroup
		ready   sync.WaitGroup
		readers = make([]sync.WaitGroup, *writers)
		inboxes = make([]chan clientsBatch, *writers)
		ended   = make([]chan struct{}, *writers) // closed when the writer returns
		mu      sync.Mutex
		errs    []error
	)
	failed := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
		fail(err)
	}
	ready.Add(*writers)
	for i := range *writers {
		inboxes[i], ended[i] = make(chan clientsBatch, 4), make(chan struct{})
		w := &clientsWriter{brokers: addrs, group: *id, txnID: *id + "-" + strconv.Itoa(i), every: time.Duration(*commit) * time.Millisecond}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer close(ended[i])
			if err := w.run(inboxes[i], ready.Done); err != nil {
				failed(err)
			}
		}()
	}
	for i := range *par {
		var mine []consumer.Position
		for _, p := range start {
			if int(p.Partition)%*par == i {
				mine = append(mine, p)
			}
		}
		r := &clientsReader{brokers: addrs, output: *output, copy: *copyOnly}
		inbox, writerEnded := inboxes[i%*writers], ended[i%*writers]
		readers[i%*writers].Add(1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer readers[i%*writers].Done()
			if err := r.run(ctx, mine, inbox, writerEnded); err != nil {
				failed(err)
			}
		}()
	}
	for i := range *writers {
		go func() { readers[i].Wait(); close(inboxes[i]) }() // a writer ends after its readers
	}
	go func() { ready.Wait(); fmt.Println("ready") }()
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		fmt.Fprintln(os.Stderr, "clients-peer:", err)
		return 1
	}
	return 0
}

// clientsBatch is one read batch's output and the input positions after
// it.
type clientsBatch struct {
	recs []producer.Record[[]byte, []byte]
	ends []producer.Offset
}

type clientsReader struct {
	brokers []string
	output  string
	copy    bool
}

// run reads until ctx ends, handing every batch to inbox, or until its
// writer has ended (writerEnded closed: it failed).
func (r *clientsReader) run(ctx context.Context, mine []consumer.Position, inbox chan<- clientsBatch, writerEnded <-chan struct{}) error {
	src, err := consumer.New(consumer.Brokers(r.brokers...))
	if err != nil {
		return err
	}
	defer src.Close()
	if err := src.Assign(ctx, mine); err != nil {
		return err
	}
	events, results := serde.JSON[event](), serde.JSON[result]()
	counts := map[string]int64{}
	var recs []consumer.Record
	for ctx.Err() == nil {
		recs, err = src.PollAppend(ctx, recs[:0], 512, 50*time.Millisecond)
		if err != nil && ctx.Err() == nil {
			return err
		}
		if len(recs) == 0 {
			continue
		}
		b := clientsBatch{recs: make([]producer.Record[[]byte, []byte], 0, len(recs))}
		var buf []byte // the batch's encoded results
		for _, rec := range recs {
			if r.copy {
				b.recs = append(b.recs, producer.Record[[]byte, []byte]{Topic: r.output, Key: rec.Key, Value: rec.Value})
				continue
			}
			e, err := events.Decode(rec.Value)
			if err != nil {
				return fmt.Errorf("%s[%d]@%d: %w", rec.Topic, rec.Partition, rec.Offset, err)
			}
			n := counts[e.UUID] + 1
			counts[e.UUID] = n
			at := len(buf)
			if buf, err = results.Encode(buf, result{UUID: e.UUID, Seq: e.Seq, Count: n, TS: e.TS}); err != nil {
				return err
			}
			// The input's key is the uuid (Java placement), as kord-peer's sink's.
			b.recs = append(b.recs, producer.Record[[]byte, []byte]{Topic: r.output, Key: rec.Key, Value: buf[at:len(buf):len(buf)]})
		}
		for _, pos := range src.Positions() {
			b.ends = append(b.ends, producer.Offset{Topic: pos.Topic, Partition: pos.Partition, Offset: pos.Offset})
		}
		select { // not given up at a stop: the writer commits what was read
		case inbox <- b:
		case <-writerEnded:
			return nil
		}
	}
	return nil
}

type clientsWriter struct {
	brokers []string
	group   string
	txnID   string
	every   time.Duration
}

// run writes the batches of inbox in transactions of every's length, each
// with the offsets after its last batches, until inbox is closed; then it
// commits what it has.
func (w *clientsWriter) run(inbox <-chan clientsBatch, ready func()) (err error) {
	defer func() {
		if ready != nil {
			ready() // release the ready line's wait; the exit code says it failed
		}
	}()
	p, err := producer.New(serde.Bytes(), serde.Bytes(),
		producer.Brokers(w.brokers...), producer.TransactionalID(w.txnID), producer.CommitReports(),
		producer.Set("queue.buffering.max.kbytes", "4096"))
	if err != nil {
		return err
	}
	defer p.Close()
	// Every call has its own deadline: the writer is stopped by its inbox
	// closing, and still commits then.
	bounded := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.Background(), 30*time.Second)
	}
	tctx, cancel := bounded()
	err = p.InitTransactions(tctx)
	cancel()
	if err != nil {
		return err
	}
	ends := map[int32]producer.Offset{}
	open := false
	commit := func() error {
		tctx, cancel := bounded()
		defer cancel()
		offs := make([]producer.Offset, 0, len(ends))
		for _, o := range ends {
			offs = append(offs, o)
		}
		if err := p.SendOffsetsToTransaction(tctx, w.group, offs); err != nil {
			return err
		}
		if err := p.CommitTransaction(tctx); err != nil {
			return err
		}
		open = false
		if ready != nil {
			ready()
			ready = nil
		}
		return nil
	}
	tick := time.NewTicker(w.every)
	defer tick.Stop()
	for {
		select {
		case b, ok := <-inbox:
			if !ok {
				if open {
					return commit()
				}
				return nil
			}
			if !open {
				if err := p.BeginTransaction(); err != nil {
					return err
				}
				open = true
			}
			for out := b.recs; len(out) > 0; {
				n, err := p.ProduceBatch(context.Background(), out)
				if err != nil {
					return err
				}
				out = out[n:]
			}
			for _, o := range b.ends {
				ends[o.Partition] = o
			}
		case <-tick.C:
			if open {
				if err := commit(); err != nil {
					return err
				}
			}
		}
	}
}
