package keyed

import (
	"sort"
	"sync"
	"sync/atomic"
	"time"

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
}

// stageStats are one stage's record counts.
type stageStats struct {
	kind    string // source, operator or sink
	in, out atomic.Int64
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
	job := metrics.Label{Name: "job", Value: j.name}
	one := func(name, help string, kind metrics.Kind, v float64) {
		emit(metrics.Sample{Name: name, Help: help, Kind: kind, Labels: []metrics.Label{job}, Value: v})
	}
	s.mu.Lock()
	names := make([]string, 0, len(s.stages))
	for n := range s.stages {
		names = append(names, n)
	}
	s.mu.Unlock()
	sort.Strings(names)
	for _, n := range names {
		st := s.stage(n, "")
		labels := []metrics.Label{job, {Name: "stage", Value: n}, {Name: "kind", Value: st.kind}}
		emit(metrics.Sample{Name: "kord_stage_records_in_total", Help: "Records a stage took: read by a source, processed by a keyed stage, written by a sink.",
			Kind: metrics.Counter, Labels: labels, Value: float64(st.in.Load())})
		if st.kind == "operator" {
			emit(metrics.Sample{Name: "kord_stage_records_out_total", Help: "Records a keyed stage emitted.",
				Kind: metrics.Counter, Labels: labels, Value: float64(st.out.Load())})
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
	one("kord_checkpoint_last_committed_timestamp_seconds", "When the last checkpoint committed (Unix time).", metrics.Gauge, at)
	one("kord_job_restarts_total", "Runs started again after a failure (RestartStrategy).", metrics.Counter, float64(s.restarts.Load()))
	one("kord_job_recoveries_total", "Runs started again after an unknown commit outcome, from what the sink recorded.", metrics.Counter, float64(s.recoveries.Load()))
	one("kord_dead_letters_total", "Records that could not be decoded, sent to the dead letters.", metrics.Counter, float64(j.deadLetters.Load()))
	one("kord_late_records_total", "Records that came after their windows were gone.", metrics.Counter, float64(j.lateRecords.Load()))
}
