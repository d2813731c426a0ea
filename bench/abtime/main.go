// Command abtime times two whole commands in turn, A B A B ..., and prints
// each one's wall seconds, CPU seconds (user + system, the operating
// system's accounting of the reaped process and the children it waited
// for) and peak resident memory (the largest single process among them),
// each as median (min–max), then the ratio A/B taken pair by pair.
// Pairing keeps the ratio meaningful when the machine's speed drifts during
// the runs.
//
//	go run ./bench/abtime -n 5 -a 'CMD A' -b 'CMD B'
//
// Each command is one string run by sh -c; what it prints is discarded
// unless it redirects it itself. A warm-up pair (-warmup) runs first and is
// not counted. abtime never judges: a command's non-zero exit is printed
// beside its run, not acted on.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"syscall"
	"time"
)

// run is one timed run of a command.
type run struct {
	wall, cpu float64 // seconds
	peak      int64   // KiB
	exit      int
}

func main() {
	n := flag.Int("n", 5, "counted runs of each command")
	warm := flag.Int("warmup", 1, "runs of each command before the counted ones")
	a := flag.String("a", "", "command A (sh -c)")
	b := flag.String("b", "", "command B (sh -c), the baseline")
	flag.Parse()
	if *a == "" || *b == "" || *n < 1 || *warm < 0 {
		fmt.Fprintln(os.Stderr, "usage: abtime [-n RUNS] [-warmup N] -a 'COMMAND A' -b 'COMMAND B'")
		os.Exit(2)
	}
	for i := 0; i < *warm; i++ {
		for _, c := range []string{*a, *b} {
			if _, err := time1(c); err != nil {
				fmt.Fprintln(os.Stderr, "abtime:", err)
				os.Exit(1)
			}
		}
	}
	var as, bs []run
	for i := 0; i < *n; i++ {
		ra, err := time1(*a)
		if err == nil {
			var rb run
			rb, err = time1(*b)
			as, bs = append(as, ra), append(bs, rb)
			fmt.Printf("pair %d: A wall %.3f cpu %.3f peak %d MiB exit %d | B wall %.3f cpu %.3f peak %d MiB exit %d\n",
				i+1, ra.wall, ra.cpu, ra.peak/1024, ra.exit, rb.wall, rb.cpu, rb.peak/1024, rb.exit)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "abtime:", err)
			os.Exit(1)
		}
	}
	report("A", as)
	report("B", bs)
	ratio := func(f func(run) float64) string {
		r := make([]float64, len(as))
		for i := range as {
			r[i] = f(as[i]) / f(bs[i])
		}
		return spread(r, "%.3f")
	}
	fmt.Printf("A/B: wall %s  cpu %s  peak %s\n",
		ratio(func(r run) float64 { return r.wall }),
		ratio(func(r run) float64 { return r.cpu }),
		ratio(func(r run) float64 { return float64(r.peak) }))
}

// time1 runs c once under sh -c and measures it.
func time1(c string) (run, error) {
	cmd := exec.Command("sh", "-c", c)
	cmd.Stdin = nil
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return run{}, fmt.Errorf("starting %q: %w", c, err)
	}
	err := cmd.Wait()
	wall := time.Since(start).Seconds()
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		return run{}, fmt.Errorf("waiting for %q: %w", c, err)
	}
	ru, _ := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	r := run{wall: wall, exit: cmd.ProcessState.ExitCode()}
	if ru != nil {
		r.cpu = time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
		r.peak = ru.Maxrss // KiB on Linux
	}
	return r, nil
}

// report prints one command's figures as median (min–max).
func report(name string, rs []run) {
	w, c, p := make([]float64, len(rs)), make([]float64, len(rs)), make([]float64, len(rs))
	for i, r := range rs {
		w[i], c[i], p[i] = r.wall, r.cpu, float64(r.peak)/1024
	}
	fmt.Printf("%s: wall s %s  cpu s %s  peak MiB %s\n", name, spread(w, "%.3f"), spread(c, "%.3f"), spread(p, "%.0f"))
}

// spread formats the median and range of v.
func spread(v []float64, f string) string {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return fmt.Sprintf(f+" ("+f+"–"+f+")", m, s[0], s[len(s)-1])
}
