// Package testdir holds test helpers for checkpoint directories.
package testdir

import (
	"os"
	"path/filepath"
	"testing"
)

// Copy copies the files of a checkpoint directory (not its LOCK, not
// subdirectories) into to, as shared storage would show them to a second
// copy of a job.
func Copy(t testing.TB, from, to string) {
	t.Helper()
	entries, err := os.ReadDir(from)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() == "LOCK" || e.IsDir() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(from, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(to, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
