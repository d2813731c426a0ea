package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/kordproject/kord/kordtest"
)

// brokers returns KORD_KAFKA_BROKERS, or else an in-process kfake cluster
// closed when t ends.
func brokers(t *testing.T) string {
	t.Helper()
	if b := os.Getenv("KORD_KAFKA_BROKERS"); b != "" {
		return b
	}
	c, err := kordtest.NewCluster()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return strings.Join(c.Brokers(), ",")
}

// TestRunAll runs every mode on a tiny input and checks the counts: the
// tool must keep producing exactly-once output and sane figures.
func TestRunAll(t *testing.T) {
	const n = 2000
	c := tinyConfig(t, "all", func(c *config) {
		c.duration, c.warmup = 1500*time.Millisecond, 500*time.Millisecond
		c.users, c.parallelism, c.recoveryUsers, c.kills, c.killAfter, c.recoveryRate = 0, 0, 0, 0, 0, 0
	})
	before := runtime.NumGoroutine()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s, err := run(ctx, c)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	checkGoroutines(t, before)

	if p := s.Produce; p == nil || p.Records != n || p.RecordsPerSec <= 0 || p.PayloadBytes != n*(keyLen+100) {
		t.Errorf("produce: %+v", p)
	}
	if r := s.Consume; r == nil || r.Records != n || r.PayloadBytes != n*(keyLen+100) || r.RecordsPerSec <= 0 {
		t.Errorf("consume: %+v", r)
	}
	if l := s.TxLoop; l == nil || l.Events != n || l.Transactions < 1 || l.Commit.Count != l.Transactions ||
		l.Verified == nil || !l.Verified.OK || l.Verified.Records != n || l.Verified.Distinct != n {
		t.Errorf("txloop: %+v", l)
	}
	l := s.Latency
	if l == nil {
		t.Fatal("no latency result")
	}
	// 2,000/s for 2 s, give or take the pacing's last tick.
	if l.Produced < 3500 || l.Produced > 4000 || l.Measured < 1 || l.Measured > l.Produced {
		t.Errorf("latency counts: produced %d, measured %d", l.Produced, l.Measured)
	}
	if v := l.Verified; v == nil || !v.OK || v.Records != l.Produced {
		t.Errorf("latency output check: %+v", v)
	}
	// Output is visible only at commit: with commits every 200 ms, the
	// median cannot be below ~0 nor above a few intervals here.
	if l.Latency.P50Ms <= 0 || l.Latency.MaxMs < l.Latency.P50Ms || l.Latency.P50Ms > 5000 {
		t.Errorf("latency: %s", l.Latency)
	}
	if l.Transactions < 2 {
		t.Errorf("latency run committed %d transactions in 2 s at a 200 ms interval", l.Transactions)
	}

	var text, js bytes.Buffer
	if err := printSummary(&text, s, false); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`\(a\) produce`, `\(b\) consume`, `\(c\) txloop`, `verified  ok=true`, `\(d\) latency`} {
		if !regexp.MustCompile(want).Match(text.Bytes()) {
			t.Errorf("summary lacks %q:\n%s", want, text.String())
		}
	}
	if err := printSummary(&js, s, true); err != nil {
		t.Fatal(err)
	}
	var back Summary
	if err := json.Unmarshal(js.Bytes(), &back); err != nil || back.TxLoop == nil || back.TxLoop.Events != n {
		t.Errorf("JSON summary does not round-trip (%v):\n%s", err, js.String())
	}
}

// checkGoroutines checks that every client is closed and every goroutine
// ended: no more goroutines than before (kfake's per-connection goroutines
// end shortly after the clients go).
func checkGoroutines(t *testing.T, before int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); runtime.NumGoroutine() > before; {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Errorf("%d goroutines after the run, %d before:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestKeyGen(t *testing.T) {
	g := newKeyGen(1)
	buf := make([]byte, keyLen)
	uuid := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	seen := map[string]bool{}
	for range 1000 {
		k := string(g.next(buf))
		if !uuid.MatchString(k) {
			t.Fatalf("%q is not a version-4 UUID", k)
		}
		seen[k] = true
	}
	if len(seen) != 1000 {
		t.Errorf("%d distinct keys of 1000", len(seen))
	}
}

func TestOutputValue(t *testing.T) {
	in := make([]byte, 100)
	fillInput(in, 1234567890123, 42)
	at, err := producedAt(in)
	if err != nil || at != 1234567890123 {
		t.Fatalf("producedAt = %d, %v", at, err)
	}
	out := make([]byte, 100)
	fillOutput(out, in, 7, 99)
	f, err := parseOutput(out)
	if err != nil || f != (outputFields{producedAtNs: 1234567890123, inPartition: 7, inOffset: 99}) {
		t.Fatalf("parseOutput = %+v, %v", f, err)
	}
	if _, err := parseOutput(out[:minValueBytes-1]); err == nil {
		t.Error("parseOutput accepted a short value")
	}
}

func TestDurationStats(t *testing.T) {
	var ds []time.Duration
	for i := 100; i >= 1; i-- {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	s := durationStats(ds)
	want := DurationStats{Count: 100, MeanMs: 50.5, MinMs: 1, P50Ms: 50, P90Ms: 90, P95Ms: 95, P99Ms: 99, MaxMs: 100}
	if s != want {
		t.Errorf("got %+v, want %+v", s, want)
	}
	if (durationStats(nil) != DurationStats{}) {
		t.Error("stats of nothing are not zero")
	}
}

func TestParseConf(t *testing.T) {
	m, err := parseConf(" a=1, b.c=x=y ,")
	if err != nil || len(m) != 2 || m["a"] != "1" || m["b.c"] != "x=y" {
		t.Errorf("got %v, %v", m, err)
	}
	if _, err := parseConf("novalue"); err == nil {
		t.Error("accepted a setting without =")
	}
}
