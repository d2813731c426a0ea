// Command testlog reads `go test -json` from its standard input, prints
// what go test prints without -v (each package's result, and a failed
// test's output when it fails), keeps the JSON in a file, and
// writes a report: every package's time, the slowest tests, and each
// failed test's whole output. scripts/test.sh pipes every go test through
// it, so that a CI run that fails once leaves what it failed on and how
// long everything took.
//
//	go test -json ./... | testlog -json run.json -report run.txt
//
// It exits 0 whatever the tests did: the pipeline's status is go test's
// (set -o pipefail).
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"
)

// event is one line of test2json's output (go doc cmd/test2json).
type event struct {
	Time    time.Time
	Action  string
	Package string
	Test    string
	Elapsed float64
	Output  string
}

type key struct{ pkg, test string }

func main() {
	jsonPath := flag.String("json", "", "keep the events in this file")
	reportPath := flag.String("report", "", "write the report to this file")
	flag.Parse()
	var keep io.Writer = io.Discard
	if *jsonPath != "" {
		f, err := os.Create(*jsonPath)
		if err != nil {
			fmt.Fprintln(os.Stderr, "testlog:", err)
		} else {
			defer f.Close()
			keep = f
		}
	}
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	outputs := map[key]*strings.Builder{}
	var failed []key
	elapsed := map[key]float64{}
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 64<<20)
	for in.Scan() {
		line := in.Bytes()
		fmt.Fprintf(keep, "%s\n", line)
		var e event
		if err := json.Unmarshal(line, &e); err != nil {
			// Not an event (a build tool's line): print it as it came.
			fmt.Fprintf(out, "%s\n", line)
			continue
		}
		k := key{e.Package, e.Test}
		if e.Output != "" {
			switch {
			case e.Test == "":
				// The package's own lines: "ok", "FAIL", build errors, what
				// a TestMain or a child process printed.
				if e.Output != "PASS\n" {
					out.WriteString(e.Output)
				}
			case !strings.HasPrefix(e.Output, "=== "):
				// A test's lines are shown only if it fails, as go test
				// does without -v.
				if outputs[k] == nil {
					outputs[k] = &strings.Builder{}
				}
				outputs[k].WriteString(e.Output)
			}
		}
		switch e.Action {
		case "pass", "fail", "skip":
			elapsed[k] = e.Elapsed
			if e.Action == "fail" && e.Test != "" {
				failed = append(failed, k)
				if o := outputs[k]; o != nil {
					out.WriteString(o.String())
				}
			}
			out.Flush()
		}
	}
	out.Flush()
	if *reportPath != "" {
		if err := os.WriteFile(*reportPath, []byte(report(elapsed, failed, outputs)), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "testlog:", err)
		}
	}
}

// report is the packages' times, the 20 slowest tests, and the failures
// with their output.
func report(elapsed map[key]float64, failed []key, outputs map[key]*strings.Builder) string {
	var b strings.Builder
	var pkgs, tests []key
	for k := range elapsed {
		if k.test == "" {
			pkgs = append(pkgs, k)
		} else if !strings.Contains(k.test, "/") {
			tests = append(tests, k)
		}
	}
	slowest := func(ks []key) {
		sort.Slice(ks, func(i, j int) bool { return elapsed[ks[i]] > elapsed[ks[j]] })
	}
	slowest(pkgs)
	slowest(tests)
	b.WriteString("packages, by time:\n")
	for _, k := range pkgs {
		fmt.Fprintf(&b, "  %8.1fs  %s\n", elapsed[k], k.pkg)
	}
	b.WriteString("the slowest tests:\n")
	for i, k := range tests {
		if i == 20 {
			break
		}
		fmt.Fprintf(&b, "  %8.1fs  %s %s\n", elapsed[k], k.pkg, k.test)
	}
	fmt.Fprintf(&b, "failed: %d\n", len(failed))
	for _, k := range failed {
		fmt.Fprintf(&b, "\n=== %s %s (%.1fs)\n", k.pkg, k.test, elapsed[k])
		if o := outputs[k]; o != nil {
			b.WriteString(o.String())
		}
	}
	return b.String()
}
