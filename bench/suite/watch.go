package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"
)

// watchMain is `suite watch`: a probe for running one system by hand (as
// bench/RESULTS.md does for kord-peer). Every second it prints the CPU the
// system's process and the broker's used in that second (in % of one
// core) and the machine's idle share; when the output's last stable
// offsets reach --events, the steady rate between 10 % and 90 % of them,
// timed as the suite times it (timeOutput).
func watchMain(args []string) int {
	fs := flag.NewFlagSet("watch", flag.ContinueOnError)
	brokers := fs.String("brokers", "", "bootstrap servers")
	topic := fs.String("topic", "", "the output topic to watch")
	parts := fs.Int("partitions", 12, "its partitions")
	events := fs.Int64("events", 5_000_000, "results to wait for")
	pid := fs.Int("pid", 0, "the system's process")
	brokerPid := fs.Int("broker-pid", 0, "the broker's process (0: none)")
	limit := fs.Duration("timeout", 5*time.Minute, "give up after this long")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *brokers == "" || *topic == "" || *pid == 0 {
		fmt.Fprintln(os.Stderr, "suite watch: --brokers, --topic and --pid are required")
		return 2
	}
	w, err := newStableWatch(*brokers, *topic, int32(*parts))
	if err != nil {
		fmt.Fprintln(os.Stderr, "suite watch:", err)
		return 1
	}
	defer w.close()
	ctx, cancel := context.WithTimeout(context.Background(), *limit)
	defer cancel()
	base, err := w.sum(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "suite watch:", err)
		return 1
	}
	var lo, hi sample
	start := time.Now()
	cpu0, bcpu0 := ticks(*pid), ticks(*brokerPid)
	idle0, total0 := machineTicks()
	next := start.Add(time.Second)
	for {
		select {
		case <-ctx.Done():
			fmt.Fprintln(os.Stderr, "suite watch: timed out")
			return 1
		case <-time.After(100 * time.Millisecond):
		}
		n, err := w.sum(ctx)
		if err != nil {
			fmt.Fprintln(os.Stderr, "suite watch:", err)
			return 1
		}
		now := time.Now()
		s := sample{at: now, offsets: n - base}
		if lo.at.IsZero() && s.offsets >= *events/10 {
			lo = s
		}
		if now.After(next) {
			cpu, bcpu := ticks(*pid), ticks(*brokerPid)
			idle, total := machineTicks()
			fmt.Printf("%3.0f s  output %9d  system %3.0f %%  broker %3.0f %%  idle %2.0f %%\n", now.Sub(start).Seconds(), s.offsets,
				cpu-cpu0, bcpu-bcpu0, 100*(idle-idle0)/(total-total0))
			cpu0, bcpu0, idle0, total0 = cpu, bcpu, idle, total
			next = next.Add(time.Second)
		}
		if s.offsets >= *events*9/10 {
			hi = s
			break
		}
	}
	fmt.Printf("steady %.0f events/s (from 10 %% to 90 %% of %d)\n", float64(hi.offsets-lo.offsets)/hi.at.Sub(lo.at).Seconds(), *events)
	// The system's CPU by thread once every result is visible, per
	// result: librdkafka names its threads (rdk:main, rdk:broker1, ...);
	// Go's threads carry the program's name, and librdkafka's work inside
	// a cgo call counts there.
	for {
		n, err := w.sum(ctx)
		if err != nil {
			fmt.Fprintln(os.Stderr, "suite watch: waiting for every result:", err)
			return 1
		}
		if n-base >= *events {
			break
		}
		select {
		case <-ctx.Done():
			fmt.Fprintln(os.Stderr, "suite watch: timed out waiting for every result")
			return 1
		case <-time.After(100 * time.Millisecond):
		}
	}
	groups := threadTicks(*pid)
	names := make([]string, 0, len(groups))
	for n := range groups {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool { return groups[names[i]].ticks > groups[names[j]].ticks })
	for _, n := range names {
		g := groups[n]
		fmt.Printf("threads %-20s %3d  CPU %6.2f s  %5.2f µs per event\n", n, g.threads, g.ticks/100, g.ticks/100/float64(*events)*1e6)
	}
	return 0
}

// threadGroup is what threadTicks sums a thread under: its name with
// every run of digits replaced by N (rdk:broker1 and rdk:broker2 are
// rdk:brokerN).
func threadGroup(name string) string {
	var b strings.Builder
	digits := false
	for _, r := range name {
		if r >= '0' && r <= '9' {
			if !digits {
				b.WriteByte('N')
			}
			digits = true
			continue
		}
		digits = false
		b.WriteRune(r)
	}
	return b.String()
}

type threadSum struct {
	threads int
	ticks   float64
}

// threadTicks is a process's CPU time by thread group (threadGroup of
// the name in /proc/PID/task/TID/stat), in clock ticks, over its live
// threads.
func threadTicks(pid int) map[string]threadSum {
	out := map[string]threadSum{}
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	for _, t := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, t.Name()))
		if err != nil {
			continue
		}
		line := string(b)
		open, end := strings.IndexByte(line, '('), strings.LastIndexByte(line, ')')
		if open < 0 || end < open {
			continue
		}
		name := threadGroup(line[open+1 : end])
		g := out[name]
		g.threads++
		g.ticks += statTicks(line)
		out[name] = g
	}
	return out
}

// ticks is a process's CPU time, user and system, in clock ticks (1/100 s:
// % of one core over a second); 0 for pid 0 or a process gone.
func ticks(pid int) float64 {
	if pid == 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	return statTicks(string(b))
}

// statTicks is utime plus stime of a /proc/PID/stat line: its 14th and
// 15th fields, counted past the command name, which is in parentheses and
// may hold spaces and parentheses itself. 0 if the line is short.
func statTicks(line string) float64 {
	f := strings.Fields(line[strings.LastIndexByte(line, ')')+1:])
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseFloat(f[11], 64)
	s, _ := strconv.ParseFloat(f[12], 64)
	return u + s
}

// machineTicks is the machine's idle (with I/O wait) and total CPU time
// from /proc/stat, in clock ticks.
func machineTicks() (idle, total float64) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 1
	}
	line, _, _ := strings.Cut(string(b), "\n")
	for i, f := range strings.Fields(line)[1:] {
		v, _ := strconv.ParseFloat(f, 64)
		if i < 8 { // user nice system idle iowait irq softirq steal
			total += v
		}
		if i == 3 || i == 4 {
			idle += v
		}
	}
	return idle, total
}
