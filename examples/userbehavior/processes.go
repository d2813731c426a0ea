package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// processes runs the process phase as o.processes child processes of this
// binary, instances p0, p1, ... of one job: Kafka's consumer group shares
// the input partitions between them, and they share one checkpoint
// directory. When every event's result is committed, the parent stops them
// (SIGTERM: each commits a final checkpoint). With
// o.crash, p1 (p0 if alone) is SIGKILLed once a third of the results are
// committed, and started again: as a static member it gets its partitions
// back, restored from its checkpoints.
func processes(ctx context.Context, o options, sum *summary) error {
	dir := o.dir
	if dir == "" {
		d, err := os.MkdirTemp("", "kord-userbehavior-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	args := []string{"-brokers", o.brokers, "-input", o.topic, "-output", o.output, "-phase", "process", "-checkpoints", dir,
		"-crash=false", "-quiet", "-interval", o.interval.String(), "-events", strconv.Itoa(o.events), "-session", o.session.String()}
	if o.properties != "" {
		args = append(args, "-properties", o.properties)
	}
	if o.keyBy {
		args = append(args, "-keyby")
	}
	if o.pages {
		args = append(args, "-pages")
	}
	if o.lake != "" {
		args = append(args, "-lake", o.lake)
	}
	for _, x := range o.set {
		args = append(args, "-X", x)
	}
	var mu sync.Mutex
	children := map[string]*exec.Cmd{}
	done := make(chan error, o.processes+1)
	start := func(id string) error {
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), childArgsEnv+"="+strings.Join(append(args, "-instance", id), "\x1f"))
		stderr, err := cmd.StderrPipe()
		if err != nil {
			return err
		}
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("starting process %s: %w", id, err)
		}
		mu.Lock()
		children[id] = cmd
		mu.Unlock()
		go prefixLines(os.Stderr, stderr, "["+id+"] ")
		go func() {
			err := cmd.Wait()
			if err != nil {
				err = fmt.Errorf("process %s: %w", id, err)
			}
			done <- err
		}()
		return nil
	}
	began := time.Now()
	for i := 0; i < o.processes; i++ {
		if err := start(fmt.Sprintf("p%d", i)); err != nil {
			return err
		}
		o.say("started process p%d\n", i)
	}
	// The parent watches the committed output (the progress bar) and, with
	// o.crash, has p1 killed once a third of the results are committed.
	allDone := make(chan struct{}) // every result is committed: stop the processes
	var killAt <-chan struct{}
	kill := make(chan struct{})
	killAt = kill
	var once sync.Once
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	watchErr := make(chan error, 1)
	go func() {
		watchErr <- watch(wctx, o, func() { close(allDone) }, func(n int) {
			if o.crash && n >= o.events/3 {
				once.Do(func() { close(kill) })
			}
		})
	}()
	running := o.processes
	killed := false
	victimID := "p1"
	if o.processes == 1 {
		victimID = "p0"
	}
	var errs []error
	for running > 0 {
		select {
		case <-killAt:
			killAt = nil
			mu.Lock()
			victim := children[victimID]
			mu.Unlock()
			o.say("\nSIGKILL process %s, then start it again\n", victimID)
			if err := victim.Process.Signal(syscall.SIGKILL); err == nil {
				killed = true
				sum.killed++
			}
		case err := <-done:
			var ee *exec.ExitError
			if killed && errors.As(err, &ee) && ee.Sys().(syscall.WaitStatus).Signaled() && allDone != nil {
				killed = false
				if err := start(victimID); err != nil {
					return err
				}
				continue
			}
			running--
			if err != nil {
				// A process failed: stop the others, or the output would
				// never be complete.
				errs = append(errs, err)
				mu.Lock()
				for _, c := range children {
					_ = c.Process.Signal(syscall.SIGTERM)
				}
				mu.Unlock()
			}
		case <-allDone:
			allDone = nil
			mu.Lock()
			for _, c := range children {
				_ = c.Process.Signal(syscall.SIGTERM)
			}
			mu.Unlock()
		case <-ctx.Done():
			mu.Lock()
			for _, c := range children {
				_ = c.Process.Signal(syscall.SIGTERM)
			}
			mu.Unlock()
			ctx = context.Background() // wait for their final checkpoints
		}
	}
	stopWatch()
	if err := <-watchErr; err != nil && !errors.Is(err, context.Canceled) {
		errs = append(errs, err)
	}
	o.say("\n%d processes done in %v\n", o.processes, time.Since(began).Round(time.Millisecond))
	sum.processes = o.processes
	sum.processing = time.Since(began)
	return errors.Join(errs...)
}

// prefixLines copies r to w line by line, each line prefixed.
func prefixLines(w io.Writer, r io.Reader, prefix string) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		fmt.Fprintf(w, "%s%s\n", prefix, sc.Text())
	}
}
