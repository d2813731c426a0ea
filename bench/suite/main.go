// Command suite runs the benchmark suite of issue #14: the main example's
// job (bench/peers/CONTRACT.md) on kord and on each peer, one after
// another on the same input, alternated over rounds, every output checked
// by the same independent read_committed reader.
//
//	cd bench/suite && go run . -quick
//
// starts the project's broker (scripts/kafka.sh) for the run, unless
// -brokers names one.
//
// Throughput runs (a backlog of -events processed from the start)
// measure events/s over the whole run and at steady state (10 % to 90 % of
// the output visible), time to first output, the process's CPU seconds and
// peak RSS, and the broker's CPU seconds (when -kafka-dir names the
// broker's state directory). What is visible is timed by the output's last
// stable offsets, polled every 100 ms (what read_committed readers can
// read, without reading it); the reader that checks the output runs in a
// process of its own under nice 19, and catches up once the system is
// done (verifyChild). Latency runs produce at a fixed rate (half
// the slowest system's steady events/s, the same for all) while the system
// runs, and measure each result's time from its event's production to its
// visibility to the read_committed reader. Recovery runs SIGKILL the
// system half-way and start it again at once, and measure from the kill to
// the first result the new process commits. Every output is checked:
// every event's result once, in per-user order, with the right count.
//
// Two ceilings are measured once per invocation, on the input: the rate at
// which the suite's producer wrote it, and the rate at which the suite's
// read_committed reader reads it back. No figure measured through the
// producer can exceed its rate on this machine; the throughput runs are not
// measured through the reader. The raw librdkafka transactional loop that
// kord was first measured against (bench/rawloop, now folded in here) is
// the peer "librdkafka".
//
// The report (-results), the figures (-out) and the plots (-plots) are
// written at the end.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// system is one contestant: how to start it, given the run's topics.
type system struct {
	name string
	argv func(self string, root string) []string // the command before the contract's flags
	eos  bool                                    // exactly-once: a duplicate fails the run
	// optIn: run only when -systems names it (a measurement, not a peer).
	optIn bool
}

func systems() []system {
	peer := func(dir string, extra ...string) func(string, string) []string {
		return func(_ string, root string) []string {
			return append([]string{filepath.Join(root, "bench", "peers", dir, "run.sh")}, extra...)
		}
	}
	return []system{
		{name: "kord-partition", eos: true, argv: func(self, _ string) []string { return []string{self, "kord-peer"} }},
		{name: "kord-keyby", eos: true, argv: func(self, _ string) []string { return []string{self, "kord-peer", "--keyby"} }},
		{name: "flink", eos: true, argv: peer("flink")},
		{name: "kstreams-rocksdb", eos: true, argv: peer("kstreams", "--store", "rocksdb")},
		{name: "kstreams-memory", eos: true, argv: peer("kstreams", "--store", "memory")},
		{name: "franz", eos: true, argv: peer("franz")},
		{name: "librdkafka", eos: true, argv: peer("librdkafka")},
		{name: "goka", eos: false, argv: peer("goka")},
		{name: "kord-clients", eos: true, optIn: true, argv: func(self, _ string) []string { return []string{self, "clients-peer"} }},
		{name: "kord-clients-copy", eos: false, optIn: true, argv: func(self, _ string) []string { return []string{self, "clients-peer", "--copy"} }},
	}
}

// figures is one run of one system.
type figures struct {
	System, Round      string
	Events             int
	EventsPerSec       float64 // over the whole run: start to the last result visible
	SteadyEventsPerSec float64 // 10 % to 90 % of the results visible
	FirstOutputSec     float64 // start to the first result visible
	CPUSec             float64
	PeakRSSMiB         float64
	BrokerCPUSec       float64 // -1: unknown
	Duplicates         int
	Disorder           int
	WrongCounts        int
	Missing            int
	// Series is the output's rate over the run: results visible per
	// second, in buckets of SeriesStepSec from the system's start.
	Series        []float64
	SeriesStepSec float64
	Err           string `json:",omitempty"`
}

// ceilings are the clients' limits on this machine, measured on the
// throughput runs' input.
type ceilings struct {
	// ProduceEventsPerSec: the suite's producer (kord's producer package,
	// librdkafka underneath, idempotent, linger.ms 5) writing the input,
	// from its creation to the last event acknowledged.
	ProduceEventsPerSec float64
	// ConsumeEventsPerSec: the suite's read_committed reader (plain
	// confluent-kafka-go) reading the input back, first event to last.
	ConsumeEventsPerSec float64
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "kord-peer" {
		os.Exit(kordPeer(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == "clients-peer" {
		os.Exit(clientsPeer(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == "verify" {
		os.Exit(verifyMain(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == "watch" {
		os.Exit(watchMain(os.Args[2:]))
	}
	os.Exit(cli(os.Args[1:]))
}

func cli(args []string) int {
	fs := flag.NewFlagSet("suite", flag.ContinueOnError)
	brokers := fs.String("brokers", "", "bootstrap servers of the broker to run on (default: start one with scripts/kafka.sh, and stop it at the end)")
	kafkaDir := fs.String("kafka-dir", os.Getenv("KORD_KAFKA_DIR"), "scripts/kafka.sh's state directory of that broker, for its CPU time")
	quick := fs.Bool("quick", false, "a first look in a few minutes: 200,000 events, one round, 15 s latency and 16 s recovery runs")
	events := fs.Int("events", 5_000_000, "events of the throughput runs' input (JVMs warm up within the first million)")
	users := fs.Int("users", 10_000, "distinct users")
	rounds := fs.Int("rounds", 3, "rounds of the throughput runs; each runs every system once, in an order that rotates (see rotation)")
	pacedRounds := fs.Int("paced-rounds", 1, "rounds of the latency and recovery runs, after the throughput rounds (one round of all 8 systems takes about 20 minutes); 0: none")
	only := fs.String("systems", "", "comma-separated systems to run (default: all but kord-clients and kord-clients-copy, which run only when named): "+names())
	par := fs.Int("parallelism", 2, "tasks or threads per system")
	out := fs.String("out", "", "write every figure as JSON to this file")
	plots := fs.String("plots", "", "write the plots as PNG files into this directory: progress-round<N>.png, throughput-round<N>.png, latency.png")
	results := fs.String("results", "", "write the suite's section of this markdown file (bench/RESULTS.md), replacing the one a former run wrote")
	latRate := fs.Int("latency-rate", 0, "events/s of the latency and recovery runs (default: half the slowest system's steady events/s in this invocation's throughput runs)")
	latDur := fs.Duration("latency-duration", time.Minute, "input duration of each latency run")
	recDur := fs.Duration("recovery-duration", 30*time.Second, "input duration of each recovery run (SIGKILL half-way)")
	timeout := fs.Duration("timeout", 15*time.Minute, "longest run of one system")
	from := fs.String("from", "", "run nothing: draw the plots (-plots) and the README's headline table (-readme) from the figures a former run wrote (-out)")
	readme := fs.String("readme", "", "write the headline table into this markdown file (the repository's README.md), between its suite-headline markers")
	warmup := fs.Bool("warmup", true, "run the first system once before round 1, not counted: the broker's JVM warms up over its first minutes, which favoured whatever ran last")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *quick {
		*events, *rounds, *latDur, *recDur = 200_000, 1, 15*time.Second, 16*time.Second
	}
	if *from != "" {
		root, _ := repoRoot()
		return replot(*from, *plots, *readme, *results, conditions{users: *users, parallelism: *par, latencyDur: *latDur, recoveryDur: *recDur, root: root})
	}
	var run []system
	for _, s := range systems() {
		if (*only == "" && !s.optIn) || slices.Contains(strings.Split(*only, ","), s.name) {
			run = append(run, s)
		}
	}
	if len(run) == 0 {
		fmt.Fprintf(os.Stderr, "suite: -systems %q names none of %s\n", *only, names())
		return 2
	}
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, "suite:", err)
		return 1
	}
	root, err := repoRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, "suite:", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *brokers == "" {
		// The project's broker, started for this run and stopped after it.
		dir, err := os.MkdirTemp("", "kord-suite-kafka-")
		if err != nil {
			fmt.Fprintln(os.Stderr, "suite:", err)
			return 1
		}
		script := filepath.Join(root, "scripts", "kafka.sh")
		start := exec.CommandContext(ctx, script, "start")
		start.Env = append(os.Environ(), "KORD_KAFKA_DIR="+dir)
		start.Stderr = os.Stderr
		b, err := start.Output()
		if err != nil {
			fmt.Fprintln(os.Stderr, "suite: starting the broker with scripts/kafka.sh:", err)
			return 1
		}
		defer func() {
			stop := exec.Command(script, "stop")
			stop.Env = append(os.Environ(), "KORD_KAFKA_DIR="+dir)
			_ = stop.Run()
		}()
		lines := strings.Fields(string(b))
		*brokers, *kafkaDir = lines[len(lines)-1], dir
		fmt.Printf("broker %s (scripts/kafka.sh, state in %s)\n", *brokers, dir)
	}
	var all []figures
	stamp := time.Now().Unix()
	warm := *warmup
	// One input for every throughput run: each system reads it from the
	// start into an output topic of its own.
	input := fmt.Sprintf("suite-%d.in", stamp)
	fmt.Printf("producing %d events to %s\n", *events, input)
	if err := createTopics(ctx, *brokers, partitions, input); err != nil {
		fmt.Fprintln(os.Stderr, "suite:", err)
		return 1
	}
	defer dropRun(*brokers, input)
	began := time.Now()
	if err := produceInput(ctx, *brokers, input, *events, *users, 1, 0); err != nil {
		fmt.Fprintln(os.Stderr, "suite: producing the input:", err)
		return 1
	}
	var ceil ceilings
	ceil.ProduceEventsPerSec = float64(*events) / time.Since(began).Seconds()
	rctx, cancel := context.WithTimeout(ctx, *timeout)
	ceil.ConsumeEventsPerSec, err = consumeRate(rctx, *brokers, input, partitions, *events)
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "suite: reading the input back:", err)
		return 1
	}
	fmt.Printf("ceilings: the producer wrote %.0f events/s, the read_committed reader read %.0f events/s\n", ceil.ProduceEventsPerSec, ceil.ConsumeEventsPerSec)
	if warm {
		f := runOne(ctx, run[0], run[0].argv(self, root), runSpec{brokers: *brokers, kafkaDir: *kafkaDir, input: input, events: *events, users: *users,
			par: *par, round: 0, stamp: stamp, timeout: *timeout})
		fmt.Printf("%-17s warm-up (not counted): %9.0f events/s (steady %9.0f) %s\n", f.System, f.EventsPerSec, f.SteadyEventsPerSec, f.Err)
	}
	for r := 0; r < *rounds; r++ {
		order := rotation(run, r, *rounds)
		for _, s := range order {
			if ctx.Err() != nil {
				return 1
			}
			f := runOne(ctx, s, s.argv(self, root), runSpec{brokers: *brokers, kafkaDir: *kafkaDir, input: input, events: *events, users: *users,
				par: *par, round: r + 1, stamp: stamp, timeout: *timeout})
			all = append(all, f)
			fmt.Printf("%-17s round %d: %9.0f events/s (steady %9.0f), first output %5.2f s, CPU %6.1f s, peak RSS %6.0f MiB, broker CPU %6.1f s, dup %d, missing %d, wrong %d %s\n",
				f.System, r+1, f.EventsPerSec, f.SteadyEventsPerSec, f.FirstOutputSec, f.CPUSec, f.PeakRSSMiB, f.BrokerCPUSec, f.Duplicates, f.Missing, f.WrongCounts, f.Err)
		}
	}
	rate := *latRate
	if rate <= 0 {
		rate = halfSlowest(all)
	}
	var paced []pacedFigures
	for _, kill := range []bool{false, true} {
		for r := 0; r < *pacedRounds && rate > 0; r++ {
			order := rotation(run, r, *pacedRounds)
			for _, s := range order {
				if ctx.Err() != nil {
					return 1
				}
				d := *latDur
				if kill {
					d = *recDur
				}
				p := runPaced(ctx, s, s.argv(self, root), runSpec{brokers: *brokers, kafkaDir: *kafkaDir, users: *users,
					par: *par, round: r + 1, stamp: stamp, timeout: *timeout}, rate, d, kill)
				paced = append(paced, p)
				if kill {
					fmt.Printf("%-17s round %d: SIGKILL to the first new result %6.2f s at %d events/s, dup %d, missing %d %s\n",
						p.System, r+1, p.RecoverySec, p.Rate, p.Duplicates, p.Missing, p.Err)
				} else {
					fmt.Printf("%-17s round %d: latency p50 %7.1f ms, p99 %7.1f ms at %d events/s, dup %d, missing %d %s\n",
						p.System, r+1, p.LatencyP50Ms, p.LatencyP99Ms, p.Rate, p.Duplicates, p.Missing, p.Err)
				}
			}
		}
	}
	if *out != "" {
		b, _ := json.MarshalIndent(map[string]any{"command": "go run . " + strings.Join(args, " "), "ceilings": ceil, "throughput": all, "paced": paced}, "", "  ")
		if err := os.WriteFile(*out, b, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "suite:", err)
			return 1
		}
	}
	if *plots != "" {
		if err := os.MkdirAll(*plots, 0o755); err != nil {
			fmt.Fprintln(os.Stderr, "suite:", err)
			return 1
		}
		for r := 1; r <= *rounds; r++ {
			if err := plotThroughput(all, fmt.Sprint(r), filepath.Join(*plots, fmt.Sprintf("throughput-round%d.png", r))); err != nil {
				fmt.Fprintln(os.Stderr, "suite: plot:", err)
				return 1
			}
			if err := plotProgress(all, fmt.Sprint(r), filepath.Join(*plots, fmt.Sprintf("progress-round%d.png", r))); err != nil {
				fmt.Fprintln(os.Stderr, "suite: plot:", err)
				return 1
			}
		}
		if err := plotLatency(paced, filepath.Join(*plots, "latency.png")); err != nil {
			fmt.Fprintln(os.Stderr, "suite: plot:", err)
			return 1
		}
	}
	if *readme != "" {
		c := conditions{command: "go run . " + strings.Join(args, " "), events: *events, rounds: *rounds}
		if err := writeBlock(*readme, headBegin, headEnd, headline(c, all, paced)); err != nil {
			fmt.Fprintln(os.Stderr, "suite:", err)
			return 1
		}
	}
	if *results != "" {
		c := conditions{command: "go run . " + strings.Join(args, " "), events: *events, users: *users, rounds: *rounds, parallelism: *par,
			latencyRate: rate, latencyDur: *latDur, recoveryDur: *recDur, brokers: *brokers, root: root}
		if err := writeReport(*results, report(c, ceil, all, paced)); err != nil {
			fmt.Fprintln(os.Stderr, "suite:", err)
			return 1
		}
	}
	for _, p := range paced {
		if p.Err != "" {
			return 1
		}
	}
	for _, f := range all {
		if f.Err != "" {
			return 1
		}
	}
	return 0
}

func names() string {
	var n []string
	for _, s := range systems() {
		n = append(n, s.name)
	}
	return strings.Join(n, ",")
}

// repoRoot finds kord's repository root from the working directory.
func repoRoot() (string, error) {
	d, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(d, "bench", "peers", "CONTRACT.md")); err == nil {
			return d, nil
		}
		up := filepath.Dir(d)
		if up == d {
			return "", errors.New("run the suite inside kord's repository (bench/peers/CONTRACT.md not found above the working directory)")
		}
		d = up
	}
}

// halfSlowest is half the steady events/s of the slowest system (its
// median over rounds), over the runs that passed: the rate every system
// gets in the latency runs, so that none is overloaded.
func halfSlowest(all []figures) int {
	by := map[string][]float64{}
	for _, f := range all {
		if f.Err == "" && f.SteadyEventsPerSec > 0 {
			by[f.System] = append(by[f.System], f.SteadyEventsPerSec)
		}
	}
	slowest := 0.0
	for _, v := range by {
		slices.Sort(v)
		if m := v[len(v)/2]; slowest == 0 || m < slowest {
			slowest = m
		}
	}
	return int(slowest / 2)
}

// replot draws the plots of the figures in file (a former run's -out)
// into dir, writes their headline table into readme and their report into
// results, each when named; c holds the conditions the file does not
// (users, parallelism, the paced runs' durations: the run's flags).
func replot(file, dir, readme, results string, c conditions) int {
	b, err := os.ReadFile(file)
	if err != nil {
		fmt.Fprintln(os.Stderr, "suite:", err)
		return 1
	}
	var figs struct {
		Command    string
		Ceilings   ceilings
		Throughput []figures
		Paced      []pacedFigures
	}
	if err := json.Unmarshal(b, &figs); err != nil {
		fmt.Fprintf(os.Stderr, "suite: %s: %v\n", file, err)
		return 1
	}
	if dir == "" && readme == "" && results == "" {
		fmt.Fprintln(os.Stderr, "suite: -from needs -plots, -readme or -results")
		return 2
	}
	if len(figs.Throughput) > 0 {
		c.command, c.events = figs.Command, figs.Throughput[0].Events
		if c.command == "" {
			c.command = "figures from " + filepath.Base(file)
		}
		for _, f := range figs.Throughput {
			var r int
			fmt.Sscan(f.Round, &r)
			c.rounds = max(c.rounds, r)
		}
		if readme != "" {
			if err := writeBlock(readme, headBegin, headEnd, headline(c, figs.Throughput, figs.Paced)); err != nil {
				fmt.Fprintln(os.Stderr, "suite:", err)
				return 1
			}
		}
		if results != "" {
			if err := writeReport(results, report(c, figs.Ceilings, figs.Throughput, figs.Paced)); err != nil {
				fmt.Fprintln(os.Stderr, "suite:", err)
				return 1
			}
		}
	}
	if dir == "" {
		return 0
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "suite:", err)
		return 1
	}
	rounds := 0
	for _, f := range figs.Throughput {
		var r int
		fmt.Sscan(f.Round, &r)
		rounds = max(rounds, r)
	}
	for r := 1; r <= rounds; r++ {
		for name, draw := range map[string]func([]figures, string, string) error{"throughput": plotThroughput, "progress": plotProgress} {
			if err := draw(figs.Throughput, fmt.Sprint(r), filepath.Join(dir, fmt.Sprintf("%s-round%d.png", name, r))); err != nil {
				fmt.Fprintln(os.Stderr, "suite: plot:", err)
				return 1
			}
		}
	}
	if err := plotLatency(figs.Paced, filepath.Join(dir, "latency.png")); err != nil {
		fmt.Fprintln(os.Stderr, "suite: plot:", err)
		return 1
	}
	return 0
}

// rotation is the order of round r of rounds: run rotated by r×len/rounds
// places, so that each system's places spread over the rounds and no
// system always runs first (a cold broker) or last. With 8 systems and 3
// rounds the rotations are 0, 2 and 5: kord-partition runs 1st, 7th and
// 4th, Flink 3rd, 1st and 6th. A rotation by one place a round (what the
// suite did) ran Flink 3rd, 2nd and 1st and kord-partition 1st, 8th and
// 7th, on a host that slowed through the run.
func rotation(run []system, r, rounds int) []system {
	k := r * len(run) / max(rounds, 1) % len(run)
	return append(slices.Clone(run[k:]), run[:k]...)
}
