// Package crashtest runs a job as a child process of the test binary, to
// be SIGKILLed at failpoints or at random times (the crash tests of
// checkpoint and examples/userbehavior). The test binary's TestMain runs
// the job instead of the tests when it finds the environment the test
// gives the child.
package crashtest

import (
	"errors"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/kordproject/kord/internal/syncbuf"
)

// Child is the test binary re-run as a job, its output captured.
type Child struct {
	Cmd            *exec.Cmd
	Stdout, Stderr *syncbuf.Buffer
	// Done receives the child's exit (cmd.Wait's error) once.
	Done chan error
}

// Start re-runs the test binary with no test selected and the current
// environment plus env ("KEY=value").
func Start(t testing.TB, env ...string) *Child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env...)
	c := &Child{Cmd: cmd, Stdout: &syncbuf.Buffer{}, Stderr: &syncbuf.Buffer{}, Done: make(chan error, 1)}
	cmd.Stdout, cmd.Stderr = c.Stdout, c.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("crashtest: start the child: %v", err)
	}
	go func() { c.Done <- cmd.Wait() }()
	return c
}

// Wait waits up to d for the child to end by itself; then, if kill, it
// SIGKILLs it, else it waits on. It reports whether the child died by a
// signal (a failpoint's SIGKILL or ours), and otherwise its exit error
// (nil for a clean exit).
func (c *Child) Wait(d time.Duration, kill bool) (signaled bool, err error) {
	select {
	case err = <-c.Done:
	case <-time.After(d):
		if kill {
			_ = c.Cmd.Process.Signal(syscall.SIGKILL)
		}
		err = <-c.Done
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.Sys().(syscall.WaitStatus).Signaled() {
		return true, nil
	}
	return false, err
}
