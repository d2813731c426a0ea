// Command soak runs kord's main job (examples/userbehavior) for a long
// time on a real Kafka cluster, with input arriving at a paced rate and
// the job SIGKILLed at random every few minutes and started again, and
// checks that it leaks nothing (issue #31): it samples the job process's
// resident memory (VmRSS, peak VmHWM) and open files from /proc, its
// goroutines and kord's open librdkafka handles (cluster.OpenHandles)
// from the lines the job writes with -stats, and the checkpoint
// directory's size. At the end it runs the job's independent check
// (-phase verify: every result exactly once, in order, with the right
// count) and fits a least-squares slope to each series; it exits 1 when
// the check fails or a slope is over its limit.
//
// The long mode, on the three brokers of scripts/kafka-cluster.sh, from
// the module's root:
//
//	B=$(KORD_KAFKA_CLUSTER_DIR=/tmp/kord-soak-cluster scripts/kafka-cluster.sh start | tail -1)
//	go run ./bench/soak -brokers $B -duration 1h -name long
//	KORD_KAFKA_CLUSTER_DIR=/tmp/kord-soak-cluster scripts/kafka-cluster.sh stop
//
// It writes bench/plots/soak-<name>.svg and .csv (the samples, as they
// come) and prints the figures. CI runs
// a short version on one broker: TestSoak (KORD_SOAK=1).
//
// What "flat" means. A SIGKILLed process starts again at its fresh size,
// so a fit over the whole run would measure the restarts. The process's
// series (RSS, goroutines, fds, handles) are fitted per life: one slope
// shared by every life, each with an intercept of its own, over the
// samples after each life's warm-up (-warmup: the restore and the catch-up
// on what arrived meanwhile). The checkpoint directory outlives the
// process and is fitted over the whole run after its first tenth (at
// least -warmup). The limits, per hour, are the flags -max-*; their
// defaults are stated and justified in bench/RESULTS.md ("Soak").
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"
)

func main() {
	os.Exit(cli(os.Args[1:], os.Stdout))
}

func cli(args []string, out io.Writer) int {
	cfg, name, plots, keep, err := parse(args, out)
	if err != nil {
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := soak(ctx, cfg, name, plots, keep, out)
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		return 1
	}
	if len(res.failures) > 0 {
		return 1
	}
	return 0
}

func parse(args []string, out io.Writer) (cfg config, name, plots string, keep bool, err error) {
	fl := flag.NewFlagSet("soak", flag.ContinueOnError)
	fl.StringVar(&cfg.brokers, "brokers", os.Getenv("KORD_KAFKA_BROKERS"), "Kafka bootstrap servers (default $KORD_KAFKA_BROKERS)")
	fl.StringVar(&cfg.job, "job", "", "the userbehavior binary (default: built from this module with go build)")
	fl.DurationVar(&cfg.duration, "duration", time.Hour, "how long input arrives; the job then finishes it")
	fl.IntVar(&cfg.rate, "rate", 500, "input events per second")
	fl.IntVar(&cfg.users, "users", 10_000, "distinct users (keys)")
	fl.IntVar(&cfg.partitions, "partitions", 6, "partitions of the input and output topics")
	fl.DurationVar(&cfg.interval, "interval", time.Second, "the job's checkpoint interval")
	fl.DurationVar(&cfg.killMin, "kill-min", 2*time.Minute, "shortest life before a SIGKILL")
	fl.DurationVar(&cfg.killMax, "kill-max", 5*time.Minute, "longest life before a SIGKILL")
	fl.DurationVar(&cfg.every, "every", 5*time.Second, "sampling period")
	fl.DurationVar(&cfg.warmup, "warmup", time.Minute, "the start of each life left out of the fits")
	fl.Uint64Var(&cfg.seed, "seed", 1, "seed of the kill times and of the input")
	fl.Float64Var(&cfg.limits.rss, "max-rss", 32, "limit of the RSS slope, MiB/h")
	fl.Float64Var(&cfg.limits.goroutines, "max-goroutines", 20, "limit of the goroutines' slope, per hour")
	fl.Float64Var(&cfg.limits.fds, "max-fds", 20, "limit of the open files' slope, per hour")
	fl.Float64Var(&cfg.limits.handles, "max-handles", 1, "limit of the librdkafka handles' slope, per hour")
	fl.Float64Var(&cfg.limits.disk, "max-disk", 8, "limit of the checkpoint directory's slope, MiB/h")
	fl.StringVar(&name, "name", "long", "the run's name: the plot is <plots>/soak-<name>.svg")
	fl.StringVar(&plots, "plots", "bench/plots", "directory of the plot")
	fl.BoolVar(&keep, "keep", false, "keep the working directory (logs, stats, checkpoints)")
	if err = fl.Parse(args); err != nil {
		return
	}
	if cfg.brokers == "" {
		err = fmt.Errorf("no -brokers and no KORD_KAFKA_BROKERS")
		fmt.Fprintln(out, "soak:", err)
	}
	cfg.log = out
	return
}

// soak builds the job if needed, runs cfg in a fresh working directory,
// prints the figures and writes the plot.
func soak(ctx context.Context, cfg config, name, plots string, keep bool, out io.Writer) (*result, error) {
	dir, err := os.MkdirTemp("", "kord-soak-")
	if err != nil {
		return nil, err
	}
	if keep {
		fmt.Fprintln(out, "soak: working directory", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	cfg.dir = dir
	if cfg.job == "" {
		cfg.job = filepath.Join(dir, "userbehavior")
		b, err := exec.CommandContext(ctx, "go", "build", "-o", cfg.job, "github.com/kordproject/kord/examples/userbehavior").CombinedOutput()
		if err != nil {
			return nil, fmt.Errorf("building the job: %v\n%s", err, b)
		}
	}
	if plots != "" {
		f, err := os.Create(filepath.Join(plots, "soak-"+name+".csv"))
		if err != nil {
			return nil, err
		}
		defer f.Close()
		fmt.Fprintln(f, csvHeader)
		cfg.csv = f
	}
	res, err := run(ctx, cfg)
	if err != nil {
		return nil, err
	}
	report(out, cfg, res)
	if plots != "" {
		path := filepath.Join(plots, "soak-"+name+".svg")
		if err := os.WriteFile(path, plot(cfg, res, name), 0o644); err != nil {
			return res, err
		}
		fmt.Fprintln(out, "plot:", path)
	}
	return res, nil
}

// report prints the figures: one line per series, then the verdict.
func report(w io.Writer, cfg config, res *result) {
	fmt.Fprintf(w, "\nsoak: %v of input at %d events/s (%d events), %d SIGKILLs, %d samples, wall %v\n",
		cfg.duration, cfg.rate, res.events, len(res.kills), len(res.samples), res.wall.Round(time.Second))
	fmt.Fprintf(w, "%-15s %10s %10s %10s %14s %12s\n", "series", "first", "last", "max", "slope/h", "limit/h")
	for _, sr := range series {
		var first, last, mx float64
		for i, s := range res.samples {
			v := sr.y(s)
			if i == 0 {
				first = v
			}
			last, mx = v, max(mx, v)
		}
		slope := "-"
		if res.fitted[sr.name] {
			slope = fmt.Sprintf("%+.3f", res.slopes[sr.name])
		}
		fmt.Fprintf(w, "%-15s %10.1f %10.1f %10.1f %14s %12.2f %s\n", sr.name, first, last, mx, slope, sr.limit(cfg.limits), sr.unit)
	}
	fmt.Fprintf(w, "peak VmHWM %.1f MiB; checkpoint directory max %.2f MiB, at the end %.2f MiB\n", res.peakHWM, res.maxDisk, res.lastDisk)
	lives := map[int]bool{}
	for _, s := range res.samples {
		lives[s.life] = true
	}
	ls := make([]int, 0, len(lives))
	for l := range lives {
		ls = append(ls, l)
	}
	sort.Ints(ls)
	fmt.Fprintf(w, "lives sampled: %d; verify: %s\n", len(ls), res.verify)
	if len(res.failures) == 0 {
		fmt.Fprintln(w, "FLAT: every slope within its limit, and the independent check passed")
		return
	}
	fmt.Fprintln(w, "NOT FLAT:\n  "+strings.Join(res.failures, "\n  "))
}
