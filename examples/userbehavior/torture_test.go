//go:build kordfailpoints

package main

// The crash torture runs the job's process phase in child processes (this
// test binary) killed by failpoints: built only with the kordfailpoints
// tag, like the engine's failure points.

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kordproject/kord/internal/failpoint"
	"github.com/kordproject/kord/internal/rig/crashtest"
	"github.com/kordproject/kord/internal/rig/kafkatest"
)

// TestCrashTorture: the job's process phase runs as a child process that
// is SIGKILLed at checkpoint failpoints and at random times, then
// restarted, at least five times; a last run finishes, and the independent
// read_committed verification must find every result exactly once, in
// per-user order, with the right counts. In at-least-once mode the same
// torture may repeat results but must lose none, and counts stay right. In
// exactly-once mode the results land in files too (-lake), checked
// against the Kafka output: every result once, none staged left visible.
func TestCrashTorture(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		t.Run("exactly-once", func(t *testing.T) { torture(t, c, false, false) })
		t.Run("at-least-once", func(t *testing.T) { torture(t, c, true, false) })
		// Two keyed stages (-pages): per user, then re-keyed by page.
		t.Run("pages", func(t *testing.T) { torture(t, c, false, true) })
	})
}

func torture(t *testing.T, c *kafkatest.Cluster, atLeastOnce, pages bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	// Input keeps arriving (2,000 events/s) while the job is killed and
	// restarted.
	o := options{brokers: c.Brokers, topic: kafkatest.TopicName(t), events: tortureEvents(), users: 500, partitions: 6, seed: 9,
		phase: "produce", quiet: true, rate: 2_000, atLeastOnce: atLeastOnce, pages: pages}
	var err error
	o.client, err = o.newClient()
	require.NoError(t, err)
	a, err := o.admin()
	require.NoError(t, err)
	_, err = ensureTopic(ctx, a, o.topic, o.partitions)
	a.Close()
	require.NoError(t, err)
	if !atLeastOnce && !pages {
		// The results land in files too, through the same kills.
		o.lake = t.TempDir()
	}
	produced := make(chan error, 1)
	po := o // the producer's own copy: o changes below
	go func() { produced <- run(ctx, po) }()
	dir := t.TempDir()
	env := func(failpoints string) []string {
		e := []string{"USERBEHAVIOR_CHILD=1", "UB_BROKERS=" + c.Brokers, "UB_INPUT=" + o.topic, "UB_DIR=" + dir, "UB_LAKE=" + o.lake, failpoint.Env + "=" + failpoints}
		if atLeastOnce {
			e = append(e, "UB_AT_LEAST_ONCE=1")
		}
		if pages {
			e = append(e, "UB_PAGES=1")
		}
		return e
	}
	r := rand.New(rand.NewPCG(4, 4))
	cycles := []string{failpoint.AfterSnapshots + "@2", failpoint.AfterMetadata + "@2", failpoint.BeforeCommit + "@2",
		failpoint.AfterCommit + "@2", failpoint.DuringRestore, "", ""}
	if o.lake != "" {
		// The file sink's own steps (its lake compacts every 500 ms): parts
		// closed at a barrier, a commit's files half published, a merge
		// written.
		cycles = append([]string{failpoint.FileAfterClose + "@3", failpoint.FileMidPublish + "@3", failpoint.FileAfterMerge + "@1"}, cycles...)
	}
	// Long mode: KORD_TORTURE_CYCLES=50 (input then lasts long enough).
	if n, _ := strconv.Atoi(os.Getenv("KORD_TORTURE_CYCLES")); n > len(cycles) {
		points := []string{failpoint.AfterSnapshots, failpoint.AfterMetadata, failpoint.BeforeCommit, failpoint.AfterCommit, failpoint.AfterMarker}
		for len(cycles) < n {
			if r.IntN(2) == 0 {
				cycles = append(cycles, "")
			} else {
				cycles = append(cycles, fmt.Sprintf("%s@%d", points[r.IntN(len(points))], 1+r.IntN(3)))
			}
		}
	}
	kills := 0
	for _, fp := range cycles {
		ch := crashtest.Start(t, env(fp)...)
		// A random-time SIGKILL for "", else the failpoint's; a child that
		// finished early because everything was done exits cleanly.
		signaled, err := ch.Wait(time.Duration(200+r.IntN(1200))*time.Millisecond, fp == "")
		require.NoError(t, err, "cycle %q: child failed\n%s", fp, ch.Stderr)
		if signaled {
			kills++
		}
		if o.lake != "" {
			requireLakeNoDuplicate(t, o.lake)
		}
		if strings.HasPrefix(fp, "file-") {
			name, _, _ := strings.Cut(fp, "@")
			require.Contains(t, ch.Stderr.String(), "failpoint "+name+": SIGKILL", "the file sink's point %s was reached", fp)
		}
	}
	require.GreaterOrEqual(t, kills, 5, "the job finished before it could be killed often enough")
	require.NoError(t, <-produced)
	last := crashtest.Start(t, env("")...)
	require.NoError(t, <-last.Done, "last run: %s", last.Stderr)
	o.phase = "verify"
	var summary bytes.Buffer
	o.stdout = &summary
	require.NoError(t, run(ctx, o))
	t.Log(strings.TrimSpace(summary.String()))
	if o.lake != "" {
		requireLakeByDuckDB(t, o.lake, o.events)
		require.Contains(t, summary.String(), fmt.Sprintf("lake_rows=%d ", o.events))
	}
}
