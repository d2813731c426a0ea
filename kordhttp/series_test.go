package kordhttp_test

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kordproject/kord/checkpoint"
	"github.com/kordproject/kord/internal/rig/testjob"
	"github.com/kordproject/kord/keyed"
	"github.com/kordproject/kord/keyed/connector"
	"github.com/kordproject/kord/kordhttp"
	"github.com/kordproject/kord/partitioner"
	"github.com/kordproject/kord/vfs"
)

// kordSeries returns the kord_ series of a scrape, sorted.
func (s scraped) kordSeries() []string {
	var out []string
	for k := range s {
		if strings.HasPrefix(k, "kord_") {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// TestSeriesBounded: the series a job exports do not grow with its
// recoveries and restarts. Each recovery starts a new run (a new run id;
// with Kafka, a new producer), and each restart one too: the series after
// five recoveries and two restarts are the very ones of the first run,
// fewer than a bound, while the counters count on across them.
func TestSeriesBounded(t *testing.T) {
	const parts, n = 4, 2000
	src := keyed.NewMemorySource[testjob.Event]("events", parts, false)
	for i := range n {
		u := fmt.Sprintf("user-%d", i%50)
		src.Append(partitioner.KeyPartition([]byte(u), parts), []byte(u), testjob.Event{UUID: u, Seq: int64(i / 50)})
	}
	sink := keyed.NewMemorySink[testjob.Result]()
	var commits atomic.Int64
	sink.FailCommit = func(checkpoint.Ref) error {
		switch c := commits.Add(1); {
		case c%3 == 0 && c <= 15:
			return keyed.OutcomeUnknown(errors.New("injected: commit outcome unknown"))
		case c%7 == 0 && c <= 14:
			return errors.New("injected: commit failed")
		}
		return nil
	}
	j := keyed.NewJob("bounded", keyed.FS(vfs.NewMem()), keyed.Dir("/ckpt"), keyed.CheckpointInterval(20*time.Millisecond),
		keyed.RestartStrategy(keyed.Restart{Attempts: 10}))
	s := keyed.FromSource(j, "events", 2, connector.Source[testjob.Event](src))
	out := keyed.Process(keyed.KeyByString("uuid", func(e testjob.Event) string { return e.UUID }, s), "count", 3,
		func() keyed.Operator[testjob.Event, testjob.Result] { return &testjob.Counter{} })
	keyed.ToSink(out, "results", connector.Sink[testjob.Result](sink))
	srv := httptest.NewServer(kordhttp.Handler([]*keyed.Job{j}))
	defer srv.Close()

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- j.Run(ctx) }()
	defer func() { cancel(); require.NoError(t, <-done) }()
	require.Eventually(t, func() bool { return j.Status().LastCheckpoint >= 1 }, 30*time.Second, 5*time.Millisecond)
	first := scrape(t, srv.URL).kordSeries()

	var last scraped
	require.Eventually(t, func() bool {
		last = scrape(t, srv.URL)
		rec, _ := last.sum("kord_job_recoveries_total", `kord_job="bounded"`)
		res, _ := last.sum("kord_job_restarts_total", `kord_job="bounded"`)
		return rec >= 5 && res >= 2 && len(sink.Committed()) == n
	}, time.Minute, 10*time.Millisecond)
	require.Equal(t, first, last.kordSeries(), "the same series after recoveries and restarts")
	require.Less(t, len(first), 40, "a job of three stages")
}
