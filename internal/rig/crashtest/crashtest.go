// Package crashtest runs a job as a child process of the test binary, to
// be SIGKILLed at failpoints or at random times (the crash tests of
// checkpoint and examples/userbehavior). The test binary's TestMain runs
// the job instead of the tests when it finds the environment the test
// gives the child.
package crashtest

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/kordproject/kord/internal/rig/syncbuf"
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
	// A test that fails while the child is paused (SIGSTOP) or running
	// must not leave it behind.
	t.Cleanup(func() { _ = cmd.Process.Kill() })
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

// Stop pauses the child with SIGSTOP and returns once the kernel reports
// it stopped (state T in /proc/<pid>/stat): the signal is asynchronous,
// and a thread in the middle of a system call (a retention unlink, say)
// finishes it first. Copying the child's files before then races with it.
func (c *Child) Stop(t testing.TB) {
	t.Helper()
	if err := c.Cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatalf("crashtest: SIGSTOP: %v", err)
	}
	stat := fmt.Sprintf("/proc/%d/stat", c.Cmd.Process.Pid)
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, err := os.ReadFile(stat)
		if err != nil {
			t.Fatalf("crashtest: %v", err)
		}
		// pid (comm) state ...: the comm may hold spaces and parentheses.
		if i := bytes.LastIndexByte(b, ')'); i >= 0 && i+2 < len(b) && (b[i+2] == 'T' || b[i+2] == 't') {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("crashtest: the child is not stopped 10 s after SIGSTOP: %s", b)
		}
		time.Sleep(time.Millisecond)
	}
}
