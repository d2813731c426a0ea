package main

import (
	"context"
	"errors"
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
	watch, err := newStableWatch(spec.brokers, out, partitions)
	if err != nil {
		return fail(err)
	}
	defer watch.close()
	stopVerify, verified, err := verifyChild(ctx, spec.brokers, out, partitions, spec.events, logf)
	if err != nil {
		return fail(err)
	}
	full := append(slices.Clone(argv), "--brokers", spec.brokers, "--input", in, "--output", out, "--id", id,
		"--parallelism", fmt.Sprint(spec.par), "--commit-ms", "1000")
	start := time.Now()
	cmd, _, err := peerCmd(full, logf)
	if err != nil {
		stopVerify()
		<-verified
		return fail(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	p := &proc{pid: cmd.Process.Pid}
	var samples []sample
	take := func() {
		p.sample()
		if broker.pid > 0 {
			broker.sample()
		}
		n, err := watch.sum(ctx)
		if err != nil {
			fmt.Fprintf(logf, "suite: %v\n", err)
			return
		}
		samples = append(samples, sample{at: time.Now(), offsets: n, cpu: p.cpu, brokerCPU: broker.cpu})
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var runErr error
	var v verdict
wait:
	for {
		select {
		case v = <-verified:
			verified = nil
			if v.Err != "" {
				runErr = errors.New(v.Err)
			}
			break wait
		case err := <-exited:
			runErr = fmt.Errorf("%s exited before its output was complete: %v (log %s)", s.name, err, logf.Name())
			exited = nil
			break wait
		case <-tick.C:
			take()
		}
	}
	take()
	if exited != nil {
		stopPeer(cmd, exited)
	}
	if verified != nil {
		stopVerify()
		v = <-verified
	}
	f.Duplicates, f.Disorder, f.WrongCounts, f.Missing = v.Duplicates, v.Disorder, v.WrongCounts, spec.events-v.Distinct
	f.PeakRSSMiB = float64(p.peakRSS) / (1 << 20)
	timeOutput(&f, samples, start, spec.events, broker.pid > 0, brokerCPU0)
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

// sample is one look at a throughput run: the output's offsets readable
// by read_committed readers (stableWatch.sum), and the CPU time the system
// and the broker had used, at that moment.
type sample struct {
	at             time.Time
	offsets        int64
	cpu, brokerCPU time.Duration
}

// timeOutput fills f's timings from a run's samples, taken every 100 ms
// from the system's start until its results were all verified. The end of
// the output is the first sample at the final sum of last stable offsets;
// the whole-run rate, the CPU times and the series are measured up to it.
// The steady rate is between the first samples at or past 10 % and 90 %
// of the final sum: what became visible between them over the time
// between them. An exactly-once system's output becomes visible a commit
// at a time, so both ends fall just after a commit (at most 100 ms after
// it): the rate is commits' worth of output over the time between
// commits, not a line drawn through the steps. The sum counts a
// transaction marker per partition per transaction (12 a second for a
// system committing every second, against 10^5 results); rates count
// events: offsets x events / the final sum.
func timeOutput(f *figures, samples []sample, start time.Time, events int, broker bool, brokerCPU0 time.Duration) {
	if len(samples) == 0 {
		return
	}
	final := samples[len(samples)-1].offsets
	if final <= 0 {
		return
	}
	perOffset := float64(events) / float64(final)
	end := slices.IndexFunc(samples, func(s sample) bool { return s.offsets >= final })
	last := samples[end]
	f.CPUSec = last.cpu.Seconds()
	if broker {
		f.BrokerCPUSec = (last.brokerCPU - brokerCPU0).Seconds()
	}
	f.EventsPerSec = float64(events) / last.at.Sub(start).Seconds()
	if i := slices.IndexFunc(samples, func(s sample) bool { return s.offsets > 0 }); i >= 0 {
		f.FirstOutputSec = samples[i].at.Sub(start).Seconds()
	}
	past := func(share float64) sample {
		return samples[slices.IndexFunc(samples, func(s sample) bool { return float64(s.offsets) >= share*float64(final) })]
	}
	if lo, hi := past(0.1), past(0.9); hi.at.After(lo.at) {
		f.SteadyEventsPerSec = float64(hi.offsets-lo.offsets) * perOffset / hi.at.Sub(lo.at).Seconds()
	} else {
		f.SteadyEventsPerSec = f.EventsPerSec // 10 % to 90 % in one commit: no steady state to see
	}
	// The series: the output visible at each step's end (the last sample
	// at or before it), as a rate over the step.
	const step = 250 * time.Millisecond
	f.SeriesStepSec = step.Seconds()
	var prev int64
	i := 0
	for t := start.Add(step); prev < final; t = t.Add(step) {
		for i < len(samples) && !samples[i].at.After(t) {
			i++
		}
		var now int64
		if i > 0 {
			now = samples[i-1].offsets
		}
		f.Series = append(f.Series, float64(now-prev)*perOffset/step.Seconds())
		prev = now
	}
}
