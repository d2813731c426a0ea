package failpoint

import (
	"os"
	"os/exec"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestNthHitFires(t *testing.T) {
	fired := 0
	kill = func() { fired++ }
	t.Cleanup(func() { _ = Set("") })
	require.NoError(t, Set("a@3, b"))
	Hit("a")
	Hit("a")
	Hit("c")
	require.Zero(t, fired)
	Hit("a")
	require.Equal(t, 1, fired)
	Hit("a") // fires once only
	require.Equal(t, 1, fired)
	Hit("b")
	require.Equal(t, 2, fired)
	require.Error(t, Set("x@0"))
	require.Error(t, Set("x@y"))
}

// The real thing: a child process armed through the environment dies by
// SIGKILL at the failpoint.
func TestChildIsKilled(t *testing.T) {
	if os.Getenv("FAILPOINT_CHILD") == "1" {
		Hit("boom")
		os.Exit(0)
	}
	cmd := exec.Command(os.Args[0], "-test.run=TestChildIsKilled$")
	cmd.Env = append(os.Environ(), "FAILPOINT_CHILD=1", Env+"=boom")
	err := cmd.Run()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	ws := ee.Sys().(syscall.WaitStatus)
	require.True(t, ws.Signaled())
	require.Equal(t, syscall.SIGKILL, ws.Signal())
}
