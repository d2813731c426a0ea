// Command urinormalize is kord's second example job: per-endpoint request
// counts and latency percentiles from an access log, in event-time windows,
// exactly once. It produces access-log events (JSON: a request id,
// identityUri, status, latency and time) through kord's producer, then
// runs a keyed job that
//
//   - rewrites each URI to its pattern (yiyang/user/getById/13782 becomes
//     yiyang/user/getById/{}): numeric, UUID and long hexadecimal path
//     segments become {}, after the rules of a -rules file, tried first,
//     and before those the rules of a -rules-topic (a compacted topic
//     whose latest value is a rule file), read as the job runs, so that a
//     new rule set applies without a restart;
//   - keys the events by pattern and, per one-minute event-time window,
//     counts the requests and the server errors (status 500 and above) and
//     takes the exact 99th percentile of the latency;
//   - writes each window's result to an output topic, exactly once, through
//     one transactional producer, with the late events (after their window
//     and its allowed lateness) in a side-output topic and the records that
//     are no access event (malformed JSON) in a dead-letter topic, in the
//     same transactions;
//
// fails on purpose after its second committed checkpoint and recovers
// from the checkpoint Kafka recorded as committed, and then
// checks the three topics with an independent read_committed reader
// against a model of the input, which it generates again from the seed.
//
// With no flags it runs on an in-process Kafka (the embedded default):
//
//	go run ./examples/urinormalize
//
// Against a real cluster:
//
//	go run ./examples/urinormalize -brokers host:9092
//
// A secured cluster takes the client.properties file its Java clients use
// (-properties client.properties), or librdkafka settings (-X name=value,
// repeated); every client of the run gets the same. -phase produce,
// process or verify runs one phase alone, on the topics -input names; the
// verify phase must be given the flags the produce phase had (-events,
// -minutes, -seed, -late-fraction, -bad-fraction), and the process phase's
// -rules, since it generates the input again to check the output.
//
// A cluster it cannot use ends the run within the clients' request
// timeout (10 s) with one line that says why. The Kafka clients' own log
// (librdkafka's included) is kept in memory: -v prints it as it comes;
// otherwise a failed run sums it up in one more line.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kordproject/kord/admin"
	"github.com/kordproject/kord/kafkaio"
	"github.com/kordproject/kord/kordtest"
	"github.com/kordproject/kord/producer"
	"github.com/kordproject/kord/runlog"
	"github.com/kordproject/kord/serde"
)

type options struct {
	brokers    string
	properties string   // a Java client.properties file
	set        []string // librdkafka settings, name=value
	client     *kafkaio.Client
	topic      string // input; the others are named after it
	phase      string
	rules      string // a rule file (ParseRules)
	rulesTopic string // a compacted topic whose latest value is a rule file, read as the job runs

	events       int
	minutes      int
	partitions   int
	seed         uint64
	lateFraction float64
	badFraction  float64

	lateness        time.Duration // the watermarks' out-of-orderness
	allowedLateness time.Duration // the windows'
	idleness        time.Duration
	crash           bool
	interval        time.Duration
	dir             string
	quiet           bool
	http            string       // kordhttp on this address
	verbose         bool         // -v: the clients' log as it comes
	log             *slog.Logger // every client's log: to book
	book            *runlog.Book
	freshTopics     bool // the topics were named by this run: nothing to resume
	stdout          io.Writer
}

// The topics the job writes, named after its input.
func (o options) windowsTopic() string { return o.topic + ".windows" }
func (o options) lateTopic() string    { return o.topic + ".late" }
func (o options) dlqTopic() string     { return o.topic + ".dlq" }

func (o options) gen() genConfig {
	return genConfig{events: o.events, span: time.Duration(o.minutes) * time.Minute, seed: o.seed,
		lateFraction: o.lateFraction, badFraction: o.badFraction}
}

// out is where progress and the summary go: stdout unless a test captures
// them.
func (o options) out() io.Writer {
	if o.stdout == nil {
		return os.Stdout
	}
	return o.stdout
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
		fmt.Fprintln(os.Stderr, "urinormalize:", err)
		if sum := o.book.Summary(); sum != "" && !o.verbose {
			fmt.Fprintln(os.Stderr, sum+" (-v shows them)")
		}
		return 1
	}
	return 0
}

func parseFlags(args []string) (options, error) {
	var o options
	flag := flag.NewFlagSet("urinormalize", flag.ContinueOnError)
	flag.StringVar(&o.brokers, "brokers", "", "Kafka bootstrap servers; empty (and none in -properties) runs an in-process cluster")
	flag.StringVar(&o.properties, "properties", "", "a Java client.properties file (security.protocol, sasl.jaas.config, ssl.truststore.location, ...) for every client")
	flag.Func("X", "a librdkafka setting name=value for every client (repeat it)", func(s string) error {
		if !strings.Contains(s, "=") {
			return fmt.Errorf("want name=value")
		}
		o.set = append(o.set, s)
		return nil
	})
	flag.StringVar(&o.topic, "input", "", "input topic (default: a fresh access-log.<time> topic); the job writes <input>.windows, <input>.late and <input>.dlq")
	flag.StringVar(&o.phase, "phase", "all", "all, produce, process or verify")
	flag.StringVar(&o.rulesTopic, "rules-topic", "", "a compacted topic whose latest record's value is a rule file, as -rules takes: read while the job runs (broadcast state), so a new rule set applies without a restart; tried before -rules' and the default ones")
	flag.StringVar(&o.rules, "rules", "", "a file of rules tried before the default ones, one a line: REGEX => PATTERN (the expression must match the whole path; # comments)")
	flag.IntVar(&o.events, "events", 50_000, "access events to produce (malformed ones included)")
	flag.IntVar(&o.minutes, "minutes", 10, "minutes of event time the events span")
	flag.IntVar(&o.partitions, "partitions", 6, "partitions of the topics when they are created")
	flag.Uint64Var(&o.seed, "seed", 1, "random seed of the input")
	flag.Float64Var(&o.lateFraction, "late-fraction", 0.002, "fraction of events stamped 30 s to 5 min in the past, so that most come too late for their window")
	flag.Float64Var(&o.badFraction, "bad-fraction", 0.001, "fraction of records that are no access event (not JSON, cut short, a wrong type, no time): they go to the dead-letter topic")
	flag.DurationVar(&o.lateness, "lateness", 5*time.Second, "how far out of order events may come (the watermarks' bounded out-of-orderness)")
	flag.DurationVar(&o.allowedLateness, "allowed-lateness", 30*time.Second, "how long a window that fired still takes events (and fires again); later ones go to the late topic")
	flag.DurationVar(&o.idleness, "idleness", 10*time.Second, "a partition without records for this long stops holding event time back")
	flag.BoolVar(&o.crash, "crash", true, "fail the job once, after its second committed checkpoint (keyed.OnCommit), and let the restart strategy recover it from the checkpoint Kafka recorded")
	// 250 ms, not the main example's 1 s: the embedded cluster reads the
	// default 50,000 events in about 1.5 s, and at 1 s the job would
	// commit only its final checkpoint, so -crash would never fire.
	flag.DurationVar(&o.interval, "interval", 250*time.Millisecond, "checkpoint interval")
	flag.StringVar(&o.dir, "checkpoints", "", "checkpoint directory (default: a temporary directory on fresh topics, else keyed.DefaultDir of the job's name)")
	flag.StringVar(&o.http, "http", "", "serve the job's status page (/), metrics (/metrics), liveness (/healthz) and readiness (/readyz) on this address while it runs, :8080 say (kordhttp)")
	flag.BoolVar(&o.quiet, "quiet", false, "print only the final summary, as key=value pairs")
	flag.BoolVar(&o.verbose, "v", false, "print the Kafka clients' log (kord's and librdkafka's) to stderr as it comes; without it, a failed run sums it up")
	err := flag.Parse(args)
	var live io.Writer
	if o.verbose {
		live = os.Stderr
	}
	o.book = runlog.New("urinormalize", live)
	o.log = o.book.Logger()
	return o, err
}

// validate checks the options that need no cluster.
func (o options) validate() error {
	var errs []error
	if o.phase != "all" && o.phase != "produce" && o.phase != "process" && o.phase != "verify" {
		errs = append(errs, fmt.Errorf("-phase %q: want all, produce, process or verify", o.phase))
	}
	if o.phase != "all" && o.topic == "" && o.phase != "produce" {
		errs = append(errs, fmt.Errorf("-phase %s: name the topic -input the produce phase wrote", o.phase))
	}
	if o.events <= 0 || o.minutes <= 0 || o.partitions <= 0 {
		errs = append(errs, fmt.Errorf("-events %d, -minutes %d, -partitions %d: want each positive", o.events, o.minutes, o.partitions))
	}
	if o.lateFraction < 0 || o.badFraction < 0 || o.lateFraction+o.badFraction > 1 {
		errs = append(errs, fmt.Errorf("-late-fraction %v, -bad-fraction %v: want each 0 or more, and 1 at most together", o.lateFraction, o.badFraction))
	}
	if o.lateness < 0 || o.allowedLateness < 0 || o.idleness < 0 {
		errs = append(errs, fmt.Errorf("-lateness %v, -allowed-lateness %v, -idleness %v: want each 0 or more", o.lateness, o.allowedLateness, o.idleness))
	}
	if o.interval <= 0 {
		errs = append(errs, fmt.Errorf("-interval %v: want more than 0", o.interval))
	}
	return errors.Join(errs...)
}

func run(ctx context.Context, o options) error {
	if o.book == nil { // a test's options
		o.book = runlog.New("urinormalize", nil)
		o.log = o.book.Logger()
	}
	if err := o.validate(); err != nil {
		return err
	}
	var norm Normalizer
	if o.rules != "" {
		rules, err := LoadRules(o.rules)
		if err != nil {
			return err
		}
		norm.Rules = rules
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
		o.topic = fmt.Sprintf("access-log.%d", time.Now().UnixNano())
		o.freshTopics = true
	}
	a, err := o.admin()
	if err != nil {
		return err
	}
	parts, err := ensureTopic(ctx, a, o.topic, o.partitions)
	for _, t := range []string{o.windowsTopic(), o.lateTopic(), o.dlqTopic()} {
		if err == nil {
			_, err = ensureTopic(ctx, a, t, parts)
		}
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
		if err := process(ctx, o, norm, sum); err != nil {
			return err
		}
	}
	if o.phase == "all" || o.phase == "verify" {
		if o.rulesTopic != "" {
			// The model takes the rules the topic holds at the end: a run
			// whose rules changed midway has no one model.
			topicRules, err := latestRules(ctx, o)
			if err != nil {
				return err
			}
			norm.Rules = append(topicRules, norm.Rules...)
		}
		if err := verify(ctx, o, norm, sum); err != nil {
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

// produce writes the generated records through kord's producer, keyed by
// request id: any key would do, as the job keys by pattern itself.
func produce(ctx context.Context, o options, parts int) error {
	opts := []producer.Opt{producer.Cluster(o.client.Cluster()), producer.Set("linger.ms", "10"), producer.Logger(o.logger())}
	p, err := producer.New(serde.String(), serde.Bytes(), opts...)
	if err != nil {
		return err
	}
	defer p.Close()
	start := time.Now()
	bad, far := 0, 0
	for in := range generate(o.gen()) {
		if in.event == nil {
			bad++
		} else if in.farBehind {
			far++
		}
		if err := p.Produce(ctx, producer.Record[string, []byte]{Topic: o.topic, Key: in.key, Value: in.value}, nil); err != nil {
			return fmt.Errorf("produce to %s: %w", o.topic, err)
		}
	}
	if err := p.Flush(ctx); err != nil {
		return fmt.Errorf("produce to %s: %w", o.topic, err)
	}
	elapsed := time.Since(start)
	o.say("produced %d access events to %s (%d partitions) in %v: %d malformed, %d stamped far in the past, %v of event time from %s\n",
		o.events, o.topic, parts, elapsed.Round(time.Millisecond), bad, far, time.Duration(o.minutes)*time.Minute, base.Format(time.RFC3339))
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
