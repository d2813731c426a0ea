package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"syscall"
	"time"
)

type runSpec struct {
	brokers, kafkaDir  string
	events, users, par int
	round              int
	stamp              int64
	timeout            time.Duration
}

const partitions = 12

// runOne runs system s once on fresh topics: the input produced first (a
// backlog), then the system started and watched until every result is
// visible to the read_committed reader, then stopped with SIGTERM.
func runOne(ctx context.Context, s system, argv []string, spec runSpec) (f figures) {
	f = figures{System: s.name, Round: fmt.Sprint(spec.round), Events: spec.events, BrokerCPUSec: -1}
	fail := func(err error) figures {
		f.Err = err.Error()
		return f
	}
	ctx, cancel := context.WithTimeout(ctx, spec.timeout)
	defer cancel()
	id := fmt.Sprintf("suite-%d-%s-r%d", spec.stamp, s.name, spec.round)
	in, out := id+".in", id+".out"
	if err := createTopics(ctx, spec.brokers, partitions, in, out); err != nil {
		return fail(err)
	}
	if err := produceInput(ctx, spec.brokers, in, spec.events, spec.users, 1, 0); err != nil {
		return fail(fmt.Errorf("producing the input: %w", err))
	}
	logf, err := os.CreateTemp("", "suite-"+s.name+"-*.log")
	if err != nil {
		return fail(err)
	}
	defer logf.Close()
	broker := &proc{pid: brokerPid(spec.kafkaDir)}
	if broker.pid > 0 {
		broker.sample()
	}
	brokerCPU0 := broker.cpu
	var sn seen
	stopVerify := make(chan struct{})
	verified := make(chan error, 1)
	go func() { verified <- verify(ctx, spec.brokers, out, partitions, spec.events, stopVerify, &sn) }()
	full := append(slices.Clone(argv), "--brokers", spec.brokers, "--input", in, "--output", out, "--id", id,
		"--parallelism", fmt.Sprint(spec.par), "--commit-ms", "1000")
	start := time.Now()
	cmd, _, err := peerCmd(full, logf)
	if err != nil {
		close(stopVerify)
		return fail(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	p := &proc{pid: cmd.Process.Pid}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var runErr error
wait:
	for {
		select {
		case err := <-verified:
			runErr = err
			verified = nil
			break wait
		case err := <-exited:
			runErr = fmt.Errorf("%s exited before its output was complete: %v (log %s)", s.name, err, logf.Name())
			exited = nil
			break wait
		case <-tick.C:
			p.sample()
		}
	}
	p.sample()
	if broker.pid > 0 {
		broker.sample()
		f.BrokerCPUSec = (broker.cpu - brokerCPU0).Seconds()
	}
	if exited != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
		}
	}
	if verified != nil {
		close(stopVerify)
		<-verified
	}
	sn.mu.Lock()
	defer sn.mu.Unlock()
	f.CPUSec, f.PeakRSSMiB = p.cpu.Seconds(), float64(p.peakRSS)/(1<<20)
	f.Duplicates, f.Disorder, f.WrongCounts, f.Missing = sn.dups, sn.disorder, sn.wrong, spec.events-sn.distinct
	if !sn.first.IsZero() {
		f.FirstOutputSec = sn.first.Sub(start).Seconds()
	}
	if n := len(sn.at); n > 0 {
		f.EventsPerSec = float64(n) / sn.at[n-1].Sub(start).Seconds()
		lo, hi := n/10, n*9/10
		if hi > lo && hi < n {
			f.SteadyEventsPerSec = float64(hi-lo) / sn.at[hi].Sub(sn.at[lo]).Seconds()
		}
		lat := slices.Clone(sn.latency)
		slices.Sort(lat)
		f.LatencyP50Ms = float64(lat[len(lat)/2].Microseconds()) / 1000
	}
	switch {
	case runErr != nil:
		f.Err = runErr.Error()
	case f.Missing > 0 || f.Disorder > 0 || f.WrongCounts > 0 || (s.eos && f.Duplicates > 0):
		f.Err = fmt.Sprintf("output checks failed (log %s)", logf.Name())
	}
	return f
}
