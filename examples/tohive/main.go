// Command tohive is the seed's last job, Kafka to Hive: it reads
// access-log JSON from Kafka, normalizes each request's identityUri to
// its pattern (yiyang/user/getById/13782 to yiyang/user/getById/{}),
// lands every event in a Hive table partitioned by event day and hour
// (dt=2026-12-03/hr=08), exactly once, and in the same run writes each
// pattern's running count to Kafka: two sinks, one checkpoint.
//
// A partition commits once the watermark has passed its hour (the
// partition-time trigger, with a delay of an hour): a _SUCCESS file, and
// with -metastore host:port the partition added to the table in the Hive
// Metastore (created as an EXTERNAL table if absent). The job's bounded
// run ends with its input, which passes every hour. A record for an hour
// already committed is late: it lands under _late/ (-late into, the
// default, so that a committed partition's files are final) or in its
// partition, which commits again (-late recommit).
//
// With no flags it runs on an in-process Kafka and a temporary
// directory, checks the table, the counts and the Metastore against the
// input with readers of its own, and prints a query over the table and
// its result through DuckDB when a python with duckdb is at hand:
//
//	go run ./examples/tohive
//
// The data is queryable, in time, the checkpoint interval after its
// events arrive (a file is visible when its checkpoint commits) and, as a
// complete partition, once the watermark passed its hour: the partition's
// hour, plus the commit delay, plus the watermark's lateness, plus the
// checkpoint interval.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/kordproject/kord/admin"
	"github.com/kordproject/kord/examples/accesslog"
	"github.com/kordproject/kord/kafkaio"
	"github.com/kordproject/kord/kordtest"
	"github.com/kordproject/kord/producer"
	"github.com/kordproject/kord/serde"
)

type options struct {
	brokers    string
	properties string
	set        []string
	client     *kafkaio.Client
	topic      string
	phase      string
	events     int
	hours      int
	partitions int
	seed       uint64
	rate       int
	interval   time.Duration
	dir        string // checkpoints
	lake       string
	table      string
	metastore  string
	db         string
	late       string
	rules      string
	duckdb     string
	quiet      bool
	follow     bool
	http       string        // kordhttp on this address
	txnMax     time.Duration // tests: keyed.TransactionMaxTimeout
	fresh      bool          // the topics and lake were made by this run
	log        *slog.Logger
	stdout     io.Writer
}

func (o options) countsTopic() string { return o.topic + ".counts" }
func (o options) dlqTopic() string    { return o.topic + ".dlq" }

func (o options) out() io.Writer {
	if o.stdout == nil {
		return os.Stdout
	}
	return o.stdout
}

func (o options) say(format string, args ...any) {
	if !o.quiet {
		fmt.Fprintf(o.out(), format, args...)
	}
}

func (o options) logger() *slog.Logger {
	if o.log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return o.log
}

func main() { os.Exit(cli(os.Args[1:])) }

// cli parses args, runs, and returns the exit code. SIGINT and SIGTERM
// stop the job gracefully (a final checkpoint).
func cli(args []string) int {
	o, err := parseFlags(args)
	if err != nil {
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "tohive:", err)
		return 1
	}
	return 0
}

func parseFlags(args []string) (options, error) {
	var o options
	f := flag.NewFlagSet("tohive", flag.ContinueOnError)
	f.StringVar(&o.brokers, "brokers", "", "Kafka bootstrap servers; empty (and none in -properties) runs an in-process cluster")
	f.StringVar(&o.properties, "properties", "", "a Java client.properties file for every client")
	f.Func("X", "a librdkafka setting name=value for every client (repeat it)", func(s string) error {
		if !strings.Contains(s, "=") {
			return errors.New("want name=value")
		}
		o.set = append(o.set, s)
		return nil
	})
	f.StringVar(&o.topic, "input", "", "the access-log topic (default: a fresh access-log.<time> topic)")
	f.StringVar(&o.phase, "phase", "all", "all, produce, process or verify")
	f.IntVar(&o.events, "events", 20_000, "access events to produce")
	f.IntVar(&o.hours, "hours", 6, "hours of event time the events span")
	f.IntVar(&o.partitions, "partitions", 6, "partitions of the topic when it is created")
	f.Uint64Var(&o.seed, "seed", 1, "random seed")
	f.IntVar(&o.rate, "rate", 0, "events per second to produce (0: as fast as possible)")
	f.DurationVar(&o.interval, "interval", time.Second, "checkpoint interval")
	f.StringVar(&o.dir, "checkpoints", "", "checkpoint directory (default: keyed.DefaultDir of the job's name, or a temporary one on fresh topics)")
	f.StringVar(&o.lake, "lake", "", "the lake: the table's files go to <lake>/<table> (default: a temporary directory)")
	f.StringVar(&o.table, "table", "access_log", "the Hive table")
	f.StringVar(&o.db, "db", "kord", "the Hive database")
	f.StringVar(&o.metastore, "metastore", "", "a Hive Metastore host:port (Thrift): the table is created if absent and each committed partition added")
	f.StringVar(&o.late, "late", "into", "late records: into (under _late/, committed partitions final) or recommit (into their partition, committed again)")
	f.StringVar(&o.rules, "rules", "", "a file of URI rules (regexp pattern per line) tried before the default normalization")
	f.StringVar(&o.duckdb, "duckdb", os.Getenv("KORD_DUCKDB_PYTHON"), "a python with the duckdb package, to query the table at the end (default: $KORD_DUCKDB_PYTHON, else python3)")
	f.BoolVar(&o.quiet, "quiet", false, "print only the final summary")
	f.StringVar(&o.http, "http", "", "serve the job's status page (/), metrics (/metrics), liveness (/healthz) and readiness (/readyz) on this address while it runs, :8080 say (kordhttp)")
	f.BoolVar(&o.follow, "follow", false, "-phase process: read the input as it grows, until stopped (SIGTERM), instead of up to its end")
	err := f.Parse(args)
	return o, err
}

func (o options) validate() error {
	switch {
	case o.events <= 0 || o.hours <= 0 || o.partitions <= 0:
		return errors.New("-events, -hours and -partitions must be positive")
	case !slices.Contains([]string{"all", "produce", "process", "verify"}, o.phase):
		return fmt.Errorf("-phase %q: want all, produce, process or verify", o.phase)
	case o.late != "into" && o.late != "recommit":
		return fmt.Errorf("-late %q: want into or recommit", o.late)
	case o.phase != "all" && o.topic == "":
		return fmt.Errorf("-phase %s needs -input", o.phase)
	case o.phase != "all" && o.phase != "produce" && o.lake == "":
		return fmt.Errorf("-phase %s needs -lake", o.phase)
	}
	return nil
}

func run(ctx context.Context, o options) error {
	if err := o.validate(); err != nil {
		return err
	}
	norm := accesslog.Normalizer{}
	if o.rules != "" {
		rules, err := accesslog.LoadRules(o.rules)
		if err != nil {
			return err
		}
		norm.Rules = rules
	}
	if o.brokers == "" && o.properties == "" && !slices.ContainsFunc(o.set, func(x string) bool { return strings.HasPrefix(x, "bootstrap.servers=") }) {
		c, err := kordtest.NewCluster()
		if err != nil {
			return err
		}
		defer c.Close()
		o.brokers = strings.Join(c.Brokers(), ",")
		o.say("embedded Kafka (kfake) at %s\n", o.brokers)
	}
	client, err := o.newClient()
	if err != nil {
		return err
	}
	o.client = client
	if o.topic == "" {
		o.topic, o.fresh = fmt.Sprintf("access-log.%d", time.Now().UnixNano()), true
	}
	if o.lake == "" {
		d, err := os.MkdirTemp("", "kord-tohive-")
		if err != nil {
			return err
		}
		o.lake = d
		o.say("lake: %s (kept)\n", d)
	}
	if o.dir == "" && o.fresh {
		d, err := os.MkdirTemp("", "kord-tohive-checkpoints-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		o.dir = d
	}
	parts, err := o.topics(ctx)
	if err != nil {
		return err
	}
	if o.phase == "all" || o.phase == "produce" {
		if err := produce(ctx, o, parts); err != nil {
			return err
		}
	}
	if o.phase == "all" || o.phase == "process" {
		start := time.Now()
		if _, err := process(ctx, o, norm); err != nil {
			return err
		}
		o.say("processed in %v\n", time.Since(start).Round(time.Millisecond))
	}
	if o.phase == "all" || o.phase == "verify" {
		return verify(ctx, o, norm)
	}
	return nil
}

// topics creates the input, counts and dead-letter topics if absent, and
// returns the input's partition count.
func (o options) topics(ctx context.Context) (int, error) {
	a, err := admin.New(admin.Cluster(o.client.Cluster()), admin.Logger(o.logger()))
	if err != nil {
		return 0, err
	}
	defer a.Close()
	parts, err := ensureTopic(ctx, a, o.topic, o.partitions)
	for _, t := range []string{o.countsTopic(), o.dlqTopic()} {
		if err == nil {
			_, err = ensureTopic(ctx, a, t, parts)
		}
	}
	return parts, err
}

func ensureTopic(ctx context.Context, a *admin.Client, topic string, partitions int) (int, error) {
	ids, err := a.Partitions(ctx, topic)
	if err == nil {
		return len(ids), nil
	}
	if !errors.Is(err, admin.ErrUnknownTopic) {
		return 0, err
	}
	if _, err := a.CreateTopic(ctx, topic, int32(partitions), nil); err != nil {
		return 0, err
	}
	return partitions, nil
}

func (o options) newClient() (*kafkaio.Client, error) {
	opts := []kafkaio.Opt{kafkaio.Logger(o.logger())}
	if o.properties != "" {
		opts = append(opts, kafkaio.Properties(o.properties))
	}
	if o.brokers != "" {
		opts = append(opts, kafkaio.Brokers(strings.Split(o.brokers, ",")...))
	}
	for _, s := range o.set {
		k, v, _ := strings.Cut(s, "=")
		opts = append(opts, kafkaio.Set(k, v))
	}
	return kafkaio.NewClient(opts...)
}

// base is the start of the input's event time.
var base = time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)

// uris are the endpoints requested, with "%d" an id.
var uris = []string{"yiyang/user/getById/%d", "yiyang/order/%d/items", "shop/item/%d", "shop/cart/%d/checkout", "search/suggest/%d"}

// event is the i-th access event of the input: its time goes forward
// evenly over -hours, each up to 3 s early (within the watermark's 5 s
// lateness), and about one in 500 is stamped two hours back, late by any
// watermark past it.
func (o options) event(r *rand.Rand, i int) accesslog.Access {
	span := time.Duration(o.hours) * time.Hour
	t := base.Add(span * time.Duration(i) / time.Duration(o.events)).Add(-time.Duration(r.IntN(3000)) * time.Millisecond)
	if t.Before(base) {
		t = base
	}
	if r.IntN(500) == 0 && t.Sub(base) > 2*time.Hour {
		t = t.Add(-2 * time.Hour)
	}
	status := 200
	if r.IntN(50) == 0 {
		status = 500
	}
	return accesslog.Access{ID: fmt.Sprintf("req-%d-%d", o.seed, i), IdentityURI: fmt.Sprintf(uris[r.IntN(len(uris))], r.IntN(100_000)),
		Status: status, LatencyMs: float64(5 + r.IntN(200)), Time: t.UTC()}
}

// produce writes the access events, keyed by request id.
func produce(ctx context.Context, o options, parts int) error {
	p, err := producer.New(serde.String(), serde.JSON[accesslog.Access](), producer.Cluster(o.client.Cluster()), producer.Set("linger.ms", "10"), producer.Logger(o.logger()))
	if err != nil {
		return err
	}
	defer p.Close()
	r := rand.New(rand.NewPCG(o.seed, 29))
	start := time.Now()
	for i := range o.events {
		a := o.event(r, i)
		if err := p.Produce(ctx, producer.Record[string, accesslog.Access]{Topic: o.topic, Key: a.ID, Value: a}, nil); err != nil {
			return fmt.Errorf("produce to %s: %w", o.topic, err)
		}
		if o.rate > 0 && i%100 == 99 {
			if ahead := time.Duration(i+1)*time.Second/time.Duration(o.rate) - time.Since(start); ahead > 0 {
				time.Sleep(ahead)
			}
		}
	}
	if err := p.Flush(ctx); err != nil {
		return fmt.Errorf("produce to %s: %w", o.topic, err)
	}
	o.say("produced %d access events to %s (%d partitions), %d hours of event time from %s\n", o.events, o.topic, parts, o.hours, base.Format(time.RFC3339))
	return nil
}
