//go:build kordfailpoints

package kafkaio_test

// The crash tests' helpers: a job in a child process (this test binary,
// re-executed), killed by failpoints; built only with the kordfailpoints
// tag, like the engine's failure points.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kordproject/kord/internal/failpoint"
	"github.com/kordproject/kord/internal/rig/crashtest"
	"github.com/kordproject/kord/kafkaio"
	"github.com/kordproject/kord/keyed"
)

// crashAt returns a hook (failpoint.WithHook) that crashes the job at the
// nth hit of point.
func crashAt(point string, nth int) failpoint.Hook {
	var mu sync.Mutex
	hits := 0
	return func(p string) error {
		mu.Lock()
		defer mu.Unlock()
		if p == point {
			hits++
			if hits == nth {
				return fmt.Errorf("injected crash at %s #%d", point, nth)
			}
		}
		return nil
	}
}

// The crash tests run the job in a child process: this test binary,
// re-executed with KORD_TEST_CHILD=job and the job's settings in the
// environment (see fixture.start).
func TestMain(m *testing.M) {
	if os.Getenv("KORD_TEST_CHILD") == "job" {
		os.Exit(childMain())
	}
	os.Exit(m.Run())
}

// childMain runs the job until SIGTERM (a graceful stop, then "stopped" on
// stdout and exit 0) or a failure (exit 3). It prints "committed" on
// stdout after each commit.
func childMain() int {
	interval, _ := time.ParseDuration(os.Getenv("KORD_JOB_INTERVAL"))
	par, _ := strconv.Atoi(os.Getenv("KORD_JOB_PARALLELISM"))
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	spec := jobSpec{brokers: os.Getenv("KORD_JOB_BROKERS"), in: os.Getenv("KORD_JOB_INPUT"), out: os.Getenv("KORD_JOB_OUTPUT"),
		name: os.Getenv("KORD_JOB_NAME"), dir: os.Getenv("KORD_JOB_DIR"), interval: interval, byPartition: true, parallelism: par, logger: log}
	if id := os.Getenv("KORD_JOB_INSTANCE"); id != "" {
		// One of several processes of the job (TestScaledKill).
		spec.logger = log.With("instance", id)
		session, _ := strconv.Atoi(os.Getenv("KORD_JOB_SESSION_MS"))
		spec.sinkOpts = append(spec.sinkOpts, kafkaio.SessionTimeout(time.Duration(session)*time.Millisecond))
		spec.opts = append(spec.opts, keyed.Instance(id))
		// A checkpoint timeout of 5 s makes the transaction timeout 15 s:
		// how long a dead process's open transaction holds readers back
		// when no survivor fences it. KORD_JOB_CHECKPOINT_TIMEOUT sets
		// another.
		timeout := 5 * time.Second
		if d, err := time.ParseDuration(os.Getenv("KORD_JOB_CHECKPOINT_TIMEOUT")); err == nil {
			timeout = d
		}
		spec.opts = append(spec.opts, keyed.CheckpointTimeout(timeout))
		// KORD_JOB_RESTARTS=n restarts the job up to n times in a row, a
		// second apart, as a deployment on brokers that fail would
		// (TestClusterScaledFaults); by default a failure ends the process.
		if n, err := strconv.Atoi(os.Getenv("KORD_JOB_RESTARTS")); err == nil {
			spec.opts = append(spec.opts, keyed.RestartStrategy(keyed.FixedDelay(n, time.Second)))
		}
	}
	var j *keyed.Job
	var sink interface{ Close() error }
	if rules := os.Getenv("KORD_JOB_RULES"); rules != "" {
		// TestScaledPipeline's job.
		j, sink = pipelineJob(spec, rules)
	} else {
		j, _, sink = newJob(spec)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	fmt.Fprintln(os.Stdout, "ready") // SIGTERM is a graceful stop from here on (terminate)
	// An instance whose hold file exists stops before it sends a commit's
	// offsets, its transaction open with the checkpoint's output in it,
	// says "holding", and goes on when the file is removed ("released"): for a SIGKILL
	// that must find a transaction open (killInTransaction).
	hold := ""
	if id := os.Getenv("KORD_JOB_INSTANCE"); id != "" {
		hold = filepath.Join(spec.dir, "hold-"+id)
	}
	ctx = failpoint.WithHook(ctx, func(p string) error {
		if p == failpoint.AfterCommit {
			fmt.Fprintln(os.Stdout, "committed")
			spec.logger.Info("test: committed")
		}
		if p == failpoint.BeforeSendOffsets && hold != "" {
			if _, err := os.Stat(hold); err == nil {
				fmt.Fprintln(os.Stdout, "holding")
				for ctx.Err() == nil {
					if _, err := os.Stat(hold); err != nil {
						break
					}
					time.Sleep(10 * time.Millisecond)
				}
				fmt.Fprintln(os.Stdout, "released")
			}
		}
		return nil
	})
	err := j.Run(ctx)
	if cerr := sink.Close(); cerr != nil && err == nil {
		err = cerr
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "job error:", err)
		return 3
	}
	fmt.Fprintln(os.Stdout, "stopped")
	return 0
}

// terminate sends child SIGTERM, a graceful stop, once childMain said it
// is "ready" for one: before its handler is installed, SIGTERM kills the
// child (which a fast reader of the output, finding every result there
// already, once met). An error if it never said so within a minute, or
// has ended.
func terminate(c *crashtest.Child) error {
	for deadline := time.Now().Add(time.Minute); !strings.Contains(c.Stdout.String(), "ready\n"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			return errors.New("the child did not say it was ready for SIGTERM within a minute")
		}
	}
	return c.Cmd.Process.Signal(syscall.SIGTERM)
}

// start starts the job in a child process on dir, with failpoints armed
// (KORD_FAILPOINTS syntax) and parallelism par.
func (f *fixture) start(failpoints, dir string, par int) *crashtest.Child {
	return crashtest.Start(f.t,
		"KORD_TEST_CHILD=job",
		"KORD_JOB_NAME="+f.name, "KORD_JOB_BROKERS="+f.c.Brokers,
		"KORD_JOB_INPUT="+f.in, "KORD_JOB_OUTPUT="+f.out,
		"KORD_JOB_DIR="+dir, "KORD_JOB_INTERVAL="+f.interval.String(),
		"KORD_JOB_PARALLELISM="+strconv.Itoa(par),
		failpoint.Env+"="+failpoints)
}

// waitKilled waits for the child to die by SIGKILL (from a failpoint or
// from us after killAfter).
func (f *fixture) waitKilled(c *crashtest.Child, what string, killAfter time.Duration) {
	f.t.Helper()
	if signaled, err := c.Wait(killAfter, true); !signaled {
		f.t.Fatalf("%s: child exited without being killed (%v)\nstdout:\n%s\nstderr:\n%s", what, err, c.Stdout, c.Stderr)
	}
}

// waitFired waits for the child to be SIGKILLed by failpoint fp, and fails
// the test if it was not: a failpoint that never fires (renamed, moved off
// the path, hit fewer times than armed) would otherwise pass as the kill we
// send after killAfter.
func (f *fixture) waitFired(c *crashtest.Child, fp string, killAfter time.Duration) {
	f.t.Helper()
	f.waitKilled(c, fp, killAfter)
	if want := "kord: failpoint " + fp + ": SIGKILL"; !strings.Contains(c.Stderr.String(), want) {
		f.t.Fatalf("failpoint %s did not fire within %v (the test killed the child)\nstdout:\n%s\nstderr:\n%s", fp, killAfter, c.Stdout, c.Stderr)
	}
}

// finish runs the job in a child until every result is visible, stops it
// with SIGTERM (a graceful stop) and verifies the output.
func (f *fixture) finish(dir string) {
	t := f.t
	c := f.start("", dir, 2)
	recs := f.c.ReadAll(t, f.out, f.expected(), true, 2*time.Minute)
	require.Equal(t, f.expected(), len(recs), "stderr:\n%s", c.Stderr)
	require.NoError(t, terminate(c))
	select {
	case err := <-c.Done:
		require.NoError(t, err, "graceful stop\nstderr:\n%s", c.Stderr)
	case <-time.After(45 * time.Second):
		_ = c.Cmd.Process.Kill()
		t.Fatalf("graceful stop took over 45s\nstderr:\n%s", c.Stderr)
	}
	require.Contains(t, c.Stdout.String(), "stopped")
	f.verify()
}
