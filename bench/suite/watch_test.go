package main

import (
	"os"
	"testing"
	"time"
)

// TestStatTicks: utime and stime are found past a command name with
// spaces and parentheses.
func TestStatTicks(t *testing.T) {
	line := "4242 (kord (peer) x) S 1 4242 4242 0 -1 4194560 100 0 0 0 1234 567 0 0 20 0 9 0 100 1000 200\n"
	if got := statTicks(line); got != 1234+567 {
		t.Fatalf("statTicks = %v, want %v", got, 1234+567)
	}
	if got := statTicks("1 (short) S 1"); got != 0 {
		t.Fatalf("statTicks of a short line = %v, want 0", got)
	}
}

// TestThreadTicks: librdkafka's numbered threads fall in one group, and
// this process's own threads are found with its CPU time.
func TestThreadTicks(t *testing.T) {
	for name, want := range map[string]string{"rdk:broker1": "rdk:brokerN", "rdk:broker-12": "rdk:broker-N", "rdk:main": "rdk:main", "a1b22c": "aNbNc"} {
		if got := threadGroup(name); got != want {
			t.Errorf("threadGroup(%q) = %q, want %q", name, got, want)
		}
	}
	// Spin until the kernel has counted a tick of this process's CPU
	// (every 10 ms of it), for at most 5 s.
	var threads int
	var ticks float64
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end) && ticks < 1; {
		threads, ticks = 0, 0
		for _, g := range threadTicks(os.Getpid()) {
			threads += g.threads
			ticks += g.ticks
		}
	}
	if threads < 1 || ticks < 1 {
		t.Fatalf("threadTicks of this process: %d threads, %v ticks; want at least 1 of each", threads, ticks)
	}
}
