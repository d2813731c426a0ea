//go:build kordfailpoints

package main

// The crash torture runs the job's process phase in child processes (this
// test binary, child_test.go) killed by failpoints: built only with the
// kordfailpoints tag, like the engine's failure points.

import (
	"bytes"
	"context"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kordproject/kord/examples/accesslog"
	"github.com/kordproject/kord/internal/failpoint"
	"github.com/kordproject/kord/internal/rig/crashtest"
	"github.com/kordproject/kord/internal/rig/hivetest"
	"github.com/kordproject/kord/internal/rig/kafkatest"
)

// TestCrashTorture: with input arriving (2,000 events/s, an hour of event
// time every 1.5 s), the job's process phase runs as a child process
// SIGKILLed at the file sink's steps (parts closed at a barrier, a
// commit's files half published, a partition's commit about to run), at
// the checkpoint's, and at random times, then restarted; a last run
// finishes. Then, read independently: every event once in its hour's
// partition (or under _late/), every partition committed, the Metastore
// listing exactly the partitions with a _SUCCESS, each pattern counted
// once per event; and DuckDB reads the table back.
func TestCrashTorture(t *testing.T) {
	c := kafkatest.Broker(t)
	addr := hivetest.Addr(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	o := options{brokers: c.Brokers, topic: kafkatest.TopicName(t), events: 24_000, hours: 16, partitions: 4, seed: 7, rate: 2_000,
		quiet: true, lake: t.TempDir(), table: uniqueTable(), db: "kord_test", late: "into", metastore: addr, dir: t.TempDir()}
	var err error
	o.client, err = o.newClient()
	require.NoError(t, err)
	_, err = o.topics(ctx)
	require.NoError(t, err)
	produced := make(chan error, 1)
	po := o
	go func() { produced <- produce(ctx, po, o.partitions) }()
	// The killed children follow the input: a bounded run that caught up
	// would end with its input, which passes every hour (the end of
	// time), and make every later event late. The last run reads to the
	// end.
	env := func(fp string) []string {
		return []string{"TOHIVE_CHILD=1", "TH_FOLLOW=1", "TH_BROKERS=" + c.Brokers, "TH_INPUT=" + o.topic, "TH_DIR=" + o.dir, "TH_LAKE=" + o.lake,
			"TH_TABLE=" + o.table, "TH_METASTORE=" + addr, failpoint.Env + "=" + fp}
	}
	r := rand.New(rand.NewPCG(8, 8))
	cycles := []string{failpoint.FileBeforePartCommit + "@1", failpoint.FileAfterClose + "@3", failpoint.FileBeforePartCommit + "@2",
		failpoint.FileMidPublish + "@3", failpoint.AfterMetadata + "@2", failpoint.FileBeforePartCommit + "@1", failpoint.AfterCommit + "@2", "", ""}
	kills, partKills := 0, 0
	for _, fp := range cycles {
		ch := crashtest.Start(t, env(fp)...)
		// A failpoint's child gets up to 4 s to reach it (an hour of event
		// time passes every 1.5 s), then is killed like the others.
		wait := time.Duration(300+r.IntN(1200)) * time.Millisecond
		if fp != "" {
			wait = 4 * time.Second
		}
		signaled, err := ch.Wait(wait, true)
		require.NoError(t, err, "cycle %q: child failed\n%s", fp, ch.Stderr)
		if signaled {
			kills++
		}
		if strings.Contains(ch.Stderr.String(), "failpoint "+failpoint.FileBeforePartCommit+": SIGKILL") {
			partKills++
		}
	}
	require.GreaterOrEqual(t, kills, 5, "the job finished before it could be killed often enough")
	require.GreaterOrEqual(t, partKills, 1, "killed at a partition's commit")
	require.NoError(t, <-produced)
	last := crashtest.Start(t, append(env(""), "TH_FOLLOW=0")...)
	require.NoError(t, <-last.Done, "last run: %s", last.Stderr)
	var out bytes.Buffer
	o.stdout, o.phase = &out, "verify"
	require.NoError(t, verify(ctx, o, accesslog.Normalizer{}))
	t.Logf("%d kills, %d at a partition's commit; %s", kills, partKills, strings.TrimSpace(out.String()))
	require.Contains(t, out.String(), "verified: events=24000 lake_rows=24000 ")
	requireLakeByDuckDB(t, filepath.Join(o.lake, o.table), o.events)
}
