package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// TestMain lets the recovery figure (j) re-execute this test binary as a
// job incarnation, as the rawloop binary re-executes itself.
func TestMain(m *testing.M) {
	if kind := os.Getenv(childEnv); kind != "" {
		os.Exit(childMain(kind))
	}
	os.Exit(m.Run())
}

// tinyConfig is a tiny run of mode (every figure in seconds), changed by
// edit if not nil, then validated.
func tinyConfig(t *testing.T, mode string, edit func(*config)) config {
	c := config{
		brokers:        brokers(t),
		n:              2000,
		valueBytes:     100,
		partitions:     12,
		commitInterval: 200 * time.Millisecond,
		mode:           mode,
		rate:           2000,
		duration:       1 * time.Second,
		warmup:         300 * time.Millisecond,
		group:          "rawloop.test",
		stepTimeout:    30 * time.Second,
		kills:          2,
		killAfter:      300 * time.Millisecond,
		recoveryRate:   2000,
		users:          500,
		parallelism:    2,
		recoveryUsers:  minRecoveryUsers,
		log:            io.Discard,
	}
	if testing.Verbose() {
		c.log = os.Stderr
	}
	if edit != nil {
		edit(&c)
	}
	if err := c.validate(); err != nil {
		t.Fatal(err)
	}
	return c
}

// engineConfig is a tiny run of an engine mode.
func engineConfig(t *testing.T, mode string) config { return tinyConfig(t, mode, nil) }

// TestEngineCompare runs -mode engine-compare on a tiny input: the keyed
// engine next to the raw loop (h), its latency (i), and its SIGKILL-and-
// restart recovery with state (j), every output checked exactly-once with
// each key's counts.
func TestEngineCompare(t *testing.T) {
	c := engineConfig(t, "engine-compare")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := run(ctx, c)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	if l := s.TxLoop; l == nil || l.Verified == nil || !l.Verified.OK {
		t.Errorf("txloop: %+v", l)
	}
	e := s.Engine
	if e == nil || e.Events != c.n || e.EventsPerSec <= 0 || e.Checkpoints < 1 || e.Alignment.Count < 1 || e.Verified == nil ||
		!e.Verified.OK || e.Verified.Records != c.n || e.Verified.Distinct != c.n || e.Verified.Keys != int64(c.users) {
		t.Errorf("engine: %+v", e)
	}
	if l := s.EngineLatency; l == nil || l.Produced < 2000 || l.Measured < 1 || l.Latency.P50Ms <= 0 || l.Transactions < 2 ||
		l.Verified == nil || !l.Verified.OK || l.Verified.Records != l.Produced || l.Verified.Keys < 1 {
		t.Errorf("engine latency: %+v", l)
	}
	r := s.EngineRecovery
	if r == nil || r.Job != "keyed" || r.StateKeys != minRecoveryUsers || len(r.Samples) != 2 || r.Recovery.Count != 2 ||
		r.Recovery.MinMs <= 0 || r.Verified == nil || !r.Verified.OK || r.Verified.Records != r.Produced ||
		r.Verified.Keys != minRecoveryUsers {
		t.Fatalf("engine recovery: %+v", r)
	}
	for i, x := range r.Samples {
		// Each restart restores its state before it processes a record, and
		// the reader sees a new output only after a commit of the restart.
		if x.StartMs < 0 || x.RecoveryMs < x.StartMs || x.RunningMs < x.RecoveryMs || x.FirstNewMs < x.RunningMs {
			t.Errorf("kill %d: %+v", i+1, x)
		}
	}

	var text, js bytes.Buffer
	if err := printSummary(&text, s, false); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"(c) txloop", "(h) engine", "engine/raw", "(i) eng lat", "p90=", "(j) eng rec",
		"state restored", "keys=500 (per-key counts", "keying=partition parallelism=2"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, text.String())
		}
	}
	if err := printSummary(&js, s, true); err != nil {
		t.Fatal(err)
	}
	var back Summary
	if err := json.Unmarshal(js.Bytes(), &back); err != nil || back.Engine == nil || back.Engine.Events != c.n ||
		back.EngineLatency == nil || back.EngineRecovery == nil || back.Keying != "partition" {
		t.Errorf("JSON summary does not round-trip (%v):\n%s", err, js.String())
	}
}

// TestEngineKeyBy runs (h) with KeyBy: records shuffled to the task owning
// their key group. The job leaves no goroutine behind.
func TestEngineKeyBy(t *testing.T) {
	c := engineConfig(t, "engine")
	c.keyBy = true
	before := runtime.NumGoroutine()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := run(ctx, c)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	checkGoroutines(t, before)
	if e := s.Engine; e == nil || e.Verified == nil || !e.Verified.OK || e.Verified.Keys != int64(c.users) || s.Keying != "keyby" {
		t.Errorf("engine: %+v, keying %q", e, s.Keying)
	}
}

func TestEngineValidate(t *testing.T) {
	c := config{brokers: "b", n: 1, valueBytes: minValueBytes, partitions: 1, commitInterval: time.Second,
		mode: "engine-compare", duration: time.Second, recoveryUsers: 10}
	err := c.validate()
	for _, want := range []string{"-value-bytes", "-parallelism", "-recovery-users"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("validate() = %v, want an error about %s", err, want)
		}
	}
	c.mode = "txloop"
	if err := c.validate(); err != nil {
		t.Errorf("the engine's limits apply to mode txloop: %v", err)
	}
	// checkpoint.CountJob's modes went with it.
	for _, mode := range []string{"eos", "eos-latency", "recovery", "compare"} {
		c.mode = mode
		if err := c.validate(); err == nil || !strings.Contains(err.Error(), "-mode") {
			t.Errorf("mode %s: validate() = %v, want an error about -mode", mode, err)
		}
	}
}

func TestKeyPool(t *testing.T) {
	p := newKeyPool(100, 1)
	first := map[string]bool{}
	for range 100 {
		first[string(p.next(nil))] = true
	}
	if len(first) != 100 {
		t.Fatalf("the first 100 records have %d distinct keys of 100", len(first))
	}
	for range 1000 {
		if k := string(p.next(nil)); !first[k] {
			t.Fatalf("key %q is not in the pool", k)
		}
	}
}

// TestCountCheck: the engine output check catches state that lost or
// repeated a record even when every input has exactly one output.
func TestCountCheck(t *testing.T) {
	topic := "out"
	msg := func(key string, offset, count int64) *kafka.Message {
		in := make([]byte, 100)
		fillInput(in, 1, 0)
		v := make([]byte, 100)
		fillOutput(v, in, 0, offset)
		putCount(v, count)
		return &kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: 0}, Key: []byte(key), Value: v}
	}
	for _, tc := range []struct {
		name   string
		counts []int64 // of key "a" at offsets 0, 1, 2
		ok     bool
	}{
		{"in order", []int64{1, 2, 3}, true},
		{"repeated", []int64{1, 2, 2}, false},
		{"lost", []int64{1, 3, 4}, false},
	} {
		o := newOutputCheck(1, true)
		// Read in another order than the input's: the check sorts by offset.
		for _, i := range []int{2, 0, 1} {
			if _, err := o.add(msg("a", int64(i), tc.counts[i])); err != nil {
				t.Fatal(err)
			}
		}
		v, err := o.result(topic, 3)
		if (err == nil) != tc.ok || v.OK != tc.ok || (tc.ok && v.Keys != 1) {
			t.Errorf("%s: %+v, %v", tc.name, v, err)
		}
	}
}
