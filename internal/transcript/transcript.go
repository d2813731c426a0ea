// Package transcript runs the data-driven transcript tests of the state
// machines (internal/align, internal/lifecycle). Regenerate their
// expectations with -rewrite and review the diff:
//
//	go test ./internal/align/ ./internal/lifecycle/ -run Transcripts -rewrite
package transcript

import (
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the expected output of transcript tests in testdata/")

// Run runs one data-driven transcript (raft's testdata style):
// blocks separated by blank lines, each optional "#" comment lines, a
// command, a "----" line and the expected output. exec runs a command and
// returns its output. With -rewrite the file is rewritten with the actual
// outputs (review the diff).
func Run(t *testing.T, path string, exec func(cmd string) string) {
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	var out strings.Builder
	for _, b := range strings.Split(strings.TrimRight(string(data), "\n"), "\n\n") {
		lines := strings.Split(b, "\n")
		var comments []string
		for len(lines) > 0 && strings.HasPrefix(lines[0], "#") {
			comments = append(comments, lines[0])
			lines = lines[1:]
		}
		require.GreaterOrEqual(t, len(lines), 2, "%s: block %q", path, b)
		cmd := lines[0]
		require.Equal(t, "----", lines[1], "%s: %q", path, cmd)
		want := strings.Join(lines[2:], "\n")
		got := exec(cmd)
		if !*rewrite {
			require.Equal(t, want, got, "%s: %s", path, cmd)
		}
		for _, c := range comments {
			out.WriteString(c + "\n")
		}
		out.WriteString(cmd + "\n----\n")
		if got != "" {
			out.WriteString(got + "\n")
		}
		out.WriteString("\n")
	}
	if *rewrite {
		require.NoError(t, os.WriteFile(path, []byte(strings.TrimRight(out.String(), "\n")+"\n"), 0o644))
	}
}

// RunDir runs every transcript in testdata/*.txt as a subtest, each with
// the exec that start returns: a fresh state machine per file.
func RunDir(t *testing.T, start func(t *testing.T) func(cmd string) string) {
	files, err := filepath.Glob("testdata/*.txt")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) { Run(t, f, start(t)) })
	}
}

// Command is one transcript command: its name, its bare number (an id,
// 0 when none) and its key=value arguments.
type Command struct {
	Name string
	ID   uint64
	Args map[string]string
	t    *testing.T
	line string
}

// Parse splits a command line.
func Parse(t *testing.T, line string) Command {
	fields := strings.Fields(line)
	require.NotEmpty(t, fields, "an empty command")
	c := Command{Name: fields[0], Args: map[string]string{}, t: t, line: line}
	for _, f := range fields[1:] {
		if k, v, ok := strings.Cut(f, "="); ok {
			c.Args[k] = v
		} else {
			n, err := strconv.ParseUint(f, 10, 64)
			require.NoError(t, err, line)
			c.ID = n
		}
	}
	return c
}

// Int is argument k as a number, 0 when absent.
func (c Command) Int(k string) int {
	if c.Args[k] == "" {
		return 0
	}
	n, err := strconv.Atoi(c.Args[k])
	require.NoError(c.t, err, c.line)
	return n
}

// Duration is argument k as a duration, 0 when absent.
func (c Command) Duration(k string) time.Duration {
	if c.Args[k] == "" {
		return 0
	}
	d, err := time.ParseDuration(c.Args[k])
	require.NoError(c.t, err, c.line)
	return d
}
