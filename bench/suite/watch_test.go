package main

import "testing"

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
