// Package hivetest gives tests the real Hive Metastore that
// scripts/hive-metastore.sh runs: its address from KORD_HIVE_METASTORE,
// and the script's stop and resume, for outages. scripts/test.sh starts
// one and sets both variables.
//
// Without KORD_HIVE_METASTORE a test that needs it is skipped, or fails
// when KORD_REQUIRE_HIVE=1, so that CI cannot pass without it.
package hivetest

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// Env names the environment variables the package reads.
const (
	EnvAddr    = "KORD_HIVE_METASTORE" // host:port
	EnvDir     = "KORD_HIVE_DIR"       // the script's run directory
	EnvRequire = "KORD_REQUIRE_HIVE"
)

// Addr is the Metastore's address. Without one, the test is skipped, or
// fails when KORD_REQUIRE_HIVE=1.
func Addr(t testing.TB) string {
	t.Helper()
	a := os.Getenv(EnvAddr)
	if a == "" {
		if os.Getenv(EnvRequire) == "1" {
			t.Fatalf("%s is not set and %s=1: run scripts/hive-metastore.sh start and set %s to the address it prints", EnvAddr, EnvRequire, EnvAddr)
		}
		t.Skipf("%s is not set (scripts/hive-metastore.sh start prints one)", EnvAddr)
	}
	return a
}

// Script runs scripts/hive-metastore.sh with command (stop, resume,
// freeze, thaw) on the Metastore of KORD_HIVE_DIR, and returns what it
// printed on stdout.
func Script(t testing.TB, command string) string {
	t.Helper()
	if os.Getenv(EnvDir) == "" {
		t.Fatalf("%s is not set: the test cannot stop and resume the Metastore", EnvDir)
	}
	_, here, _, _ := runtime.Caller(0)
	script := filepath.Join(filepath.Dir(here), "..", "..", "..", "scripts", "hive-metastore.sh")
	cmd := exec.Command("bash", script, command)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("scripts/hive-metastore.sh %s: %v", command, err)
	}
	return strings.TrimSpace(string(out))
}
