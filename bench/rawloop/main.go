// Command rawloop measures raw confluent-kafka-go (librdkafka) against a
// Kafka cluster, with no kord code: the baseline every kord figure is judged
// against; and kord's jobs against it, on the same input, in the same run.
//
//	go run ./bench/rawloop -brokers 127.0.0.1:9092 [-mode all] [-n 1000000]
//
// Modes (each creates its own fresh topics and deletes them at the end
// unless -keep-topics):
//
//	produce  (a) N keyed records, idempotent producer, acks=all
//	consume  (a), then (b): read the input back, read_committed
//	txloop   (a), then (c): read → produce one output per input in a
//	         transaction committed every -commit-interval with the consumed
//	         offsets, then a read_committed check of exactly N outputs
//	latency  (d): a producer paced at -rate, the same loop, and a
//	         read_committed reader of the output timing every record
//	all      (a), (b), (c), (d); -rate 0 means half of (c)'s rate
//	engine   (a), (c), then (h): kord's keyed engine (package keyed) over
//	         the same input: kafkaio.Source → ByPartition (-keyby: KeyBy) →
//	         a ValueState[int64] counter, -parallelism tasks → kafkaio.Sink,
//	         checkpoint every -commit-interval, verified like (c) and each
//	         key's counts checked
//	engine-latency   (i): (d) with the engine job in place of the loop
//	engine-recovery  (j): the engine job in a child process on a paced
//	         input (-recovery-rate) of -recovery-users keys, all in state,
//	         SIGKILLed -kills times and restarted
//	engine-compare   (a), (c), (h), (i), (j)
//
// Figures (e), (f) and (g) measured checkpoint.CountJob, kord's first
// exactly-once job; their modes (eos, eos-latency, recovery, compare) went
// with it (bench/RESULTS.md keeps their figures as history).
//
// Keys are 36-byte UUIDs: a fresh one per record, or -users distinct ones
// (the engine modes' default is 10,000, as examples/userbehavior).
//
// The client settings are in kafka.go; -producer-conf and -consumer-conf
// override them (librdkafka names, "key=value,..."). Progress goes to
// stderr; the summary goes to stdout, as text or, with -json, as one JSON
// object.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// defaultLatencyRate is the -rate used by -mode latency when -rate is 0.
// -mode all uses half of the txloop rate it has just measured instead; on
// the reference machine (2 cores shared by the broker, the paced producer,
// the loop and the reader) that rate already saturates the loop: it kept up
// with 75,000/s but not 100,000/s (bench/RESULTS.md); 50,000/s leaves
// headroom for a noisier machine.
const defaultLatencyRate = 50000

type config struct {
	brokers        string
	n              int64
	valueBytes     int
	partitions     int
	commitInterval time.Duration
	mode           string
	rate           float64
	duration       time.Duration
	warmup         time.Duration
	group          string
	keepTopics     bool
	json           bool
	// stepTimeout bounds each step (produce, consume, txloop, verify, and
	// the latency drain).
	stepTimeout time.Duration
	log         io.Writer // progress
	// (j): SIGKILLs, run time after each restart's first commit, input rate.
	kills        int
	killAfter    time.Duration
	recoveryRate float64
	// users: distinct keys of every input but (j)'s, 0 for the mode's
	// default (keysFor).
	users int
	// The engine job (h), (i), (j): tasks per stage, KeyBy instead of
	// ByPartition, and the distinct keys of (j)'s input.
	parallelism   int
	keyBy         bool
	recoveryUsers int
}

// engineMode reports whether mode runs the keyed engine.
func engineMode(mode string) bool { return strings.HasPrefix(mode, "engine") }

// keysFor returns the distinct keys of c's inputs: -users, else 10,000 in
// the engine modes and a fresh UUID per record (0) in the others.
func (c config) keysFor() int {
	switch {
	case c.users > 0:
		return c.users
	case engineMode(c.mode):
		return defaultEngineUsers
	}
	return 0
}

// pacedRun returns the latency measurement of figures (d) and (i)
// around a pipeline reading input and writing output; counts: the output
// is the keyed engine's.
func (c config) pacedRun(name, group, input, output string, rate float64, counts bool) pacedRun {
	return pacedRun{name: name, brokers: c.brokers, group: group, input: input, output: output,
		partitions: c.partitions, valueBytes: c.valueBytes, interval: c.commitInterval,
		rate: rate, warmup: c.warmup, window: c.duration, drain: c.stepTimeout,
		keys: newKeys(c.keysFor()), counts: counts}
}

var modes = map[string]bool{"all": true, "produce": true, "consume": true, "txloop": true, "latency": true,
	"engine": true, "engine-latency": true, "engine-recovery": true, "engine-compare": true}

const modeNames = "all, produce, consume, txloop, latency, engine, engine-latency, engine-recovery or engine-compare"

// producesInput reports whether mode writes the (a) input first.
func producesInput(mode string) bool {
	switch mode {
	case "latency", "engine-latency", "engine-recovery":
		return false
	}
	return true
}

// minRecoveryUsers keeps every operator task of (j) owning keys: each
// restart's "running" waits for all of them to process a record.
const minRecoveryUsers = 1000

func (c *config) validate() error {
	var errs []error
	if c.brokers == "" {
		errs = append(errs, errors.New("-brokers is required"))
	}
	if !modes[c.mode] {
		errs = append(errs, fmt.Errorf("-mode %q: want %s", c.mode, modeNames))
	}
	if c.n < 1 {
		errs = append(errs, fmt.Errorf("-n %d: want at least 1", c.n))
	}
	if c.valueBytes < minValueBytes {
		errs = append(errs, fmt.Errorf("-value-bytes %d: want at least %d", c.valueBytes, minValueBytes))
	}
	if c.partitions < 1 {
		errs = append(errs, fmt.Errorf("-partitions %d: want at least 1", c.partitions))
	}
	if c.commitInterval <= 0 {
		errs = append(errs, fmt.Errorf("-commit-interval %s: want > 0", c.commitInterval))
	}
	if c.rate < 0 {
		errs = append(errs, fmt.Errorf("-rate %g: want >= 0", c.rate))
	}
	if c.duration <= 0 || c.warmup < 0 {
		errs = append(errs, fmt.Errorf("-duration %s, -warmup %s: want > 0 and >= 0", c.duration, c.warmup))
	}
	if c.users < 0 {
		errs = append(errs, fmt.Errorf("-users %d: want >= 0", c.users))
	}
	if engineMode(c.mode) {
		if c.valueBytes < minEngineValueBytes {
			errs = append(errs, fmt.Errorf("-value-bytes %d: the engine modes want at least %d (the output carries the count)", c.valueBytes, minEngineValueBytes))
		}
		if c.parallelism < 1 {
			errs = append(errs, fmt.Errorf("-parallelism %d: want at least 1", c.parallelism))
		}
		if c.recoveryUsers < minRecoveryUsers && (c.mode == "engine-recovery" || c.mode == "engine-compare") {
			errs = append(errs, fmt.Errorf("-recovery-users %d: want at least %d", c.recoveryUsers, minRecoveryUsers))
		}
	}
	return errors.Join(errs...)
}

// Summary is everything a run measured; absent parts were not run.
type Summary struct {
	Date           string `json:"date"`
	Brokers        string `json:"brokers"`
	Mode           string `json:"mode"`
	N              int64  `json:"n"`
	ValueBytes     int    `json:"value_bytes"`
	Partitions     int    `json:"partitions"`
	CommitInterval string `json:"commit_interval"`
	Librdkafka     string `json:"librdkafka"`
	// Load averages (1, 5, 15 min) from /proc/loadavg when the run started
	// and ended: other work on the machine shows up here.
	LoadStart string         `json:"loadavg_start,omitempty"`
	LoadEnd   string         `json:"loadavg_end,omitempty"`
	Produce   *ProduceResult `json:"produce,omitempty"`
	Consume   *ConsumeResult `json:"consume,omitempty"`
	TxLoop    *TxLoopResult  `json:"txloop,omitempty"`
	Latency   *LatencyResult `json:"latency,omitempty"`
	// kord's keyed engine (engine.go, recovery.go): its settings, and
	// figures (h), (i), (j).
	Users          int             `json:"users,omitempty"` // distinct keys of the inputs but (j)'s; 0: one per record
	Parallelism    int             `json:"parallelism,omitempty"`
	Keying         string          `json:"keying,omitempty"` // "partition" (ByPartition) or "keyby" (KeyBy)
	Engine         *EngineResult   `json:"engine,omitempty"`
	EngineLatency  *LatencyResult  `json:"engine_latency,omitempty"`
	EngineRecovery *RecoveryResult `json:"engine_recovery,omitempty"`
}

func main() {
	if kind := os.Getenv(childEnv); kind != "" {
		os.Exit(childMain(kind))
	}
	c := config{log: os.Stderr, stepTimeout: 10 * time.Minute}
	flag.StringVar(&c.brokers, "brokers", os.Getenv("KORD_KAFKA_BROKERS"), "bootstrap servers (default $KORD_KAFKA_BROKERS)")
	flag.Int64Var(&c.n, "n", 1_000_000, "records for produce, consume and txloop")
	flag.IntVar(&c.valueBytes, "value-bytes", 100, "value size in bytes (keys are 36-byte UUIDs)")
	flag.IntVar(&c.partitions, "partitions", 12, "partitions of every topic created")
	flag.DurationVar(&c.commitInterval, "commit-interval", time.Second, "transaction commit interval of the loop, checkpoint interval of the engine job")
	flag.StringVar(&c.mode, "mode", "all", modeNames)
	flag.IntVar(&c.users, "users", 0, fmt.Sprintf("distinct keys of the input (0: %d in the engine modes, else a fresh UUID per record)", defaultEngineUsers))
	flag.IntVar(&c.parallelism, "parallelism", 2, "tasks of the engine job's source and counter stages")
	flag.BoolVar(&c.keyBy, "keyby", false, "the engine job keys by the record key with KeyBy (xxhash key groups, shuffled) instead of ByPartition")
	flag.IntVar(&c.recoveryUsers, "recovery-users", 100_000, "distinct keys of the engine recovery input, all in the job's state before the first kill")
	flag.IntVar(&c.kills, "kills", 5, "SIGKILLs of the engine job in -mode engine-recovery and engine-compare")
	flag.DurationVar(&c.killAfter, "kill-after", 4*time.Second, "each engine incarnation runs this long (plus up to one commit interval) after its first commit before the SIGKILL")
	flag.Float64Var(&c.recoveryRate, "recovery-rate", 20000, "records/s of the input in -mode engine-recovery and engine-compare")
	flag.Float64Var(&c.rate, "rate", 0, fmt.Sprintf("records/s of the latency producer; 0 = half of txloop's rate in -mode all, half of the engine's (h) in -mode engine-compare, else %d", defaultLatencyRate))
	flag.DurationVar(&c.duration, "duration", 30*time.Second, "latency measuring window")
	flag.DurationVar(&c.warmup, "warmup", 5*time.Second, "latency warmup before the window (processed, not measured)")
	flag.StringVar(&c.group, "group", "rawloop", "group id the loop commits its offsets to")
	flag.BoolVar(&c.keepTopics, "keep-topics", false, "keep the topics created")
	flag.BoolVar(&c.json, "json", false, "print the summary as JSON")
	pconf := flag.String("producer-conf", "", "librdkafka settings for every producer, key=value,...")
	cconf := flag.String("consumer-conf", "", "librdkafka settings for every consumer, key=value,...")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the whole run (Go code only; librdkafka's threads are not sampled)")
	flag.Parse()
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "rawloop: -cpuprofile: %v\n", err)
			os.Exit(2)
		}
		defer pprof.StopCPUProfile()
	}
	var err error
	if extra.producer, err = parseConf(*pconf); err != nil {
		fmt.Fprintf(os.Stderr, "rawloop: -producer-conf: %v\n", err)
		os.Exit(2)
	}
	if extra.consumer, err = parseConf(*cconf); err != nil {
		fmt.Fprintf(os.Stderr, "rawloop: -consumer-conf: %v\n", err)
		os.Exit(2)
	}
	if err := c.validate(); err != nil {
		fmt.Fprintf(os.Stderr, "rawloop: %v\n", err)
		flag.Usage()
		os.Exit(2)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	sum, err := run(ctx, c)
	if perr := printSummary(os.Stdout, sum, c.json); perr != nil && err == nil {
		err = perr
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "rawloop: FAILED: %v\n", err)
		stop()
		os.Exit(1)
	}
}

// run runs the steps of c.mode and returns what they measured, also when a
// later step failed.
func run(ctx context.Context, c config) (*Summary, error) {
	_, ver := kafka.LibraryVersion()
	sum := &Summary{
		Date: time.Now().UTC().Format(time.RFC3339), Brokers: c.brokers, Mode: c.mode,
		N: c.n, ValueBytes: c.valueBytes, Partitions: c.partitions,
		CommitInterval: c.commitInterval.String(), Librdkafka: ver,
		LoadStart: loadavg(),
	}
	if c.mode != "engine-recovery" { // (j) has keys of its own
		sum.Users = c.keysFor()
	}
	if engineMode(c.mode) {
		sum.Parallelism, sum.Keying = c.parallelism, keying(c.keyBy)
	}
	defer func() { sum.LoadEnd = loadavg() }()
	id := runID()
	logf := func(format string, args ...any) { fmt.Fprintf(c.log, "rawloop: "+format+"\n", args...) }
	step := func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, c.stepTimeout) }

	var topics []string
	defer func() {
		if c.keepTopics || len(topics) == 0 {
			return
		}
		dctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := deleteTopics(dctx, c.brokers, topics...); err != nil {
			logf("warning: %v", err)
		}
	}()
	create := func(names ...string) error {
		sctx, cancel := step()
		defer cancel()
		if err := createTopics(sctx, c.brokers, c.partitions, names...); err != nil {
			return err
		}
		topics = append(topics, names...)
		return nil
	}

	input := "rawloop." + id + ".in"
	if producesInput(c.mode) {
		if err := create(input); err != nil {
			return sum, err
		}
		logf("(a) producing %d records to %s", c.n, input)
		sctx, cancel := step()
		res, err := produceN(sctx, c.brokers, input, c.n, c.valueBytes, newKeys(c.keysFor()))
		cancel()
		if err != nil {
			return sum, fmt.Errorf("(a) produce: %w", err)
		}
		sum.Produce = &res
		logf("(a) %d records in %.2fs: %.0f records/s, %.1f MB/s", res.Records, res.Seconds, res.RecordsPerSec, res.MBPerSec)
	}

	if c.mode == "consume" || c.mode == "all" {
		logf("(b) consuming %s", input)
		sctx, cancel := step()
		res, err := consumeAll(sctx, c.brokers, c.group+".consume", input, c.partitions, c.n)
		cancel()
		if err != nil {
			return sum, fmt.Errorf("(b) consume: %w", err)
		}
		sum.Consume = &res
		logf("(b) %d records in %.2fs: %.0f records/s, %.1f MB/s", res.Records, res.Seconds, res.RecordsPerSec, res.MBPerSec)
	}

	if c.mode == "txloop" || c.mode == "all" || c.mode == "engine" || c.mode == "engine-compare" {
		output := "rawloop." + id + ".out"
		if err := create(output); err != nil {
			return sum, err
		}
		loop := &txLoop{
			brokers: c.brokers, group: c.group, txnID: "rawloop." + id + ".txloop",
			input: input, output: output, partitions: c.partitions,
			valueBytes: c.valueBytes, interval: c.commitInterval, target: newTarget(c.n),
		}
		logf("(c) transactional loop %s -> %s, commit every %s", input, output, c.commitInterval)
		sctx, cancel := step()
		res, err := loop.run(sctx)
		cancel()
		if err != nil {
			return sum, fmt.Errorf("(c) txloop: %w", err)
		}
		sum.TxLoop = &res
		logf("(c) %d events in %.2fs: %.0f events/s, %d transactions, commit %s",
			res.Events, res.Seconds, res.EventsPerSec, res.Transactions, res.Commit)
		sctx, cancel = step()
		v, err := verifyOutput(sctx, c.brokers, c.group+".verify", output, c.partitions, c.n, false)
		cancel()
		res.Verified = &v
		if err != nil {
			return sum, fmt.Errorf("(c) txloop: %w", err)
		}
		logf("(c) verified: %s holds exactly %d committed records, one per input", output, v.Records)
	}

	if c.mode == "engine" || c.mode == "engine-compare" {
		if err := runEngine(ctx, c, sum, id, input, create, logf); err != nil {
			return sum, err
		}
	}

	if c.mode == "latency" || c.mode == "all" {
		rate := c.rate
		switch {
		case rate > 0:
		case sum.TxLoop != nil && c.mode == "all":
			rate = sum.TxLoop.EventsPerSec / 2
		default:
			rate = defaultLatencyRate
		}
		lin, lout := "rawloop."+id+".lat.in", "rawloop."+id+".lat.out"
		if err := create(lin, lout); err != nil {
			return sum, err
		}
		logf("(d) latency at %.0f records/s for %s + %s warmup, commit every %s", rate, c.duration, c.warmup, c.commitInterval)
		pr := c.pacedRun("latency", c.group, lin, lout, rate, false)
		res, err := pr.measure(ctx, pr.loop("rawloop."+id+".latency"))
		sum.Latency = &res
		if err != nil {
			return sum, fmt.Errorf("(d) %w", err)
		}
		logf("(d) %d measured of %d produced, latency %s, drain %.2fs%s",
			res.Measured, res.Produced, res.Latency, res.DrainSeconds, backlogNote(&res))
	}
	if err := runEnginePaced(ctx, c, sum, id, create, logf); err != nil {
		return sum, err
	}
	return sum, nil
}

// loadavg returns the 1, 5 and 15 minute load averages, or "" where
// /proc/loadavg does not exist.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

// backlogNote flags a latency run whose loop did not keep up with its
// input: then the latency figures measure a backlog, not the pipeline.
// Keeping up means the loop's lag at commit stays well under the commit
// interval (a few tens of ms on an idle machine) and the output is complete
// about one interval after the last input.
func backlogNote(r *LatencyResult) string {
	ci, err := time.ParseDuration(r.CommitInterval)
	if err != nil {
		return ""
	}
	limit := max(100*time.Millisecond, ci/4)
	if time.Duration(r.LoopLag.P50Ms*float64(time.Millisecond)) > limit || r.DrainSeconds > 2*ci.Seconds()+1 {
		return fmt.Sprintf(" (SATURATED: the loop fell behind the input, median lag %.0fms at commit; latency measures a backlog)", r.LoopLag.P50Ms)
	}
	return ""
}

func runID() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return time.Now().UTC().Format("20060102T150405") + "." + hex.EncodeToString(b[:])
}

func printSummary(w io.Writer, s *Summary, asJSON bool) error {
	if s == nil {
		return nil
	}
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(s)
	}
	fmt.Fprintf(w, "rawloop %s  mode=%s n=%d value=%dB key=%dB partitions=%d commit-interval=%s librdkafka=%s\n",
		s.Date, s.Mode, s.N, s.ValueBytes, keyLen, s.Partitions, s.CommitInterval, s.Librdkafka)
	if s.Users > 0 {
		fmt.Fprintf(w, "    keys      %d distinct\n", s.Users)
	}
	if s.Parallelism > 0 {
		fmt.Fprintf(w, "    engine    keying=%s parallelism=%d, a ValueState[int64] counter per key\n", s.Keying, s.Parallelism)
	}
	fmt.Fprintf(w, "    loadavg   start %s, end %s\n", s.LoadStart, s.LoadEnd)
	if r := s.Produce; r != nil {
		fmt.Fprintf(w, "(a) produce   %9.0f records/s  %6.1f MB/s  (%d records, %.2fs, idempotent, acks=all)\n",
			r.RecordsPerSec, r.MBPerSec, r.Records, r.Seconds)
	}
	if r := s.Consume; r != nil {
		fmt.Fprintf(w, "(b) consume   %9.0f records/s  %6.1f MB/s  (%d records, %.2fs, read_committed)\n",
			r.RecordsPerSec, r.MBPerSec, r.Records, r.Seconds)
	}
	if r := s.TxLoop; r != nil {
		fmt.Fprintf(w, "(c) txloop    %9.0f events/s   (%d events, %.2fs, %d transactions, commit every %s)\n",
			r.EventsPerSec, r.Events, r.Seconds, r.Transactions, r.CommitInterval)
		fmt.Fprintf(w, "    commit    %s\n", r.Commit)
		if v := r.Verified; v != nil {
			fmt.Fprintf(w, "    verified  %s\n", v)
		}
	}
	if r := s.Latency; r != nil {
		fmt.Fprintf(w, "(d) latency   rate=%.0f/s (achieved %.0f/s), window %.0fs after %.0fs warmup, commit every %s, %d transactions\n",
			r.Rate, r.AchievedRate, r.WindowSeconds, r.WarmupSeconds, r.CommitInterval, r.Transactions)
		fmt.Fprintf(w, "    latency   %s\n", r.Latency)
		fmt.Fprintf(w, "    drain     %.2fs from the last input produced to the whole output read%s\n",
			r.DrainSeconds, backlogNote(r))
		fmt.Fprintf(w, "    commit    %s\n", r.Commit)
		fmt.Fprintf(w, "    loop lag  %s  (at each commit: now - produce time of the last record read)\n", r.LoopLag)
		if v := r.Verified; v != nil {
			fmt.Fprintf(w, "    verified  %s\n", v)
		}
	}
	printEngine(w, s)
	return nil
}
