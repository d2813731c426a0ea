package main

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
)

// TestToySink: the job writes each event's count once through the toy
// sink; a second run on more input restores the first's checkpoint and
// appends only the new events' results, each user's counts going on.
func TestToySink(t *testing.T) {
	dir := t.TempDir()
	out, ckpt := filepath.Join(dir, "counts.txt"), filepath.Join(dir, "ckpt")
	for _, events := range []int{30_000, 60_000} {
		n, err := run(context.Background(), out, ckpt, events)
		if err != nil {
			t.Fatal(err)
		}
		if n != events {
			t.Fatalf("%d committed lines after %d events", n, events)
		}
	}
	lines, err := Lines(out)
	if err != nil {
		t.Fatal(err)
	}
	next := map[string]int{}
	for _, l := range lines {
		var user string
		var seq, count int
		if _, err := fmt.Sscanf(l, "%s %d %d", &user, &seq, &count); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		if seq != next[user] || count != seq+1 {
			t.Fatalf("user %s: line %q after %d lines of it (a duplicate, a loss or a reorder)", user, l, next[user])
		}
		next[user]++
	}
}
