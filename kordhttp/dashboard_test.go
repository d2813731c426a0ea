package kordhttp_test

import (
	"encoding/json"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/kordproject/kord/internal/rig/kafkatest"
	"github.com/kordproject/kord/kordhttp"
)

// dashboardMetrics returns the kord_ metrics the Grafana dashboard's
// queries name, and how many panels query.
func dashboardMetrics(t *testing.T) (names []string, panels int) {
	t.Helper()
	b, err := os.ReadFile("grafana/kord.json")
	require.NoError(t, err)
	var d struct {
		Panels []struct {
			Type, Title string
			Targets     []struct{ Expr string }
		}
		Templating struct {
			List []struct{ Definition string }
		}
	}
	require.NoError(t, json.Unmarshal(b, &d))
	var exprs []string
	for _, p := range d.Panels {
		if p.Type == "row" {
			continue
		}
		require.NotEmpty(t, p.Targets, "panel %q has no query", p.Title)
		panels++
		for _, tg := range p.Targets {
			require.NotEmpty(t, tg.Expr, "panel %q", p.Title)
			exprs = append(exprs, tg.Expr)
		}
	}
	for _, v := range d.Templating.List {
		exprs = append(exprs, v.Definition)
	}
	seen := map[string]bool{}
	for _, m := range regexp.MustCompile(`\bkord_[a-z0-9_]+\b`).FindAllString(strings.Join(exprs, "\n"), -1) {
		if m == "kord_job" {
			continue // the label that names the job, not a metric
		}
		if !seen[m] {
			seen[m] = true
			names = append(names, m)
		}
	}
	sort.Strings(names)
	return names, panels
}

// TestDashboard: every metric the Grafana dashboard (grafana/kord.json)
// queries is one a running Kafka job exports, with event time and
// per-partition lag on, through the handler's /metrics; and that job's
// exposition, the Kafka edge's figures included, passes promlint.
func TestDashboard(t *testing.T) {
	names, panels := dashboardMetrics(t)
	require.GreaterOrEqual(t, panels, 15)
	cj := startCountJob(t, kafkatest.Fake(t), 200)
	require.Eventually(t, func() bool { return cj.job.Status().LastCheckpoint >= 2 }, time.Minute, 20*time.Millisecond)
	_, body := get(t, cj.srv.URL+"/metrics")
	exposed := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^# TYPE (\S+) `).FindAllStringSubmatch(body, -1) {
		exposed[m[1]] = true
	}
	for _, n := range names {
		require.True(t, exposed[n], "the dashboard queries %s, which no job exports", n)
	}
	// The Kafka edge's figures pass client_golang's lint too.
	problems, err := testutil.CollectAndLint(kordhttp.Collector(cj.job))
	require.NoError(t, err)
	require.Empty(t, problems)
	// And the job's own figures all have a panel, but for the few that
	// are not worth one (the per-partition series, opt-in; the tasks,
	// read with backpressure; the last id; records out).
	skip := map[string]bool{"kord_source_partition_lag_records": true, "kord_commit_partition_lag_records": true, "kord_stage_tasks": true,
		"kord_checkpoint_last_id": true, "kord_stage_records_out_total": true, "kord_source_partitions": true}
	queried := map[string]bool{}
	for _, n := range names {
		queried[n] = true
	}
	for n := range exposed {
		if strings.HasPrefix(n, "kord_") && !skip[n] {
			require.True(t, queried[n], "%s has no panel", n)
		}
	}
}
