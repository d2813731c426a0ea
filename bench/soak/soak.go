package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// config is one soak.
type config struct {
	brokers    string
	job        string        // the userbehavior binary
	duration   time.Duration // how long input arrives
	rate       int           // events per second
	users      int
	partitions int
	interval   time.Duration // the job's checkpoint interval
	killMin    time.Duration // a SIGKILL comes a uniform random time in [killMin, killMax] into each life
	killMax    time.Duration
	every      time.Duration // sampling period
	warmup     time.Duration // per life: samples this soon after a start are not fitted
	seed       uint64
	dir        string    // working directory: checkpoints, stats, logs
	csv        io.Writer // if not nil, each sample and kill as a CSV line as it comes
	limits     limits
	log        io.Writer
}

// limits are the slopes above which a series is not flat, per hour.
type limits struct {
	rss, goroutines, fds, handles, disk float64
}

// series names what is fitted, with its unit.
var series = []struct {
	name, unit string
	y          func(sample) float64
	limit      func(limits) float64
	reported   bool // from the job's -stats lines
	whole      bool // fitted over the whole run, not per life: it outlives the process
}{
	{"rss", "MiB", func(s sample) float64 { return s.rss }, func(l limits) float64 { return l.rss }, false, false},
	// The Go heap, within RSS, has RSS's limit: it tells a leak of Go
	// values from librdkafka's memory (RSS less the heap).
	{"go_heap", "MiB", func(s sample) float64 { return s.heap }, func(l limits) float64 { return l.rss }, true, false},
	{"goroutines", "", func(s sample) float64 { return s.goroutines }, func(l limits) float64 { return l.goroutines }, true, false},
	{"fds", "", func(s sample) float64 { return s.fds }, func(l limits) float64 { return l.fds }, false, false},
	{"handles", "", func(s sample) float64 { return s.handles }, func(l limits) float64 { return l.handles }, true, false},
	{"checkpoint_dir", "MiB", func(s sample) float64 { return s.disk }, func(l limits) float64 { return l.disk }, false, true},
}

// result is what a soak found.
type result struct {
	samples  []sample
	kills    []float64 // seconds since the start, one per SIGKILL
	events   int
	slopes   map[string]float64 // per hour
	fitted   map[string]bool
	peakHWM  float64
	maxDisk  float64
	lastDisk float64
	verify   string // -phase verify's summary line
	wall     time.Duration
	failures []string // slopes over their limits, a failed verify
}

// run is one soak: input produced at cfg.rate for cfg.duration while the
// job processes it, SIGKILLed at random and started again, sampled all
// along; then the independent check and the slopes.
func run(ctx context.Context, cfg config) (*result, error) {
	began := time.Now()
	rng := rand.New(rand.NewPCG(cfg.seed, cfg.seed^0x5eed))
	topic := fmt.Sprintf("soak.%d", time.Now().UnixNano())
	events := cfg.rate * int(cfg.duration/time.Second)
	ckpt := filepath.Join(cfg.dir, "checkpoints")
	common := []string{"-brokers", cfg.brokers, "-input", topic, "-events", strconv.Itoa(events),
		"-users", strconv.Itoa(cfg.users), "-partitions", strconv.Itoa(cfg.partitions), "-quiet", "-seed", strconv.FormatUint(cfg.seed, 10)}
	logf := func(format string, args ...any) {
		fmt.Fprintf(cfg.log, "soak %6.0fs: "+format+"\n", append([]any{time.Since(began).Seconds()}, args...)...)
	}
	start := func(name string, args ...string) (*exec.Cmd, error) {
		f, err := os.Create(filepath.Join(cfg.dir, name+".log"))
		if err != nil {
			return nil, err
		}
		defer f.Close()
		cmd := exec.Command(cfg.job, append(args, common...)...)
		cmd.Stdout, cmd.Stderr = f, f
		return cmd, cmd.Start()
	}

	// The producer makes the topics, then paces its events; the job
	// starts once they exist.
	prod, err := start("produce", "-phase", "produce", "-rate", strconv.Itoa(cfg.rate))
	if err != nil {
		return nil, err
	}
	prodDone := make(chan error, 1)
	go func() { prodDone <- prod.Wait() }()
	defer func() {
		if prod.ProcessState == nil {
			prod.Process.Kill()
		}
	}()
	select {
	case <-time.After(5 * time.Second):
	case err := <-prodDone:
		prodDone <- err
	}
	logf("producing %d events at %d/s to %s", events, cfg.rate, topic)

	res := &result{events: events, slopes: map[string]float64{}, fitted: map[string]bool{}}
	var (
		life     int
		job      *exec.Cmd
		jobDone  chan error
		lifeFrom time.Time
		killAt   time.Time
		stats    string
		produced bool
	)
	startJob := func() error {
		stats = filepath.Join(cfg.dir, fmt.Sprintf("stats.%d", life))
		c, err := start(fmt.Sprintf("process.%d", life), "-phase", "process", "-checkpoints", ckpt, "-crash=false",
			"-interval", cfg.interval.String(), "-stats", stats)
		if err != nil {
			return err
		}
		job, jobDone, lifeFrom = c, make(chan error, 1), time.Now()
		killAt = lifeFrom.Add(cfg.killMin + time.Duration(rng.Int64N(int64(cfg.killMax-cfg.killMin)+1)))
		go func() { jobDone <- c.Wait() }()
		return nil
	}
	if err := startJob(); err != nil {
		return nil, err
	}
	defer func() {
		if job.ProcessState == nil {
			job.Process.Kill()
			<-jobDone
		}
	}()
	tick := time.NewTicker(cfg.every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case err := <-prodDone:
			if err != nil {
				return nil, fmt.Errorf("producer: %w (%s)", err, filepath.Join(cfg.dir, "produce.log"))
			}
			produced = true
			logf("input complete; no more kills, the job finishes")
			prodDone = nil
			continue
		case err := <-jobDone:
			if err != nil {
				return nil, fmt.Errorf("job (life %d): %w (%s)", life, err, filepath.Join(cfg.dir, fmt.Sprintf("process.%d.log", life)))
			}
			if !produced {
				// The job ends once it saw every event's result, so the
				// input was all written; the producer's process may still
				// be flushing and exiting (a loaded machine: CI).
				select {
				case err := <-prodDone:
					if err != nil {
						return nil, fmt.Errorf("producer: %w (%s)", err, filepath.Join(cfg.dir, "produce.log"))
					}
				case <-time.After(time.Minute):
					return nil, fmt.Errorf("job (life %d) ended, its producer still running a minute later", life)
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
			logf("job finished: every result committed")
		case <-tick.C:
			if s, ok := look(job.Process.Pid, stats, ckpt); ok {
				s.t, s.life, s.lifeT = time.Since(began).Seconds(), life, time.Since(lifeFrom).Seconds()
				res.samples = append(res.samples, s)
				if cfg.csv != nil {
					fmt.Fprintln(cfg.csv, s.csv())
				}
			}
			if !produced && time.Now().After(killAt) {
				job.Process.Signal(syscall.SIGKILL)
				<-jobDone
				res.kills = append(res.kills, time.Since(began).Seconds())
				if cfg.csv != nil {
					fmt.Fprintf(cfg.csv, "kill,%.1f\n", res.kills[len(res.kills)-1])
				}
				life++
				logf("SIGKILL; life %d starts", life)
				if err := startJob(); err != nil {
					return nil, err
				}
			}
			continue
		}
		break
	}

	out, err := exec.CommandContext(ctx, cfg.job, append([]string{"-phase", "verify"}, common...)...).CombinedOutput()
	res.verify = strings.TrimSpace(string(out))
	logf("verify: %s", res.verify)
	if err != nil {
		res.failures = append(res.failures, fmt.Sprintf("the independent check failed (%v): %s", err, res.verify))
	}
	res.wall = time.Since(began)
	judge(cfg, res)
	return res, nil
}

// judge fits each series and records which are over their limits.
func judge(cfg config, res *result) {
	steady := func(s sample) bool { return s.lifeT >= cfg.warmup.Seconds() }
	for _, s := range res.samples {
		res.peakHWM = max(res.peakHWM, s.hwm)
		res.maxDisk = max(res.maxDisk, s.disk)
		res.lastDisk = s.disk
	}
	// The whole-run series (the checkpoint directory) skip the run's first
	// tenth, at least cfg.warmup: the state grows while users first appear.
	total := 0.0
	if n := len(res.samples); n > 0 {
		total = res.samples[n-1].t
	}
	from := max(total/10, cfg.warmup.Seconds())
	for _, sr := range series {
		var slope float64
		var ok bool
		if sr.whole {
			one := make([]sample, len(res.samples))
			for i, s := range res.samples {
				s.life = 0
				one[i] = s
			}
			slope, ok = pooledSlope(one, sr.y, func(s sample) bool { return s.t >= from })
		} else {
			slope, ok = pooledSlope(res.samples, sr.y, func(s sample) bool { return steady(s) && (!sr.reported || s.haveReports) })
		}
		slope *= 3600
		res.slopes[sr.name], res.fitted[sr.name] = slope, ok
		switch lim := sr.limit(cfg.limits); {
		case !ok:
			res.failures = append(res.failures, fmt.Sprintf("%s: too few samples to fit", sr.name))
		case slope > lim:
			res.failures = append(res.failures, fmt.Sprintf("%s grows %.2f%s/h, over the limit of %.2f%s/h", sr.name, slope, sr.unit, lim, sr.unit))
		}
	}
}

// look samples the job process pid: its memory and open files from /proc,
// its goroutines and handles from the last line of its -stats file, and
// the checkpoint directory's size. ok is false once the process is gone.
func look(pid int, stats, ckpt string) (s sample, ok bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return s, false
	}
	for _, l := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(l, ":")
		kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
		switch k {
		case "VmRSS":
			s.rss = kb / 1024
		case "VmHWM":
			s.hwm = kb / 1024
		case "State":
			if strings.Contains(v, "zombie") {
				return s, false
			}
		}
	}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return s, false
	}
	s.fds = float64(len(fds))
	if f, err := os.Open(stats); err == nil {
		var last string
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			last = sc.Text()
		}
		f.Close()
		if fs := strings.Fields(last); len(fs) == 4 {
			s.goroutines, _ = strconv.ParseFloat(fs[1], 64)
			s.handles, _ = strconv.ParseFloat(fs[2], 64)
			s.heap, _ = strconv.ParseFloat(fs[3], 64)
			s.heap /= 1 << 20
			s.haveReports = true
		}
	}
	var size int64
	filepath.WalkDir(ckpt, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // a file retention removed as we walked
			}
			return err
		}
		if !d.IsDir() {
			if fi, err := d.Info(); err == nil {
				size += fi.Size()
			}
		}
		return nil
	})
	s.disk = float64(size) / (1 << 20)
	return s, true
}
