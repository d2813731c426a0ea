package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"gocloud.dev/blob"

	// The buckets -checkpoints can name here: file:// and mem://. A
	// program keeping its checkpoints in S3, GCS or Azure imports
	// gocloud.dev/blob/s3blob, gcsblob or azureblob the same way.
	_ "gocloud.dev/blob/fileblob"
	_ "gocloud.dev/blob/memblob"

	"github.com/kordproject/kord/checkpoint/blobstore"
	"github.com/kordproject/kord/kafkaio"
	"github.com/kordproject/kord/keyed"
	"github.com/kordproject/kord/kordhttp"
	"github.com/kordproject/kord/serde"
)

// Result answers one event: the user's count after it.
type Result struct {
	UUID   string `json:"uuid" parquet:"uuid"`
	Seq    int64  `json:"seq" parquet:"seq"`
	Count  int64  `json:"count" parquet:"count"`
	Action string `json:"action" parquet:"action"`
	// With -pages: the event's page, and the result's number within it
	// (the page stage's count).
	Page  string `json:"page,omitempty" parquet:"page,optional"`
	PageN int64  `json:"page_n,omitempty" parquet:"page_n,optional"`
}

type summary struct {
	recovery    time.Duration
	checkpoints int
	processes   int           // -processes
	killed      int           // processes SIGKILLed (and started again)
	processing  time.Duration // -processes: from the first start to the last exit
}

// userCounter counts each user's events in keyed state and refuses an
// event out of order. In at-least-once mode an event already counted can
// come again (the restored state may be ahead of the restored offsets, as
// barriers are not aligned): it is answered again with its own count and
// not counted twice.
type userCounter struct {
	n           *keyed.ValueState[int64]
	atLeastOnce bool
}

func (c *userCounter) Open(b *keyed.Backend) (err error) {
	c.n, err = keyed.Value(b, "events", serde.Int64())
	return err
}

func (c *userCounter) Process(_ []byte, e Event, out *keyed.Collector[Result]) error {
	n, _ := c.n.Get()
	if c.atLeastOnce && e.Seq < n {
		out.Emit(Result{UUID: e.UUID, Seq: e.Seq, Count: e.Seq + 1, Action: e.Action, Page: e.Page})
		return nil
	}
	if e.Seq != n {
		return fmt.Errorf("user %s: event %d after %d events: out of order", e.UUID, e.Seq, n)
	}
	c.n.Set(n + 1)
	out.Emit(Result{UUID: e.UUID, Seq: e.Seq, Count: n + 1, Action: e.Action, Page: e.Page})
	return nil
}

// normalizePage is a page's path in one form: lower case, no trailing
// slash, no query.
func normalizePage(p string) string {
	p, _, _ = strings.Cut(p, "?")
	return strings.ToLower(strings.TrimSuffix(p, "/"))
}

// process runs the keyed job until every event's result is committed,
// crashing it once part-way when o.crash is set.
func process(ctx context.Context, o options, sum *summary) error {
	// The checkpoints of a job on topics named with -input go where the
	// job's name says (keyed.DefaultDir), so that a later -phase process
	// on the same input resumes; a run on fresh topics uses a temporary
	// directory.
	dir := o.dir
	if dir == "" && o.freshTopics {
		d, err := os.MkdirTemp("", "kord-userbehavior-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	// The job's name gives the sink its transactional.id and commit group:
	// one per input topic, so that runs on fresh topics never meet.
	name := strings.NewReplacer(".", "-").Replace("userbehavior-" + o.topic)
	// A bucket URL (file:///shared/ckpt, s3://bucket?region=...) keeps
	// the checkpoints in object storage, under the job's name.
	var bucket *blob.Bucket
	if strings.Contains(dir, "://") {
		b, err := blob.OpenBucket(ctx, dir)
		if err != nil {
			return fmt.Errorf("-checkpoints %s: %w", dir, err)
		}
		defer b.Close()
		bucket = b
	}
	var commits atomic.Int64
	var crashedAt atomic.Int64 // unix nanos
	var recovered atomic.Int64
	crash := o.crash && o.instance == ""
	// onCommit sees every committed checkpoint (keyed.OnCommit): it counts
	// them, measures the recovery, and fails the job once, after the
	// second commit, as a failing task would. The restart strategy then
	// restarts it from the checkpoint Kafka recorded.
	// runCtx is the jobs' context: done when the output is complete (or
	// the program is stopped), and the job then stops with a final
	// checkpoint, which is not failed on purpose.
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	onCommit := func(uint64) error {
		n := commits.Add(1)
		if at := crashedAt.Load(); at != 0 && recovered.Load() == 0 {
			recovered.Store(time.Now().UnixNano() - at)
		}
		if crash && n == 2 && runCtx.Err() == nil && crashedAt.CompareAndSwap(0, time.Now().UnixNano()) {
			o.say("\njob failed on purpose after its second commit; the restart strategy restarts it from the checkpoint Kafka recorded\n")
			return errOnPurpose
		}
		return nil
	}
	client := o.client
	// storage is where the job keeps its checkpoints.
	storage := func() []keyed.Opt {
		switch {
		case bucket != nil:
			return []keyed.Opt{keyed.CheckpointStorage(blobstore.New(bucket, name+"/"))}
		case dir != "":
			return []keyed.Opt{keyed.Dir(dir)}
		}
		return nil
	}
	// build declares the job.
	build := func() *keyed.Job {
		opts := []keyed.Opt{keyed.CheckpointInterval(o.interval), keyed.RestartStrategy(keyed.FixedDelay(3, time.Second)), keyed.OnCommit(onCommit)}
		if o.atLeastOnce {
			opts = append(opts, keyed.AtLeastOnce())
		}
		if o.instance != "" {
			// One of several processes: Kafka's group assigns each its
			// partitions; a silent one's move to the others after the
			// session timeout.
			opts = append(opts, keyed.Instance(o.instance))
		}
		session := kafkaio.SessionTimeout(o.session)
		src := kafkaio.NewSource(client, o.topic, serde.JSON[Event]())
		j := keyed.NewJob(name, append(opts, storage()...)...)
		sink := kafkaio.NewSink(client, o.output, serde.JSON[Result](), session,
			kafkaio.Key(func(r Result) string { return r.UUID }, serde.String()))
		s := keyed.FromSource(j, "events", 2, src)
		if o.pages {
			// The seed's identityUri normalization, chained into the source
			// tasks.
			s = keyed.MapValues(s, func(e Event) Event { e.Page = normalizePage(e.Page); return e })
		}
		newOp := func() keyed.Operator[Event, Result] { return &userCounter{atLeastOnce: o.atLeastOnce} }
		var out *keyed.Stream[Result]
		if o.keyBy {
			// Keyed by uuid. On several processes the records cross
			// between them through the job's hop topic,
			// kord.<job>.count.repartition, encoded as JSON.
			out = keyed.Process(keyed.KeyByString("uuid", func(e Event) string { return e.UUID }, s).Serde(serde.JSON[Event]()), "count", 2, newOp)
		} else {
			out = keyed.Process(keyed.ByPartition(s), "count", 2, newOp)
		}
		if o.pages {
			// The second stage: re-keyed by page, each result numbered
			// within its page.
			byPage := keyed.KeyByString("page", func(r Result) string { return r.Page }, out).Serde(serde.JSON[Result]())
			out = keyed.ProcessValue(byPage, "pages", 2, serde.Int64(), func(_ string, r Result, n *keyed.ValueState[int64], out *keyed.Collector[Result]) error {
				c, _ := n.Get()
				n.Set(c + 1)
				r.PageN = c + 1
				out.Emit(r)
				return nil
			})
		}
		keyed.ToSink(out, "results", sink)
		if o.lake != "" {
			// The same results, landed as files: published when the
			// checkpoint that carries them commits in Kafka.
			keyed.ToSink(out, "lake", lakeSink(o.lake, o.lakeCompact))
		}
		return j
	}
	if o.reset {
		if err := build().Forget(ctx); err != nil {
			return err
		}
		o.say("job %s forgotten: it starts over from the beginning of %s\n", name, o.topic)
	}

	watchErr := make(chan error, 1)
	if o.instance == "" {
		go func() { watchErr <- watch(runCtx, o, stop, nil) }()
	} else {
		// One process of several runs until it is stopped (SIGTERM), as a
		// deployment's process does; -processes' parent watches the output.
		watchErr <- nil
	}

	// One Job for the whole process: a Run after another resets it, and
	// its figures (-http's /metrics) go on across them.
	j := build()
	if o.http != "" {
		stopHTTP, err := serveHTTP(o, j)
		if err != nil {
			return err
		}
		defer stopHTTP()
	}
	start := time.Now()
	for {
		err := j.Run(runCtx)
		if errors.Is(err, errOnPurpose) {
			// The failure met the stop that follows complete output: a
			// stopping job is not restarted by its strategy, so start it
			// again here, as a supervisor would. It restores the checkpoint
			// Kafka recorded and stops with a final one.
			continue
		}
		if err != nil {
			return err
		}
		break
	}
	if err := <-watchErr; err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	sum.checkpoints = int(commits.Load())
	sum.recovery = time.Duration(recovered.Load())
	o.say("\nprocessed in %v\n", time.Since(start).Round(time.Millisecond))
	return nil
}

// errOnPurpose is the failure -crash causes after the second commit.
var errOnPurpose = errors.New("failed on purpose, after the second checkpoint committed")

// watch counts committed output with read_committed, shows progress, calls
// progress (if not nil) with the count as it grows, and calls done when
// every event's result is visible.
func watch(ctx context.Context, o options, done func(), progress func(n int)) error {
	c, err := o.newReader(kafka.ConfigMap{
		"group.id": "userbehavior-watch", "enable.auto.commit": false, "isolation.level": "read_committed",
		// A progress count needs no deep prefetch nor large fetches: at
		// librdkafka's defaults (65,536 KiB queued per consumer, fetches
		// of up to 50 MiB) a restarted job's process holds tens of MiB
		// more while this reader catches up on the output from its
		// beginning (the soak saw RSS rise from the first life to the
		// next; a restart that re-reads 300,000 results peaked at 127 to
		// 138 MiB with the default fetch sizes, 106 to 108 MiB with these:
		// bench/RESULTS.md, "Soak").
		"queued.max.messages.kbytes": 4096,
		"fetch.max.bytes":            1 << 20, "max.partition.fetch.bytes": 256 << 10,
	})
	if err != nil {
		return err
	}
	defer c.Close()
	md, err := c.GetMetadata(&o.output, false, 10_000)
	if err != nil {
		return err
	}
	var tps []kafka.TopicPartition
	for _, p := range md.Topics[o.output].Partitions {
		tps = append(tps, kafka.TopicPartition{Topic: &o.output, Partition: p.ID, Offset: kafka.OffsetBeginning})
	}
	if err := c.Assign(tps); err != nil {
		return err
	}
	// n counts distinct results: per user, the results for seq 0..next-1
	// (at-least-once output repeats some after a restart).
	n := 0
	next := map[string]int64{}
	seen := map[string]map[int64]bool{} // -pages
	last := time.Now()
	for n < o.events {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		ev := c.Poll(100)
		if m, ok := ev.(*kafka.Message); ok && m.TopicPartition.Error == nil {
			var res Result
			if err := json.Unmarshal(m.Value, &res); err != nil {
				return fmt.Errorf("%s[%d]@%d: %w", o.output, m.TopicPartition.Partition, m.TopicPartition.Offset, err)
			}
			counted := false
			if o.pages {
				// Through the page stage a user's results come in order per
				// page only: count each (user, seq) once.
				if seen[res.UUID] == nil {
					seen[res.UUID] = map[int64]bool{}
				}
				counted = !seen[res.UUID][res.Seq]
				seen[res.UUID][res.Seq] = true
			} else if res.Seq == next[res.UUID] {
				next[res.UUID]++
				counted = true
			}
			if counted {
				n++
				if progress != nil {
					progress(n)
				}
			}
		}
		if !o.quiet && time.Since(last) > 200*time.Millisecond {
			last = time.Now()
			bar := strings.Repeat("#", 40*n/o.events)
			fmt.Fprintf(o.out(), "\r[%-40s] %d/%d results committed", bar, n, o.events)
		}
	}
	if !o.quiet {
		fmt.Fprintf(o.out(), "\r[%-40s] %d/%d results committed", strings.Repeat("#", 40), n, o.events)
	}
	done()
	return nil
}

// serveHTTP serves j's metrics, liveness and readiness on -http until the
// returned function stops the server.
func serveHTTP(o options, j *keyed.Job) (stop func(), err error) {
	srv, err := kordhttp.Serve(o.http, []*keyed.Job{j}, kordhttp.ReadyWithin(10*o.interval+30*time.Second))
	if err != nil {
		return nil, fmt.Errorf("-http: %w", err)
	}
	o.say("status page, metrics, health and readiness on http://%s/ (/metrics, /healthz, /readyz)\n", srv.Addr())
	return func() { _ = srv.Close() }, nil
}
