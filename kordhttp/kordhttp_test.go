package kordhttp_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/kordproject/kord/internal/rig/testjob"
	"github.com/kordproject/kord/keyed"
	"github.com/kordproject/kord/keyed/connector"
	"github.com/kordproject/kord/kordhttp"
	"github.com/kordproject/kord/partitioner"
	"github.com/kordproject/kord/vfs"
)

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

// TestHandler: a running job seen through the handler. /healthz answers;
// /readyz refuses before the job runs, naming it, answers once it runs
// and committed a checkpoint, and refuses again after it stopped;
// /metrics counts the records read, in Prometheus' text format, and the
// exposition passes client_golang's promlint.
func TestHandler(t *testing.T) {
	const parts, n = 2, 500
	src := keyed.NewMemorySource[testjob.Event]("events", parts, false)
	for i := range n {
		u := fmt.Sprintf("user-%d", i%10)
		src.Append(partitioner.KeyPartition([]byte(u), parts), []byte(u), testjob.Event{UUID: u, Seq: int64(i / 10)})
	}
	j := keyed.NewJob("counts", keyed.FS(vfs.NewMem()), keyed.Dir("/ckpt"), keyed.CheckpointInterval(10*time.Millisecond))
	s := keyed.FromSource(j, "events", 1, connector.Source[testjob.Event](src))
	out := keyed.Process(keyed.ByPartition(s), "count", 1, func() keyed.Operator[testjob.Event, testjob.Result] { return &testjob.Counter{} })
	keyed.ToSink(out, "results", connector.Sink[testjob.Result](keyed.NewMemorySink[testjob.Result]()))

	srv := httptest.NewServer(kordhttp.Handler([]*keyed.Job{j}, kordhttp.ReadyWithin(time.Second)))
	defer srv.Close()
	code, body := get(t, srv.URL+"/healthz")
	require.Equal(t, http.StatusOK, code)
	code, body = get(t, srv.URL+"/readyz")
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Contains(t, body, "job counts is not running")

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- j.Run(ctx) }()
	require.Eventually(t, func() bool {
		_, body := get(t, srv.URL+"/metrics")
		return strings.Contains(body, fmt.Sprintf(`kord_stage_records_in_total{kind="sink",kord_job="counts",stage="results"} %d`, n))
	}, 30*time.Second, 10*time.Millisecond)
	require.Eventually(t, func() bool { code, _ := get(t, srv.URL+"/readyz"); return code == http.StatusOK }, 10*time.Second, 10*time.Millisecond)
	_, body = get(t, srv.URL+"/metrics")
	require.Contains(t, body, fmt.Sprintf(`kord_stage_records_in_total{kind="source",kord_job="counts",stage="events"} %d`, n))
	require.Contains(t, body, "kord_job_running{kord_job=\"counts\"} 1")
	require.Contains(t, body, "# TYPE kord_checkpoints_completed_total counter")
	require.Contains(t, body, "go_goroutines")

	problems, err := testutil.CollectAndLint(kordhttp.Collector(j))
	require.NoError(t, err)
	require.Empty(t, problems)

	cancel()
	require.NoError(t, <-done)
	code, body = get(t, srv.URL+"/readyz")
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Contains(t, body, "job counts is not running")
}

// TestServe: Serve listens on a free port, serves the handler, and Close
// stops it: the port is free again.
func TestServe(t *testing.T) {
	j := keyed.NewJob("idle", keyed.FS(vfs.NewMem()), keyed.Dir("/ckpt"))
	srv, err := kordhttp.Serve("127.0.0.1:0", []*keyed.Job{j})
	require.NoError(t, err)
	url := "http://" + srv.Addr().String()
	code, _ := get(t, url+"/healthz")
	require.Equal(t, http.StatusOK, code)
	code, body := get(t, url+"/")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "idle")
	require.Contains(t, body, "no run in progress")
	require.NoError(t, srv.Close())
	_, err = http.Get(url + "/healthz")
	require.Error(t, err, "closed")
	_, err = kordhttp.Serve(srv.Addr().String()+"x", nil)
	require.ErrorContains(t, err, "kordhttp: listen on")
}
