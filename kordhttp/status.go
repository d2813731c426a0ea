package kordhttp

import (
	"embed"
	"fmt"
	"html/template"
	"net/http"
	"sort"
	"strconv"
	"time"

	"github.com/kordproject/kord/keyed"
	"github.com/kordproject/kord/metrics"
)

// The status page: each job's stages, the tasks of its run, its last
// checkpoints and its lag, rendered on the server from Job.Overview and
// the jobs' own samples (the same a scrape of /metrics reads), refreshed
// by the browser every few seconds. No script, nothing fetched elsewhere.

//go:embed status.html
var pages embed.FS

var statusPage = template.Must(template.New("status.html").Funcs(template.FuncMap{
	"bytes": humanBytes,
	"dur":   humanDuration,
	"ago":   func(t time.Time) string { return humanDuration(time.Since(t)) + " ago" },
	"rate":  func(r float64) string { return fmt.Sprintf("%.0f/s", r) },
	"num": func(v *float64) string {
		if v == nil {
			return "–"
		}
		return strconv.FormatFloat(*v, 'f', -1, 64)
	},
	"wm":      watermark,
	"instant": func(t time.Time) string { return t.UTC().Format("15:04:05.000") },
}).ParseFS(pages, "status.html"))

// statusView is what the page shows.
type statusView struct {
	Now  time.Time
	Jobs []jobView
}

type jobView struct {
	keyed.Overview
	Ready string // "" when ready, else why not
	Lag   []lagRow
}

// lagRow is one input's lag: the stage reading it, its topic, how far
// this process's readers stand behind (while running) and how far the
// commit group does.
type lagRow struct {
	Stage, Topic     string
	Source           *float64 // kord_source_lag_records
	Seconds          *float64 // kord_source_lag_seconds
	Commit           *float64 // kord_commit_lag_records
	CommitStage      string
	SourcePartitions *float64
}

func (c *config) status(jobs []*keyed.Job) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		v := statusView{Now: time.Now()}
		for _, j := range jobs {
			jv := jobView{Overview: j.Overview(), Ready: notReady([]*keyed.Job{j}, c.ready, v.Now)}
			jv.Lag = lagOf(j)
			v.Jobs = append(v.Jobs, jv)
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		if err := statusPage.Execute(w, v); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
		}
	}
}

// lagOf gathers a job's lag samples by topic.
func lagOf(j *keyed.Job) []lagRow {
	rows := map[string]*lagRow{}
	j.Collect(func(s metrics.Sample) {
		switch s.Name {
		case "kord_source_lag_records", "kord_source_lag_seconds", "kord_source_partitions", "kord_commit_lag_records":
		default:
			return
		}
		topic := label(s, "topic")
		r := rows[topic]
		if r == nil {
			r = &lagRow{Topic: topic}
			rows[topic] = r
		}
		v := s.Value
		switch s.Name {
		case "kord_source_lag_records":
			r.Stage, r.Source = label(s, "stage"), &v
		case "kord_source_lag_seconds":
			r.Seconds = &v
		case "kord_source_partitions":
			r.SourcePartitions = &v
		case "kord_commit_lag_records":
			r.CommitStage, r.Commit = label(s, "stage"), &v
		}
	})
	out := make([]lagRow, 0, len(rows))
	for _, r := range rows {
		out = append(out, *r)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Topic < out[b].Topic })
	return out
}

// label returns the value of s's label name, "" when it has none.
func label(s metrics.Sample, name string) string {
	for _, l := range s.Labels {
		if l.Name == name {
			return l.Value
		}
	}
	return ""
}

func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

func humanDuration(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return d.Round(time.Microsecond).String()
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(10 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

// watermark shows a watermark and how far it stands behind now.
func watermark(t time.Time) string {
	if t.IsZero() {
		return "–"
	}
	return t.UTC().Format("2006-01-02 15:04:05") + " (" + humanDuration(time.Since(t)) + " behind)"
}
