package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"time"
)

// The suite's section of bench/RESULTS.md lies between these markers; a
// run replaces it and leaves the rest of the file as it is.
const (
	beginMark = "<!-- suite:begin (written by bench/suite; edits inside are lost) -->"
	endMark   = "<!-- suite:end -->"
)

// conditions are what a report states about its run.
type conditions struct {
	command                 string
	events, users, rounds   int
	parallelism             int
	latencyRate             int
	latencyDur, recoveryDur time.Duration
	brokers                 string
	root                    string // kord's repository
}

// report renders the suite's section: conditions, then per system and
// round the throughput figures, kord's ratios to each system (per round
// and their median, with the spread), latency and recovery.
func report(c conditions, ceil ceilings, all []figures, paced []pacedFigures) string {
	var b strings.Builder
	fmt.Fprintf(&b, "## The benchmark suite (`bench/suite`)\n\n")
	fmt.Fprintf(&b, "Run %s on %s: `%s`.\n\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"), machine(), c.command)
	fmt.Fprintf(&b, "- Input: %d JSON events, %d users, %d partitions, produced once before the throughput runs (a backlog that every system reads from the start, into an output topic of its own).\n", c.events, c.users, partitions)
	fmt.Fprintf(&b, "- Every system: parallelism %d, a checkpoint or commit every 1 s, exactly-once where it has it (goka has not); the broker and the system share the machine; the read_committed reader that checks each output runs beside them under nice 19, on the CPU they leave idle.\n", c.parallelism)
	fmt.Fprintf(&b, "- %d rounds; each round runs every system once, in an order rotated by round × systems / rounds places (each system runs early, midway and late), and each run's topics are deleted after it.\n", c.rounds)
	fmt.Fprintf(&b, "- Versions: %s; Kafka broker %s; the peers' versions are in their READMEs (`bench/peers/*/README.md`).\n", runtime.Version(), kafkaVersion(c.root))
	if ceil.ProduceEventsPerSec > 0 || ceil.ConsumeEventsPerSec > 0 {
		fmt.Fprintf(&b, "- The clients' ceilings on this machine, on this input: the suite's producer (kord's producer package, librdkafka, idempotent, linger.ms 5) wrote it at %.0f events/s; the suite's read_committed reader (plain confluent-kafka-go) read it back at %.0f events/s. The throughput runs are timed by the output's last stable offsets (polled every 100 ms: what read_committed readers can read), not through the reader, which checks every output in full but at the lowest CPU priority; the latency and recovery runs are measured through it.\n", ceil.ProduceEventsPerSec, ceil.ConsumeEventsPerSec)
	}
	b.WriteString("\n")
	systems := order(all)
	b.WriteString("### Throughput (events/s at steady state: from 10 % to 90 % of the output visible, by its last stable offsets)\n\n")
	b.WriteString("| system | " + roundCols(c.rounds) + " median | events/s, whole run (median) | first output (median) | CPU s (median) | peak RSS MiB (median) | broker CPU s (median) | checks |\n")
	b.WriteString("|---|" + strings.Repeat("---|", c.rounds) + "---|---|---|---|---|---|---|\n")
	for _, s := range systems {
		fs := of(all, s)
		fmt.Fprintf(&b, "| %s | ", s)
		for r := 1; r <= c.rounds; r++ {
			if f, ok := inRound(fs, r); ok && f.Err == "" {
				fmt.Fprintf(&b, "%.0f | ", f.SteadyEventsPerSec)
			} else {
				b.WriteString("failed | ")
			}
		}
		fmt.Fprintf(&b, "**%.0f** | %.0f | %.2f s | %.1f | %.0f | %.1f | %s |\n",
			med(fs, func(f figures) float64 { return f.SteadyEventsPerSec }),
			med(fs, func(f figures) float64 { return f.EventsPerSec }),
			med(fs, func(f figures) float64 { return f.FirstOutputSec }),
			med(fs, func(f figures) float64 { return f.CPUSec }),
			med(fs, func(f figures) float64 { return f.PeakRSSMiB }),
			med(fs, func(f figures) float64 { return f.BrokerCPUSec }),
			checks(fs))
	}
	for _, k := range []string{"kord-partition", "kord-keyby"} {
		kf := of(all, k)
		if len(kf) == 0 {
			continue
		}
		fmt.Fprintf(&b, "\n%s's ratio of steady events/s to each system's, per round, median [min, max]:\n\n", k)
		b.WriteString("| against | " + roundCols(c.rounds) + " median [min, max] |\n|---|" + strings.Repeat("---|", c.rounds) + "---|\n")
		for _, s := range systems {
			if s == k {
				continue
			}
			var ratios []float64
			fmt.Fprintf(&b, "| %s | ", s)
			for r := 1; r <= c.rounds; r++ {
				a, ok1 := inRound(kf, r)
				o, ok2 := inRound(of(all, s), r)
				if ok1 && ok2 && a.Err == "" && o.Err == "" && o.SteadyEventsPerSec > 0 {
					x := a.SteadyEventsPerSec / o.SteadyEventsPerSec
					ratios = append(ratios, x)
					fmt.Fprintf(&b, "%.2f | ", x)
				} else {
					b.WriteString("- | ")
				}
			}
			if len(ratios) > 0 {
				slices.Sort(ratios)
				fmt.Fprintf(&b, "**%.2f** [%.2f, %.2f] |\n", ratios[len(ratios)/2], ratios[0], ratios[len(ratios)-1])
			} else {
				b.WriteString("- |\n")
			}
		}
	}
	if len(paced) > 0 {
		fmt.Fprintf(&b, "\n### Latency at %d events/s, and recovery after SIGKILL\n\n", paced[0].Rate)
		n := 0
		for _, s := range order2(paced) {
			lat, rec := pacedOf(paced, s)
			n = max(n, len(lat), len(rec))
		}
		fmt.Fprintf(&b, "%d round(s) of latency and recovery runs (`-paced-rounds`), after the throughput rounds. ", n)
		fmt.Fprintf(&b, "Latency: input produced at that rate for %v while the system runs; a result's latency is from its event's production to its visibility to the read_committed reader, over the events after the first fifth. Recovery: input at the same rate for %v, the system SIGKILLed half-way and started again at once; from the kill to the first result past the output's last stable offsets at the kill.\n\n", c.latencyDur, c.recoveryDur)
		b.WriteString("| system | p50 ms (median) | p99 ms (median) | recovery s (median) | per round: p50 / p99 / recovery | checks |\n|---|---|---|---|---|---|\n")
		for _, s := range order2(paced) {
			lat, rec := pacedOf(paced, s)
			var rounds []string
			for i := range max(len(lat), len(rec)) {
				l, r := "-", "-"
				if i < len(lat) && lat[i].Err == "" {
					l = fmt.Sprintf("%.0f / %.0f", lat[i].LatencyP50Ms, lat[i].LatencyP99Ms)
				}
				if i < len(rec) && rec[i].Err == "" {
					r = fmt.Sprintf("%.2f s", rec[i].RecoverySec)
				}
				rounds = append(rounds, l+" / "+r)
			}
			recovery := "not measured"
			if len(rec) > 0 {
				recovery = fmt.Sprintf("%.2f", medP(rec, func(p pacedFigures) float64 { return p.RecoverySec }))
			}
			fmt.Fprintf(&b, "| %s | %.0f | %.0f | %s | %s | %s |\n", s,
				medP(lat, func(p pacedFigures) float64 { return p.LatencyP50Ms }),
				medP(lat, func(p pacedFigures) float64 { return p.LatencyP99Ms }),
				recovery,
				strings.Join(rounds, "; "), pacedChecks(append(lat, rec...)))
		}
	}
	b.WriteString("\nPlots, in the `-plots` directory: `progress-round<N>.png` (results visible over time: the slope is the throughput, each step of an exactly-once system a commit), `throughput-round<N>.png` (the same as a rate) and `latency.png`.\n")
	return b.String()
}

// pacedOf returns system s's latency runs and its recovery runs.
func pacedOf(paced []pacedFigures, s string) (lat, rec []pacedFigures) {
	for _, p := range paced {
		if p.System == s && p.RecoverySec < 0 {
			lat = append(lat, p)
		} else if p.System == s {
			rec = append(rec, p)
		}
	}
	return lat, rec
}

// writeReport replaces the suite's section of file (bench/RESULTS.md), or
// appends it when the file has none.
func writeReport(file, section string) error {
	return writeBlock(file, beginMark, endMark, section)
}

// writeBlock replaces what lies between begin and end in file, or appends
// the block when the file has none.
func writeBlock(file, begin, end, content string) error {
	old, err := os.ReadFile(file)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	s := string(old)
	block := begin + "\n" + content + end + "\n"
	if i, j := strings.Index(s, begin), strings.Index(s, end); i >= 0 && j > i {
		s = s[:i] + block + s[j+len(end)+1:]
	} else {
		s = strings.TrimRight(s, "\n") + "\n\n" + block
	}
	return os.WriteFile(file, []byte(s), 0o644)
}

// The headline table's place in the README (-readme).
const (
	headBegin = "<!-- suite-headline:begin (written by bench/suite -readme; edits inside are lost) -->"
	headEnd   = "<!-- suite-headline:end -->"
)

// headlineNames are the systems as the README names them.
var headlineNames = map[string]string{
	"kord-partition":   "kord, key group = partition",
	"kord-keyby":       "kord, keyed by the uuid field",
	"flink":            "Apache Flink 2.2.1 (one JVM)",
	"kstreams-memory":  "Kafka Streams 4.4.0, in-memory store",
	"kstreams-rocksdb": "Kafka Streams 4.4.0, RocksDB",
	"franz":            "franz-go transactional loop",
	"librdkafka":       "librdkafka (confluent-kafka-go) transactional loop",
	"goka":             "goka (at least once)",
}

// headline renders the README's table from the same figures as the
// report: medians of the steady events/s, CPU, peak RSS, latency and
// recovery, per system, so that the README never drifts from RESULTS.md.
func headline(c conditions, all []figures, paced []pacedFigures) string {
	var b strings.Builder
	rate := 0
	if len(paced) > 0 {
		rate = paced[0].Rate
	}
	fmt.Fprintf(&b, "%d events, %d rounds, run %s (`bench/suite`, `%s`):\n\n", c.events, c.rounds, time.Now().UTC().Format("2006-01-02"), c.command)
	fmt.Fprintf(&b, "| system | events/s, steady (median) | CPU µs per event | peak RSS | latency p50 / p99 at %d events/s | SIGKILL to new output |\n|---|---|---|---|---|---|\n", rate)
	for _, s := range order(all) {
		fs := of(all, s)
		lat, rec := pacedOf(paced, s)
		name := headlineNames[s]
		if name == "" {
			name = s
		}
		latency, recovery := "not measured", "not measured"
		if len(lat) > 0 {
			latency = fmt.Sprintf("%.0f / %.0f ms", medP(lat, func(p pacedFigures) float64 { return p.LatencyP50Ms }),
				medP(lat, func(p pacedFigures) float64 { return p.LatencyP99Ms }))
		}
		if len(rec) > 0 {
			recovery = fmt.Sprintf("%.1f s", medP(rec, func(p pacedFigures) float64 { return p.RecoverySec }))
		}
		fmt.Fprintf(&b, "| %s | %.0f | %.1f | %.0f MiB | %s | %s |\n", name,
			med(fs, func(f figures) float64 { return f.SteadyEventsPerSec }),
			med(fs, func(f figures) float64 { return f.CPUSec * 1e6 / float64(max(f.Events, 1)) }),
			med(fs, func(f figures) float64 { return f.PeakRSSMiB }),
			latency, recovery)
	}
	return b.String()
}

func roundCols(n int) string {
	var b strings.Builder
	for r := 1; r <= n; r++ {
		fmt.Fprintf(&b, "round %d | ", r)
	}
	return b.String()
}

func order(all []figures) []string {
	var out []string
	for _, f := range all {
		if !slices.Contains(out, f.System) {
			out = append(out, f.System)
		}
	}
	return out
}

func order2(all []pacedFigures) []string {
	var out []string
	for _, f := range all {
		if !slices.Contains(out, f.System) {
			out = append(out, f.System)
		}
	}
	return out
}

func of(all []figures, system string) []figures {
	var out []figures
	for _, f := range all {
		if f.System == system {
			out = append(out, f)
		}
	}
	return out
}

func inRound(fs []figures, r int) (figures, bool) {
	for _, f := range fs {
		if f.Round == fmt.Sprint(r) {
			return f, true
		}
	}
	return figures{}, false
}

func med(fs []figures, v func(figures) float64) float64 {
	var xs []float64
	for _, f := range fs {
		if f.Err == "" {
			xs = append(xs, v(f))
		}
	}
	if len(xs) == 0 {
		return 0
	}
	slices.Sort(xs)
	return xs[len(xs)/2]
}

func medP(ps []pacedFigures, v func(pacedFigures) float64) float64 {
	var xs []float64
	for _, p := range ps {
		if p.Err == "" {
			xs = append(xs, v(p))
		}
	}
	if len(xs) == 0 {
		return 0
	}
	slices.Sort(xs)
	return xs[len(xs)/2]
}

func checks(fs []figures) string {
	var bad []string
	for _, f := range fs {
		if f.Err != "" || f.Duplicates > 0 || f.Missing > 0 || f.WrongCounts > 0 || f.Disorder > 0 {
			bad = append(bad, fmt.Sprintf("round %s: %d duplicates, %d missing, %d wrong, %d out of order %s", f.Round, f.Duplicates, f.Missing, f.WrongCounts, f.Disorder, f.Err))
		}
	}
	if len(bad) == 0 {
		return "every result once, in order, right counts"
	}
	return strings.Join(bad, "; ")
}

func pacedChecks(ps []pacedFigures) string {
	var bad []string
	for _, p := range ps {
		if p.Err != "" || p.Duplicates > 0 || p.Missing > 0 {
			bad = append(bad, fmt.Sprintf("round %s: %d duplicates, %d missing %s", p.Round, p.Duplicates, p.Missing, p.Err))
		}
	}
	if len(bad) == 0 {
		return "every result once"
	}
	return strings.Join(bad, "; ")
}

// machine describes this machine: CPU model and count, memory.
func machine() string {
	model := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "model name"); ok {
				model = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	mem := ""
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		if f := strings.Fields(string(b)); len(f) > 1 {
			var kb int64
			fmt.Sscan(f[1], &kb)
			mem = fmt.Sprintf(", %.0f GiB", float64(kb)/(1<<20))
		}
	}
	return fmt.Sprintf("%d × %s%s", runtime.NumCPU(), model, mem)
}

// kafkaVersion is the broker version scripts/kafka.sh (under root) runs.
func kafkaVersion(root string) string {
	if v := os.Getenv("KORD_KAFKA_VERSION"); v != "" {
		return v
	}
	if m := regexp.MustCompile(`KORD_KAFKA_VERSION:-([0-9.]+)`).FindSubmatch(must(os.ReadFile(filepath.Join(root, "scripts", "kafka.sh")))); m != nil {
		return string(m[1])
	}
	return "unknown"
}

func must(b []byte, _ error) []byte { return b }
