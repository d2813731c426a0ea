package main

import (
	"image/color"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestWriteReport: the suite's section replaces the one a former run
// wrote, and the rest of the file stays as it was; a file without one gets
// it appended.
func TestWriteReport(t *testing.T) {
	f := filepath.Join(t.TempDir(), "RESULTS.md")
	if err := os.WriteFile(f, []byte("# Results\n\nbefore\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := writeReport(f, "first run\n"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f, []byte(strings.Replace(string(mustRead(t, f)), "before\n", "before\n", 1)+"\nafter\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := writeReport(f, "second run\n"); err != nil {
		t.Fatal(err)
	}
	got := string(mustRead(t, f))
	want := "# Results\n\nbefore\n\n" + beginMark + "\nsecond run\n" + endMark + "\n\nafter\n"
	if got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
}

// TestReport: the ratios are kord's steady events/s over the other
// system's, per round, with their median and spread; a failed run shows.
func TestReport(t *testing.T) {
	all := []figures{
		{System: "kord-partition", Round: "1", SteadyEventsPerSec: 300},
		{System: "flink", Round: "1", SteadyEventsPerSec: 200},
		{System: "kord-partition", Round: "2", SteadyEventsPerSec: 330},
		{System: "flink", Round: "2", SteadyEventsPerSec: 300},
		{System: "kord-partition", Round: "3", SteadyEventsPerSec: 360},
		{System: "flink", Round: "3", Err: "boom"},
	}
	out := report(conditions{rounds: 3, events: 10, users: 1, parallelism: 2}, ceilings{ProduceEventsPerSec: 400000, ConsumeEventsPerSec: 500000}, all, nil)
	for _, want := range []string{"wrote it at 400000 events/s", "read it back at 500000 events/s", "| flink | 1.50 | 1.10 | - | **1.50** [1.10, 1.50] |", "| flink | 200 | 300 | failed | **300** |", "round 3: 0 duplicates, 0 missing, 0 wrong, 0 out of order boom"} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
}

func mustRead(t *testing.T, f string) []byte {
	t.Helper()
	b, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestSystemColors: every system has a color of its own.
func TestSystemColors(t *testing.T) {
	seen := map[color.Color]string{}
	for _, s := range systems() {
		c := systemColor(s.name)
		if other, ok := seen[c]; ok {
			t.Errorf("%s and %s share a color", s.name, other)
		}
		seen[c] = s.name
	}
}

// TestHeadline: the README's table holds each system's medians (steady
// events/s, CPU per event, peak RSS, latency, recovery) under its README
// name, and -readme replaces only what lies between its markers.
func TestHeadline(t *testing.T) {
	all := []figures{
		{System: "kord-partition", Round: "1", Events: 1000, SteadyEventsPerSec: 300, CPUSec: 0.004, PeakRSSMiB: 100},
		{System: "kord-partition", Round: "2", Events: 1000, SteadyEventsPerSec: 330, CPUSec: 0.005, PeakRSSMiB: 120},
		{System: "kord-partition", Round: "3", Events: 1000, SteadyEventsPerSec: 360, CPUSec: 0.006, PeakRSSMiB: 110},
		{System: "flink", Round: "1", Events: 1000, SteadyEventsPerSec: 200, CPUSec: 0.02, PeakRSSMiB: 500},
	}
	paced := []pacedFigures{
		{System: "kord-partition", Round: "1", Rate: 50, LatencyP50Ms: 600, LatencyP99Ms: 1200, RecoverySec: -1},
		{System: "kord-partition", Round: "1", Rate: 50, RecoverySec: 2.25},
		{System: "flink", Round: "1", Rate: 50, LatencyP50Ms: 900, LatencyP99Ms: 3000, RecoverySec: -1},
		{System: "flink", Round: "1", Rate: 50, RecoverySec: 10.5},
	}
	out := headline(conditions{events: 1000, rounds: 3, command: "go run . -x"}, all, paced)
	for _, want := range []string{"1000 events, 3 rounds", "`go run . -x`", "at 50 events/s",
		"| kord, key group = partition | 330 | 5.0 | 110 MiB | 600 / 1200 ms | 2.2 s |",
		"| Apache Flink 2.2.1 (one JVM) | 200 | 20.0 | 500 MiB | 900 / 3000 ms | 10.5 s |"} {
		if !strings.Contains(out, want) {
			t.Errorf("headline lacks %q:\n%s", want, out)
		}
	}
	f := filepath.Join(t.TempDir(), "README.md")
	if err := os.WriteFile(f, []byte("# kord\n\n"+headBegin+"\nold table\n"+headEnd+"\n\nafter\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := writeBlock(f, headBegin, headEnd, "new table\n"); err != nil {
		t.Fatal(err)
	}
	if got, want := string(mustRead(t, f)), "# kord\n\n"+headBegin+"\nnew table\n"+headEnd+"\n\nafter\n"; got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
}

// TestRotation: every round runs every system once, no system takes the
// same place twice, and over the rounds each system's mean place stays
// near the middle, so that a host that slows through the run favours none
// (a rotation by one place a round ran one system 1st, 2nd and 3rd and
// another 8th, 7th and 6th).
func TestRotation(t *testing.T) {
	run := systems()
	for _, rounds := range []int{2, 3, 4, 5} {
		places := map[string][]int{}
		for r := 0; r < rounds; r++ {
			order := rotation(run, r, rounds)
			if len(order) != len(run) {
				t.Fatalf("%d rounds, round %d: %d systems, want %d", rounds, r+1, len(order), len(run))
			}
			for i, s := range order {
				places[s.name] = append(places[s.name], i)
			}
		}
		mid := float64(len(run)-1) / 2
		for name, ps := range places {
			if len(ps) != rounds {
				t.Fatalf("%d rounds: %s ran %d times", rounds, name, len(ps))
			}
			seen, sum := map[int]bool{}, 0
			for _, p := range ps {
				if seen[p] {
					t.Errorf("%d rounds: %s takes place %d twice (places %v)", rounds, name, p+1, ps)
				}
				seen[p] = true
				sum += p
			}
			if mean := float64(sum) / float64(rounds); mean < mid-2 || mean > mid+2 {
				t.Errorf("%d rounds: %s's mean place is %.2f of 0..%d (places %v)", rounds, name, mean, len(run)-1, ps)
			}
		}
	}
}
