// Package transcript runs the data-driven transcript tests of the state
// machines (internal/align, internal/lifecycle). Regenerate their
// expectations with -rewrite and review the diff:
//
//	go test ./internal/align/ ./internal/lifecycle/ -run Transcripts -rewrite
package transcript

import (
	"flag"
	"os"
	"strings"
	"testing"

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
