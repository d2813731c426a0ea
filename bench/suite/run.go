package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"syscall"
	"time"
)

type runSpec struct {
	brokers, kafkaDir  string
	input              string // the throughput runs' input topic, produced once
	events, users, par int
	round              int
	stamp              int64
	timeout            time.Duration
}

const partitions = 12

// stopPeer stops a peer with SIGTERM (a graceful stop), and with SIGKILL
// if it has not exited 30 s later; exited is its Wait's result.
func stopPeer(cmd *exec.Cmd, exited <-chan error) {
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
	}
}

// dropRun deletes the topics of the run named id once it is over (see
// dropTopics). A topic that could not be deleted is reported, and the
// suite goes on: the figures already taken stand.
func dropRun(brokers, id string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := dropTopics(ctx, brokers, id); err != nil {
		fmt.Fprintf(os.Stderr, "suite: after run %s: %v\n", id, err)
	}
}

// runOne runs system s once over the input topic, which holds every event
// already (a backlog), writing a fresh output topic: the system is started
// and watched until every result is visible to the read_committed reader,
// then stopped with SIGTERM.
func runOne(ctx context.Context, s system, argv []string, spec runSpec) (f figures) {
	f = figures{System: s.name, Round: fmt.Sprint(spec.round), Events: spec.events, BrokerCPUSec: -1}
	fail := func(err error) figures {
		f.Err = err.Error()
		return f
	}
	ctx, cancel := context.WithTimeout(ctx, spec.timeout)
	defer cancel()
	id := fmt.Sprintf("suite-%d-%s-r%d", spec.stamp, s.name, spec.round)
	in, out := spec.input, id+".out"
	defer dropRun(spec.brokers, id)
	if err := createTopics(ctx, spec.brokers, partitions, out); err != nil {
		return fail(err)
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
		stopPeer(cmd, exited)
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
		const step = 250 * time.Millisecond
		f.SeriesStepSec = step.Seconds()
		f.Series = make([]float64, int(sn.at[n-1].Sub(start)/step)+1)
		for _, at := range sn.at {
			f.Series[int(at.Sub(start)/step)] += 1 / step.Seconds()
		}
		lat := slices.Clone(sn.latency)
		slices.Sort(lat)
		f.LatencyP50Ms = float64(lat[len(lat)/2].Microseconds()) / 1000
	}
	switch {
	case runErr != nil:
		f.Err = runErr.Error()
	case f.Missing > 0 || (s.eos && (f.Duplicates > 0 || f.Disorder > 0 || f.WrongCounts > 0)):
		// An at-least-once system (goka) may repeat results after a
		// crash, and count the repeated events again: reported, not
		// failed. Nothing may be missing.
		f.Err = fmt.Sprintf("output checks failed (log %s)", logf.Name())
	}
	return f
}

// pacedFigures is one paced run of one system: end-to-end latency at a
// fixed input rate, or, with a SIGKILL half-way, the recovery.
type pacedFigures struct {
	System, Round string
	Rate          int     // events/s produced
	Events        int     // events produced
	LatencyP50Ms  float64 // result visible minus the event's production time, after the warm-up
	LatencyP99Ms  float64
	RecoverySec   float64 // SIGKILL to the first result committed by the restarted process; -1 when not killed
	Duplicates    int
	Missing       int
	Err           string `json:",omitempty"`
}

// runPaced runs system s on fresh topics while the input is produced at
// rate for dur (its events stamped as they are produced), once the system
// says it is ready. With kill, the system is SIGKILLed half-way and
// started again at once with the same id. Latency is measured on events
// produced after the first fifth of dur (the warm-up).
func runPaced(ctx context.Context, s system, argv []string, spec runSpec, rate int, dur time.Duration, kill bool) (f pacedFigures) {
	n := int(float64(rate) * dur.Seconds())
	f = pacedFigures{System: s.name, Round: fmt.Sprint(spec.round), Rate: rate, Events: n, RecoverySec: -1}
	fail := func(err error) pacedFigures {
		f.Err = err.Error()
		return f
	}
	ctx, cancel := context.WithTimeout(ctx, spec.timeout)
	defer cancel()
	mode := "latency"
	if kill {
		mode = "recovery"
	}
	id := fmt.Sprintf("suite-%d-%s-%s-r%d", spec.stamp, s.name, mode, spec.round)
	in, out := id+".in", id+".out"
	defer dropRun(spec.brokers, id)
	if err := createTopics(ctx, spec.brokers, partitions, in, out); err != nil {
		return fail(err)
	}
	logf, err := os.CreateTemp("", "suite-"+s.name+"-"+mode+"-*.log")
	if err != nil {
		return fail(err)
	}
	defer logf.Close()
	full := append(slices.Clone(argv), "--brokers", spec.brokers, "--input", in, "--output", out, "--id", id,
		"--parallelism", fmt.Sprint(spec.par), "--commit-ms", "1000")
	start := func() (*exec.Cmd, chan error, error) {
		cmd, ready, err := peerCmd(full, logf)
		if err != nil {
			return nil, nil, err
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		select {
		case <-ready:
			return cmd, exited, nil
		case err := <-exited:
			return nil, nil, fmt.Errorf("%s exited before it was ready: %v (log %s)", s.name, err, logf.Name())
		case <-time.After(3 * time.Minute):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
			return nil, nil, fmt.Errorf("%s not ready after 3 minutes (log %s)", s.name, logf.Name())
		}
	}
	cmd, exited, err := start()
	if err != nil {
		return fail(err)
	}
	defer func() {
		if cmd != nil {
			stopPeer(cmd, exited)
		}
	}()
	var sn seen
	stopVerify := make(chan struct{})
	verified := make(chan error, 1)
	go func() { verified <- verify(ctx, spec.brokers, out, partitions, n, stopVerify, &sn) }()
	produced := make(chan error, 1)
	began := time.Now()
	go func() { produced <- produceInput(ctx, spec.brokers, in, n, spec.users, 2, rate) }()
	var killedAt time.Time
	var ends []int64
	if kill {
		select {
		case <-time.After(dur / 2):
		case <-ctx.Done():
		}
		killedAt = time.Now()
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
		// What the killed process committed ends at the output's last
		// stable offsets now: a result past them is the new process's.
		if ends, err = stableEnds(ctx, spec.brokers, out, partitions); err != nil {
			close(stopVerify)
			<-verified
			return fail(fmt.Errorf("output ends after the kill: %w", err))
		}
		if cmd, exited, err = start(); err != nil {
			close(stopVerify)
			<-verified
			return fail(fmt.Errorf("restart after SIGKILL: %w", err))
		}
	}
	if err := <-produced; err != nil {
		close(stopVerify)
		<-verified
		return fail(fmt.Errorf("producing the input: %w", err))
	}
	if err := <-verified; err != nil {
		f.Err = err.Error()
	}
	sn.mu.Lock()
	defer sn.mu.Unlock()
	f.Duplicates, f.Missing = sn.dups, n-sn.distinct
	warm := began.Add(dur / 5)
	var lat []time.Duration
	for i, at := range sn.at {
		if produced := at.Add(-sn.latency[i]); produced.After(warm) {
			lat = append(lat, sn.latency[i])
		}
	}
	if kill {
		for _, r := range sn.reads {
			if r.offset >= ends[r.partition] {
				if d := r.at.Sub(killedAt).Seconds(); f.RecoverySec < 0 || d < f.RecoverySec {
					f.RecoverySec = d
				}
			}
		}
	}
	if len(lat) > 0 {
		slices.Sort(lat)
		f.LatencyP50Ms = float64(lat[len(lat)/2].Microseconds()) / 1000
		f.LatencyP99Ms = float64(lat[len(lat)*99/100].Microseconds()) / 1000
	}
	if f.Err == "" && (f.Missing > 0 || (s.eos && (f.Duplicates > 0 || sn.disorder > 0 || sn.wrong > 0))) {
		f.Err = fmt.Sprintf("output checks failed: %d missing, %d duplicates, %d out of order, %d wrong counts (log %s)", f.Missing, f.Duplicates, sn.disorder, sn.wrong, logf.Name())
	}
	return f
}
