package keyed

import (
	"math"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kordproject/kord/checkpoint"
	"github.com/kordproject/kord/keyed/internal/channel"
	"github.com/kordproject/kord/metrics"
)

// A job's figures (metrics.Collector): counted by its tasks and its
// coordinator as they go, read at scrape time. They live in the Job, so
// they go on across its restarts within a process (DESIGN.md, "Metrics").

// jobStats are a job's figures.
type jobStats struct {
	mu     sync.Mutex
	stages map[string]*stageStats

	running                   atomic.Bool
	checkpoints, aborted      atomic.Int64
	lastID                    atomic.Uint64
	lastDuration, lastCommit  atomic.Int64 // nanoseconds: trigger to committed, the sink's commit
	lastSize, lastCommittedAt atomic.Int64 // bytes of state files; unix nanoseconds
	restarts, recoveries      atomic.Int64
	alignNanos, alignments    atomic.Int64 // barrier alignments: their time summed, their count

	run     atomic.Pointer[runStats] // the run in progress, nil between runs
	history []CheckpointInfo         // the last committed, newest last (under mu)
}

// historyLen is how many committed checkpoints Overview keeps.
const historyLen = 10

// stageStats are one stage's figures.
type stageStats struct {
	kind    string // source, operator or sink
	in, out atomic.Int64
	blocked atomic.Int64 // nanoseconds its tasks' sends waited for credits
	// At each commit: the state the stage's files held, and its records
	// in per second since the commit before (float64 bits).
	stateBytes, rate atomic.Int64
	inAtCommit       int64 // under jobStats.mu
}

// taskStats are one task's figures, for a run.
type taskStats struct {
	name, stage string
	st          *stageStats
	in          atomic.Int64
	wm          atomic.Int64 // its watermark (Unix ms), channel.NoTime before one
}

// runStats are a run's tasks.
type runStats struct {
	mu    sync.Mutex
	tasks []*taskStats
}

// newRun starts the figures of a run.
func (s *jobStats) newRun() *runStats {
	rs := &runStats{}
	s.run.Store(rs)
	return rs
}

// task registers task (named name) of stage.
func (rs *runStats) task(task int, name, stage string, st *stageStats) *taskStats {
	ts := &taskStats{name: name, stage: stage, st: st}
	ts.wm.Store(channel.NoTime)
	rs.mu.Lock()
	rs.tasks = append(rs.tasks, ts)
	rs.mu.Unlock()
	return ts
}

// aligned counts a barrier alignment of d.
func (s *jobStats) aligned(d time.Duration) {
	s.alignNanos.Add(int64(d))
	s.alignments.Add(1)
}

// committedCheckpoint records checkpoint id's commit: its figures, each
// stage's state (its files' operator is "<stage>.<state>", or
// "<stage>.operator-state"), and each stage's rate since the commit
// before.
func (s *jobStats) committedCheckpoint(id uint64, took time.Duration, files []checkpoint.FileRef) {
	now := time.Now()
	var size int64
	byStage := map[string]int64{}
	s.mu.Lock()
	for _, f := range files {
		size += f.Size
		stage := ""
		for name := range s.stages { // the longest stage name that prefixes it
			if strings.HasPrefix(f.Operator, name+".") && len(name) > len(stage) {
				stage = name
			}
		}
		byStage[stage] += f.Size
	}
	var since time.Duration
	if n := len(s.history); n > 0 {
		since = now.Sub(s.history[n-1].Committed)
	}
	s.history = append(s.history, CheckpointInfo{ID: id, Committed: now, Duration: took, Size: size, Commit: time.Duration(s.lastCommit.Load())})
	if len(s.history) > historyLen {
		s.history = append(s.history[:0], s.history[len(s.history)-historyLen:]...)
	}
	for name, st := range s.stages {
		st.stateBytes.Store(byStage[name])
		in := st.in.Load()
		if since > 0 {
			st.rate.Store(int64(math.Float64bits(float64(in-st.inAtCommit) / since.Seconds())))
		}
		st.inAtCommit = in
	}
	s.mu.Unlock()
	s.lastDuration.Store(int64(took))
	s.lastSize.Store(size)
	s.checkpoints.Add(1)
	s.lastID.Store(id)
	s.lastCommittedAt.Store(now.UnixNano())
}

// CheckpointInfo is a committed checkpoint's figures.
type CheckpointInfo struct {
	ID        uint64
	Committed time.Time
	// Duration is from its trigger to its commit, Commit its commit
	// through the sink (a Kafka transaction's commit).
	Duration, Commit time.Duration
	// Size is the bytes of the state files it wrote.
	Size int64
}

// StageInfo is one stage's figures.
type StageInfo struct {
	Name string
	Kind string // "source", "operator" or "sink"
	// Tasks is how many tasks of the stage run in this process now.
	Tasks int
	// In: records read (a source), processed (a keyed stage) or written
	// (a sink); Out: records a keyed stage emitted.
	In, Out int64
	// Rate is In per second between the last two checkpoints committed.
	Rate float64
	// StateBytes is the stage's state in the last checkpoint committed.
	StateBytes int64
	// Backpressure is how long its tasks have waited for credits from the
	// stages downstream.
	Backpressure time.Duration
	// Watermark is the least of its tasks' watermarks, zero when a task
	// has none (or the job keeps no event time).
	Watermark time.Time
}

// TaskInfo is one task's figures in the run in progress.
type TaskInfo struct {
	Name, Stage string
	In          int64
	Watermark   time.Time // zero before one
}

// Overview is what a job is doing, for a status page: its stages, the
// tasks of the run in progress, and its last checkpoints, newest first.
type Overview struct {
	Name string
	Status
	Stages      []StageInfo
	Tasks       []TaskInfo
	Checkpoints []CheckpointInfo
}

// Overview reports what the job is doing now.
func (j *Job) Overview() Overview {
	s := &j.stats
	ov := Overview{Name: j.name, Status: j.Status()}
	var tasks []*taskStats
	if rs := s.run.Load(); rs != nil {
		rs.mu.Lock()
		tasks = append(tasks, rs.tasks...)
		rs.mu.Unlock()
	}
	for _, t := range tasks {
		ov.Tasks = append(ov.Tasks, TaskInfo{Name: t.name, Stage: t.stage, In: t.in.Load(), Watermark: wmTime(t.wm.Load())})
	}
	for _, n := range s.stageNames() {
		st := s.stage(n, "")
		si := StageInfo{Name: n, Kind: st.kind, In: st.in.Load(), Out: st.out.Load(), Rate: math.Float64frombits(uint64(st.rate.Load())),
			StateBytes: st.stateBytes.Load(), Backpressure: time.Duration(st.blocked.Load())}
		least, any := int64(math.MaxInt64), false
		for _, t := range tasks {
			if t.st == st {
				si.Tasks++
				least, any = min(least, t.wm.Load()), true
			}
		}
		if any {
			si.Watermark = wmTime(least)
		}
		ov.Stages = append(ov.Stages, si)
	}
	s.mu.Lock()
	for i := len(s.history) - 1; i >= 0; i-- {
		ov.Checkpoints = append(ov.Checkpoints, s.history[i])
	}
	s.mu.Unlock()
	return ov
}

// wmTime is a watermark as a time, zero for none.
func wmTime(ms int64) time.Time {
	if ms == channel.NoTime || ms == channel.EndOfTime {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}

// stageNames returns the names of the stages with figures, sorted.
func (s *jobStats) stageNames() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	names := make([]string, 0, len(s.stages))
	for n := range s.stages {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// stage returns the figures of the stage named name, made on first use.
func (s *jobStats) stage(name, kind string) *stageStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stages == nil {
		s.stages = map[string]*stageStats{}
	}
	st := s.stages[name]
	if st == nil {
		st = &stageStats{kind: kind}
		s.stages[name] = st
	}
	return st
}

// Status is what a job is doing, for a health check.
type Status struct {
	// Running: Run is in progress.
	Running bool
	// LastCheckpoint is the id of the last checkpoint committed in this
	// process (ids start again at each run of a job of several
	// processes), and LastCommitted when it committed; zero before any.
	LastCheckpoint uint64
	LastCommitted  time.Time
}

// Name is the job's name (NewJob).
func (j *Job) Name() string { return j.name }

// Status reports what the job is doing now.
func (j *Job) Status() Status {
	s := &j.stats
	st := Status{Running: s.running.Load(), LastCheckpoint: s.lastID.Load()}
	if at := s.lastCommittedAt.Load(); at != 0 {
		st.LastCommitted = time.Unix(0, at)
	}
	return st
}

var _ metrics.Collector = (*Job)(nil)

// Collect implements metrics.Collector: the job's figures since it was
// made, whatever runs and restarts it went through.
func (j *Job) Collect(emit func(metrics.Sample)) {
	s := &j.stats
	job := metrics.Label{Name: "kord_job", Value: j.name}
	one := func(name, help string, kind metrics.Kind, v float64) {
		emit(metrics.Sample{Name: name, Help: help, Kind: kind, Labels: []metrics.Label{job}, Value: v})
	}
	now := time.Now()
	for _, st := range j.Overview().Stages {
		labels := []metrics.Label{job, {Name: "stage", Value: st.Name}, {Name: "kind", Value: st.Kind}}
		stage := func(name, help string, kind metrics.Kind, v float64) {
			emit(metrics.Sample{Name: name, Help: help, Kind: kind, Labels: labels, Value: v})
		}
		stage("kord_stage_records_in_total", "Records a stage took: read by a source, processed by a keyed stage, written by a sink.", metrics.Counter, float64(st.In))
		if st.Kind == "operator" {
			stage("kord_stage_records_out_total", "Records a keyed stage emitted.", metrics.Counter, float64(st.Out))
			stage("kord_stage_state_bytes", "The keyed stage's state in the last checkpoint committed.", metrics.Gauge, float64(st.StateBytes))
		}
		if st.Kind != "sink" {
			stage("kord_stage_backpressure_seconds_total", "Time the stage's tasks waited for credits from the stages downstream (backpressure).", metrics.Counter, st.Backpressure.Seconds())
		}
		stage("kord_stage_tasks", "The stage's tasks running in this process.", metrics.Gauge, float64(st.Tasks))
		if !st.Watermark.IsZero() {
			stage("kord_stage_watermark_lag_seconds", "How far the stage's watermark (the least of its tasks') stands behind the wall clock.", metrics.Gauge, now.Sub(st.Watermark).Seconds())
		}
	}
	running := 0.0
	if s.running.Load() {
		running = 1
	}
	one("kord_job_running", "1 while the job's Run is in progress.", metrics.Gauge, running)
	one("kord_checkpoints_completed_total", "Checkpoints committed.", metrics.Counter, float64(s.checkpoints.Load()))
	one("kord_checkpoints_aborted_total", "Checkpoints aborted (timed out, declined, or a write failed): their output commits with a later one.", metrics.Counter, float64(s.aborted.Load()))
	one("kord_checkpoint_last_id", "The id of the last checkpoint committed.", metrics.Gauge, float64(s.lastID.Load()))
	one("kord_checkpoint_last_duration_seconds", "The last committed checkpoint's time from its trigger to its commit.", metrics.Gauge, time.Duration(s.lastDuration.Load()).Seconds())
	one("kord_checkpoint_last_commit_seconds", "The last committed checkpoint's commit through the sink (a Kafka transaction's commit).", metrics.Gauge, time.Duration(s.lastCommit.Load()).Seconds())
	one("kord_checkpoint_last_size_bytes", "The state files the last committed checkpoint wrote.", metrics.Gauge, float64(s.lastSize.Load()))
	at := 0.0
	if t := s.lastCommittedAt.Load(); t != 0 {
		at = float64(t) / 1e9
	}
	one("kord_checkpoint_alignment_seconds_total", "Time the tasks spent aligning checkpoint barriers (exactly-once), summed.", metrics.Counter, time.Duration(s.alignNanos.Load()).Seconds())
	one("kord_checkpoint_alignments_total", "Barrier alignments (one per task and checkpoint).", metrics.Counter, float64(s.alignments.Load()))
	one("kord_checkpoint_last_committed_timestamp_seconds", "When the last checkpoint committed (Unix time).", metrics.Gauge, at)
	one("kord_job_restarts_total", "Runs started again after a failure (RestartStrategy).", metrics.Counter, float64(s.restarts.Load()))
	one("kord_job_recoveries_total", "Runs started again after an unknown commit outcome, from what the sink recorded.", metrics.Counter, float64(s.recoveries.Load()))
	one("kord_dead_letters_total", "Records that could not be decoded, sent to the dead letters.", metrics.Counter, float64(j.deadLetters.Load()))
	one("kord_late_records_total", "Records that came after their windows were gone.", metrics.Counter, float64(j.lateRecords.Load()))
	// The connectors' own figures (a Kafka source's lag, a sink's commit
	// lag), labelled with the job and the stage. They may ask their
	// systems: no lock is held meanwhile.
	for _, c := range j.connectorCollectors() {
		labels := []metrics.Label{job, {Name: "stage", Value: c.stage}}
		c.Collect(func(s metrics.Sample) {
			s.Labels = append(append(make([]metrics.Label, 0, len(labels)+len(s.Labels)), labels...), s.Labels...)
			emit(s)
		})
	}
}

// stageCollector is a connector that reports figures of its own, and the
// stage it is.
type stageCollector struct {
	stage string
	metrics.Collector
}

// connectorCollectors returns the job's sources and sinks that are
// metrics.Collectors (a hop's source once bound).
func (j *Job) connectorCollectors() []stageCollector {
	j.bindMu.Lock()
	defer j.bindMu.Unlock()
	var out []stageCollector
	for _, s := range j.sources {
		v := s.sourceValue()
		if h, ok := v.(interface{ connectorSource() any }); ok {
			v = h.connectorSource()
		}
		if c, ok := v.(metrics.Collector); ok {
			out = append(out, stageCollector{s.sourceName(), c})
		}
	}
	for _, s := range j.sinks() {
		if c, ok := s.sinkValue().(metrics.Collector); ok {
			out = append(out, stageCollector{s.sinkName(), c})
		}
	}
	return out
}
