// Command userbehavior is kord's main job, end to end: it produces
// user-behavior events keyed by user uuid through kord's producer
// (Java-identical placement), runs a keyed job that counts each user's
// events exactly once with checkpoints, writes one result per event to an
// output topic through one transactional producer, fails part-way on
// purpose and recovers from the checkpoint Kafka recorded as committed, and then
// checks the output with an independent read_committed reader: every event's
// result exactly once, in per-user order, with the right counts.
//
// With no flags it runs on an in-process Kafka (the embedded default):
//
//	go run ./examples/userbehavior
//
// Against a real cluster: -brokers host:port. A secured cluster takes the
// client.properties file its Java or Flink clients use (-properties
// client.properties), or librdkafka settings (-X name=value, repeated);
// every client of the run, the job's and the checking reader's, gets the
// same. -phase produce, process or verify runs one phase alone (name the
// topics with -input and -output).
//
// A cluster it cannot use ends the run within the clients' request
// timeout (10 s) with one line that says why (no broker answered, the
// credentials or the certificate refused, ...). The Kafka clients' own
// log (librdkafka's included) is kept in memory: -v prints it as it
// comes; otherwise a failed run sums it up in one more line.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/signal"
	"runtime"
	"runtime/metrics"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kordproject/kord/admin"
	"github.com/kordproject/kord/cluster"
	"github.com/kordproject/kord/kafkaio"
	"github.com/kordproject/kord/kordtest"
	"github.com/kordproject/kord/producer"
	"github.com/kordproject/kord/runlog"
	"github.com/kordproject/kord/serde"
)

// Event is one user action.
type Event struct {
	UUID   string    `json:"uuid"`
	Seq    int64     `json:"seq"` // per-user sequence number, from 0
	Action string    `json:"action"`
	Page   string    `json:"page"`
	Time   time.Time `json:"ts"`
}

type options struct {
	http        string // -http: serve metrics, health and readiness here
	brokers     string
	properties  string   // a Java client.properties file
	set         []string // librdkafka settings, name=value
	client      *kafkaio.Client
	topic       string // input
	output      string
	phase       string
	events      int
	users       int
	partitions  int
	seed        uint64
	keyBy       bool
	pages       bool          // -pages: a second keyed stage, per page
	lake        string        // -lake: a directory the results also land in, as files
	lakeCompact time.Duration // -lake-compact: one file per action and interval
	crash       bool
	interval    time.Duration
	dir         string
	quiet       bool
	verbose     bool         // -v: the clients' log as it comes
	log         *slog.Logger // every client's log: to book
	book        *runlog.Book
	rate        int // events/s when producing; 0 = as fast as possible
	atLeastOnce bool
	reset       bool          // forget the job's committed state first (keyed.Job.Forget)
	processes   int           // -processes: children, each an instance
	instance    string        // -instance: this process's instance id
	session     time.Duration // the instance's session timeout
	freshTopics bool          // the topics were named by this run: nothing to resume
	stats       string        // -stats: a file to append goroutines and Kafka handles to
	stdout      io.Writer
}

// out is where progress and the summary go: stdout unless a test captures
// them.
func (o *options) out() io.Writer {
	if o.stdout == nil {
		return os.Stdout
	}
	return o.stdout
}

// childArgsEnv carries a child process's flags (-processes starts the
// children with it; they are the same binary), separated by \x1f.
const childArgsEnv = "USERBEHAVIOR_ARGS"

func main() {
	args := os.Args[1:]
	if v, ok := os.LookupEnv(childArgsEnv); ok {
		args = strings.Split(v, "\x1f")
	}
	os.Exit(cli(args))
}

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
		fmt.Fprintln(os.Stderr, "userbehavior:", err)
		if sum := o.book.Summary(); sum != "" && !o.verbose {
			fmt.Fprintln(os.Stderr, sum+" (-v shows them)")
		}
		return 1
	}
	return 0
}

func parseFlags(args []string) (options, error) {
	var o options
	flag := flag.NewFlagSet("userbehavior", flag.ContinueOnError)
	flag.StringVar(&o.brokers, "brokers", "", "Kafka bootstrap servers; empty (and none in -properties) runs an in-process cluster")
	flag.StringVar(&o.properties, "properties", "", "a Java client.properties file (security.protocol, sasl.jaas.config, ssl.truststore.location, ...) for every client")
	flag.Func("X", "a librdkafka setting name=value for every client (repeat it)", func(s string) error {
		if !strings.Contains(s, "=") {
			return fmt.Errorf("want name=value")
		}
		o.set = append(o.set, s)
		return nil
	})
	flag.StringVar(&o.topic, "input", "", "input topic (default: a fresh user-behavior.<time> topic)")
	flag.StringVar(&o.output, "output", "", "output topic (default: <input>.counts)")
	flag.StringVar(&o.phase, "phase", "all", "all, produce, process or verify")
	flag.BoolVar(&o.pages, "pages", false, "two keyed stages: the per-user counts, then re-keyed by page (normalized by a chained MapValues) into per-page counts, each result carrying its number within its page")
	flag.StringVar(&o.http, "http", "", "serve the job's status page (/), metrics (/metrics), liveness (/healthz) and readiness (/readyz) on this address, :8080 say (kordhttp)")
	flag.StringVar(&o.lake, "lake", "", "also land the results as files in this directory, exactly once, bucketed by action (action=<a>/part-*); verified against the Kafka output; shared by every process of -processes")
	flag.DurationVar(&o.lakeCompact, "lake-compact", 0, "with -lake: one file per action and this interval (filesink.CompactEvery) instead of one per checkpoint")
	flag.BoolVar(&o.keyBy, "keyby", false, "key by the uuid extracted from the event instead of by the record key (key group = partition): xxhash key groups shuffled in process, or with -processes and -instance through the job's hop topic between the processes")
	flag.BoolVar(&o.crash, "crash", true, "fail the job part-way, after its second checkpoint committed (keyed.OnCommit), and let the restart strategy recover it from the checkpoint Kafka recorded; with -processes, SIGKILL one process and start it again")
	flag.DurationVar(&o.interval, "interval", time.Second, "checkpoint interval")
	flag.StringVar(&o.dir, "checkpoints", "", "checkpoint directory, or a bucket URL (file:///dir, mem://; s3://, gs://, azblob:// with their gocloud.dev drivers linked in) holding them under the job's name (default: a temporary directory on fresh topics, else keyed.DefaultDir of the job's name); shared by every process of the job")
	flag.BoolVar(&o.reset, "reset", false, "forget the job's checkpoints and Kafka commit record first, so that -phase process starts over")
	flag.BoolVar(&o.quiet, "quiet", false, "print only the final summary, as key=value pairs")
	flag.BoolVar(&o.verbose, "v", false, "print the Kafka clients' log (kord's and librdkafka's) to stderr as it comes; without it, a failed run sums it up")
	flag.BoolVar(&o.atLeastOnce, "at-least-once", false, "at-least-once checkpoints and output (written at once, offsets committed after): duplicates allowed, nothing lost")
	flag.IntVar(&o.rate, "rate", 0, "events per second to produce (0: as fast as possible)")
	flag.IntVar(&o.events, "events", 100_000, "events to produce")
	flag.IntVar(&o.users, "users", 10_000, "distinct user uuids")
	flag.IntVar(&o.partitions, "partitions", 12, "partitions of the topic when it is created")
	flag.Uint64Var(&o.seed, "seed", 1, "random seed")
	flag.IntVar(&o.processes, "processes", 0, "run the job as this many processes on this machine (children of this one, instances p0, p1, ...), Kafka's consumer group sharing the partitions; 0: this process runs the job alone")
	flag.StringVar(&o.instance, "instance", "", "run the job as this instance (a stable id: pod name, ordinal) of a job on several processes; every process of the job uses the same -checkpoints directory")
	flag.DurationVar(&o.session, "session", 10*time.Second, "with -processes or -instance: how long Kafka waits for a dead process before it moves its partitions (session.timeout.ms)")
	flag.StringVar(&o.stats, "stats", "", "append a line every 2 s to this file: unix milliseconds, goroutines, kord's open librdkafka handles (cluster.OpenHandles) and the Go heap's bytes, for a soak")
	err := flag.Parse(args)
	var live io.Writer
	if o.verbose {
		live = os.Stderr
	}
	o.book = runlog.New("userbehavior", live)
	o.log = o.book.Logger()
	return o, err
}

func run(ctx context.Context, o options) error {
	if o.book == nil { // a test's options
		o.book = runlog.New("userbehavior", nil)
		o.log = o.book.Logger()
	}
	if o.stats != "" {
		stop, err := writeStats(o.stats, 2*time.Second)
		if err != nil {
			return err
		}
		defer stop()
	}
	if o.events <= 0 || o.users <= 0 || o.partitions <= 0 {
		return errors.New("-events, -users and -partitions must be positive")
	}
	if o.phase != "all" && o.phase != "produce" && o.phase != "process" && o.phase != "verify" {
		return fmt.Errorf("-phase %q: want all, produce, process or verify", o.phase)
	}
	if o.processes > 0 || o.instance != "" {
		if o.atLeastOnce {
			return errors.New("-processes and -instance run exactly-once only")
		}
		if o.lakeCompact > 0 {
			return errors.New("-lake-compact runs on one process: two processes restoring one checkpoint would merge its pieces twice")
		}
	}
	if o.brokers == "" && o.properties == "" && !slices.ContainsFunc(o.set, func(x string) bool { return strings.HasPrefix(x, "bootstrap.servers=") }) {
		// No cluster named: the embedded default.
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
	o.client, o.brokers = client, client.BrokerList()
	if o.topic == "" {
		o.topic = fmt.Sprintf("user-behavior.%d", time.Now().UnixNano())
		o.freshTopics = true
	}
	if o.output == "" {
		o.output = o.topic + ".counts"
	}
	a, err := o.admin()
	if err != nil {
		return err
	}
	parts, err := ensureTopic(ctx, a, o.topic, o.partitions)
	if err == nil {
		_, err = ensureTopic(ctx, a, o.output, parts)
	}
	a.Close()
	if err != nil {
		return err
	}
	sum := &summary{}
	if o.phase == "all" || o.phase == "produce" {
		if err := produce(ctx, o, parts); err != nil {
			return err
		}
	}
	if o.phase == "all" || o.phase == "process" {
		proc := process
		if o.processes > 0 {
			proc = processes
		}
		if err := proc(ctx, o, sum); err != nil {
			return err
		}
	}
	if o.phase == "all" || o.phase == "verify" {
		if err := verify(ctx, o, parts, sum); err != nil {
			return err
		}
	}
	return nil
}

// newClient is the one client configuration of the run: -brokers,
// -properties and -X, in that order (later ones win).
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

// configMap is the run's client configuration for a confluent-kafka-go
// client of its own (the checking readers), with extra.
func (o options) configMap(extra kafka.ConfigMap) *kafka.ConfigMap {
	cm := kafka.ConfigMap{}
	for k, v := range o.client.Cluster().Settings() {
		cm[k] = v
	}
	for k, v := range extra {
		cm[k] = v
	}
	return &cm
}

// newReader is a confluent-kafka-go consumer of the run's configuration
// with extra, for a checking reader independent of kord's clients. Its
// librdkafka log goes to the run's log, not raw to stderr.
func (o options) newReader(extra kafka.ConfigMap) (*kafka.Consumer, error) {
	cm := o.configMap(extra)
	(*cm)["go.logs.channel.enable"] = true
	c, err := kafka.NewConsumer(cm)
	if err != nil {
		return nil, err
	}
	log := o.logger()
	go func() { // until c.Close closes the channel
		for l := range c.Logs() {
			log.Log(context.Background(), runlog.SyslogLevel(l.Level), "librdkafka: "+l.Message, "tag", l.Tag)
		}
	}()
	return c, nil
}

// logger is the run's log; nothing for options made without parseFlags
// or run (a test's, before it calls run).
func (o options) logger() *slog.Logger {
	if o.log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return o.log
}

// admin is an admin client of the run's configuration.
func (o options) admin() (*admin.Client, error) {
	return admin.New(admin.Cluster(o.client.Cluster()), admin.Logger(o.logger()))
}

func (o options) say(format string, args ...any) {
	if !o.quiet {
		fmt.Fprintf(o.out(), format, args...)
	}
}

// produce writes the events through kord's producer.
func produce(ctx context.Context, o options, parts int) error {
	opts := []producer.Opt{producer.Cluster(o.client.Cluster()), producer.Set("linger.ms", "10"), producer.Logger(o.logger())}
	p, err := producer.New(serde.String(), serde.JSON[Event](), opts...)
	if err != nil {
		return err
	}
	defer p.Close()

	r := rand.New(rand.NewPCG(o.seed, o.seed^0x9e3779b97f4a7c15))
	users := make([]string, o.users)
	for i := range users {
		users[i] = uuid(r)
	}
	seq := make([]int64, o.users)
	actions := []string{"view", "click", "add_to_cart", "purchase"}
	start := time.Now()
	for i := 0; i < o.events; i++ {
		u := r.IntN(o.users)
		ev := Event{UUID: users[u], Seq: seq[u], Action: actions[r.IntN(len(actions))], Page: fmt.Sprintf("/item/%d", r.IntN(1000)), Time: time.Now()}
		seq[u]++
		if err := p.Produce(ctx, producer.Record[string, Event]{Topic: o.topic, Key: ev.UUID, Value: ev}, nil); err != nil {
			return err
		}
		if o.rate > 0 && i%100 == 99 {
			if ahead := time.Duration(i+1)*time.Second/time.Duration(o.rate) - time.Since(start); ahead > 0 {
				time.Sleep(ahead)
			}
		}
	}
	if err := p.Flush(ctx); err != nil {
		return err
	}
	elapsed := time.Since(start)
	o.say("produced %d events for %d users to %s (%d partitions) in %v (%.0f events/s)\n",
		o.events, o.users, o.topic, parts, elapsed.Round(time.Millisecond), float64(o.events)/elapsed.Seconds())
	return nil
}

// verify reads the output with read_committed, independently of kord's
// code, and checks every event's result is there once, in per-user order,
// with the right count.
func verify(ctx context.Context, o options, parts int, sum *summary) error {
	c, err := o.newReader(kafka.ConfigMap{
		"group.id":           "userbehavior-verify",
		"enable.auto.commit": false,
		"isolation.level":    "read_committed",
	})
	if err != nil {
		return err
	}
	defer c.Close()
	var tps []kafka.TopicPartition
	for i := 0; i < parts; i++ {
		tps = append(tps, kafka.TopicPartition{Topic: &o.output, Partition: int32(i), Offset: kafka.OffsetBeginning})
	}
	if err := c.Assign(tps); err != nil {
		return err
	}
	next := map[string]int64{}
	dups, disorder, wrong, n := 0, 0, 0, 0
	// -pages: a user's results come through the page stage's tasks, so
	// their order holds per (user, page) only; each page numbers its
	// results 1..n.
	seen := map[string]map[int64]bool{}
	pageNs := map[string][]int64{}
	inKafka := map[string]int64{} // -lake: each result's count, by uuid/seq
	idle := time.Now()
	for time.Since(idle) < 3*time.Second {
		if err := ctx.Err(); err != nil {
			return err
		}
		m, err := c.ReadMessage(200 * time.Millisecond)
		if err != nil {
			if kerr, ok := err.(kafka.Error); ok && kerr.IsTimeout() {
				continue
			}
			return err
		}
		idle = time.Now()
		var res Result
		if err := json.Unmarshal(m.Value, &res); err != nil {
			return fmt.Errorf("%s[%d]@%d: %w", o.output, m.TopicPartition.Partition, m.TopicPartition.Offset, err)
		}
		n++
		if res.Count != res.Seq+1 {
			wrong++
		}
		if o.lake != "" {
			inKafka[fmt.Sprintf("%s/%d", res.UUID, res.Seq)] = res.Count
		}
		if o.pages {
			if seen[res.UUID] == nil {
				seen[res.UUID] = map[int64]bool{}
			}
			up := res.UUID + " " + res.Page
			switch {
			case seen[res.UUID][res.Seq]:
				dups++
			case res.Seq < next[up]:
				disorder++
			}
			seen[res.UUID][res.Seq] = true
			next[up] = max(next[up], res.Seq+1)
			pageNs[res.Page] = append(pageNs[res.Page], res.PageN)
			continue
		}
		switch want := next[res.UUID]; {
		case res.Seq < want:
			dups++
		case res.Seq > want:
			disorder++
		}
		if res.Seq >= next[res.UUID] {
			next[res.UUID] = res.Seq + 1
		}
	}
	for _, ns := range pageNs {
		slices.Sort(ns)
		for i, k := range ns {
			if k != int64(i+1) {
				wrong++ // a page's numbers are not 1..n: a result counted twice, or one lost
				break
			}
		}
	}
	missing := o.events - n + dups // -events must name the input's size
	lake, err := checkLake(o, inKafka)
	if err != nil {
		return err
	}
	if o.quiet {
		fmt.Fprintf(o.out(), "events_in=%d results_out=%d duplicates=%d order_violations=%d wrong_counts=%d missing=%d recovery_ms=%d checkpoints_committed=%d",
			o.events, n, dups, disorder, wrong, missing, sum.recovery.Milliseconds(), sum.checkpoints)
		if sum.processes > 0 {
			fmt.Fprintf(o.out(), " processes=%d processes_killed=%d processing_ms=%d", sum.processes, sum.killed, sum.processing.Milliseconds())
		}
		if o.lake != "" {
			fmt.Fprintf(o.out(), " lake_rows=%d lake_files=%d lake_duplicates=%d lake_missing=%d lake_wrong=%d", lake.rows, lake.files, lake.dups, lake.missing, lake.wrong)
		}
		fmt.Fprintln(o.out())
	} else {
		fmt.Fprintf(o.out(), "\nevents in:                %d\nresults out:              %d\nduplicates:               %d\nper-user order violations: %d\nwrong counts:             %d\nmissing:                  %d\nrecovery time:            %v\ncheckpoints committed:    %d\n",
			o.events, n, dups, disorder, wrong, missing, sum.recovery.Round(time.Millisecond), sum.checkpoints)
		if sum.processes > 0 {
			fmt.Fprintf(o.out(), "processes:                %d (SIGKILLed and started again: %d)\n", sum.processes, sum.killed)
		}
		if o.lake != "" {
			fmt.Fprintf(o.out(), "lake (%s): %d rows in %d files; duplicates %d, missing %d, unlike Kafka's %d\n", o.lake, lake.rows, lake.files, lake.dups, lake.missing, lake.wrong)
		}
	}
	bad := disorder + wrong + missing + lake.missing + lake.wrong
	if !o.atLeastOnce {
		bad += dups + lake.dups // exactly-once: a duplicate is a failure; at-least-once allows them
	}
	if bad > 0 {
		return errors.New("verification failed")
	}
	return nil
}

// ensureTopic creates the topic if it does not exist and returns its
// partition count.
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

func uuid(r *rand.Rand) string {
	b := make([]byte, 16)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// writeStats appends "unixms goroutines handles heap" to path every period
// (heap: the Go heap's live and not yet swept objects, in bytes, apart
// from librdkafka's memory, which RSS counts too)
// until stop is called (then once more): what a soak reads of the process
// that it cannot see in /proc.
func writeStats(path string, period time.Duration) (stop func(), err error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("-stats: %w", err)
	}
	line := func() {
		heap := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
		metrics.Read(heap)
		fmt.Fprintf(f, "%d %d %d %d\n", time.Now().UnixMilli(), runtime.NumGoroutine(), cluster.OpenHandles(), heap[0].Value.Uint64())
	}
	done, exited := make(chan struct{}), make(chan struct{})
	go func() { // until stop
		defer close(exited)
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			line()
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	return func() {
		close(done)
		<-exited
		line()
		f.Close()
	}, nil
}
