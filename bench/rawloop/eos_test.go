package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"
)

// TestMain lets the recovery figure re-execute this test binary as a job
// incarnation, as the rawloop binary re-executes itself.
func TestMain(m *testing.M) {
	if kind := os.Getenv(childEnv); kind != "" {
		os.Exit(childMain(kind))
	}
	os.Exit(m.Run())
}

// TestCompare runs -mode compare on a tiny input: kord's CountJob next to
// the raw loop (e), (f), and the SIGKILL-and-restart recovery (g), every
// output checked exactly-once.
func TestCompare(t *testing.T) {
	const n = 2000
	c := tinyConfig(t, "compare", func(c *config) { c.users, c.parallelism, c.recoveryUsers = 0, 0, 0 })
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	s, err := run(ctx, c)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	if l := s.TxLoop; l == nil || l.Verified == nil || !l.Verified.OK {
		t.Errorf("txloop: %+v", l)
	}
	e := s.KordEOS
	if e == nil || e.Events != n || e.EventsPerSec <= 0 || e.Checkpoints < 1 || e.Verified == nil ||
		!e.Verified.OK || e.Verified.Records != n || e.Verified.Distinct != n {
		t.Errorf("kord eos: %+v", e)
	}
	for name, l := range map[string]*LatencyResult{"raw": s.Latency, "kord": s.KordLatency} {
		if l == nil {
			t.Errorf("%s latency: missing", name)
			continue
		}
		if l.Produced < 2000 || l.Measured < 1 || l.Latency.P50Ms <= 0 || l.Transactions < 2 ||
			l.Verified == nil || !l.Verified.OK || l.Verified.Records != l.Produced {
			t.Errorf("%s latency: %+v", name, l)
		}
	}
	r := s.Recovery
	if r == nil || len(r.Samples) != 2 || r.Recovery.Count != 2 || r.Recovery.MinMs <= 0 ||
		r.Verified == nil || !r.Verified.OK || r.Verified.Records != r.Produced {
		t.Fatalf("recovery: %+v", r)
	}
	for i, x := range r.Samples {
		// The restarted job runs before it commits, and the reader sees a
		// new output only after a commit of the new incarnation.
		if x.StartMs < 0 || x.RunningMs < x.StartMs || x.FirstNewMs < x.RunningMs {
			t.Errorf("kill %d: %+v", i+1, x)
		}
	}

	var text, js bytes.Buffer
	if err := printSummary(&text, s, false); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"(e) kord eos", "kord/raw", "(f) kord lat", "(g) recovery", "first new output visible"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, text.String())
		}
	}
	if err := printSummary(&js, s, true); err != nil {
		t.Fatal(err)
	}
	var back Summary
	if err := json.Unmarshal(js.Bytes(), &back); err != nil || back.KordEOS == nil || back.Recovery == nil {
		t.Errorf("JSON summary does not round-trip (%v)", err)
	}
}
