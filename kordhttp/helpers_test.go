package kordhttp_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kordproject/kord/internal/rig/kafkatest"
	"github.com/kordproject/kord/internal/rig/testjob"
	"github.com/kordproject/kord/kafkaio"
	"github.com/kordproject/kord/keyed"
	"github.com/kordproject/kord/kordhttp"
	"github.com/kordproject/kord/serde"
)

// scraped is one scrape of /metrics: each series ("name{labels}") and its
// value, in client_golang's text format.
type scraped map[string]float64

func scrape(t *testing.T, url string) scraped {
	t.Helper()
	_, body := get(t, url+"/metrics")
	out := scraped{}
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		require.NoError(t, err, line)
		out[line[:i]] = v
	}
	return out
}

// get returns the series name{labels} exactly as exposed (labels sorted
// by name), and whether it is there.
func (s scraped) get(series string) (float64, bool) { v, ok := s[series]; return v, ok }

// sum adds up the series of name whose labels match re.
func (s scraped) sum(name, re string) (float64, int) {
	m := regexp.MustCompile("^" + regexp.QuoteMeta(name) + `\{.*` + re)
	var sum float64
	n := 0
	for k, v := range s {
		if m.MatchString(k) {
			sum += v
			n++
		}
	}
	return sum, n
}

// produceEvents writes count events to topic through kc, numbered per
// user as seq counts them.
func produceEvents(t *testing.T, kc *kgo.Client, topic string, count int, seq map[string]int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	recs := make([]*kgo.Record, count)
	for i := range recs {
		u := fmt.Sprintf("user-%d", i%7)
		v, err := json.Marshal(testjob.Event{UUID: u, Seq: seq[u]})
		require.NoError(t, err)
		seq[u]++
		recs[i] = &kgo.Record{Topic: topic, Key: []byte(u), Value: v}
	}
	require.NoError(t, kc.ProduceSync(ctx, recs...).FirstErr())
}

// countJob is a running Kafka job seen through the handler: events of
// seven users read from in (three partitions), with event time (a
// partition that gets none of them is idle), counted
// per user by two tasks, the counts written to another topic, lag per
// partition too.
type countJob struct {
	job      *keyed.Job
	srv      *httptest.Server
	in, name string
}

// startCountJob produces n events, starts the job on c and waits until
// it has read and written them all, with nothing behind. The job stops
// when t ends.
func startCountJob(t *testing.T, c *kafkatest.Cluster, n int) countJob {
	t.Helper()
	const parts = 3
	in, out := c.CreateTopic(t, parts, nil), c.CreateTopic(t, parts, nil)
	name := "user-counts"
	kc, seq := c.Client(t), map[string]int64{}
	const later = 14
	produceEvents(t, kc, in, n-later, seq)

	cl, err := kafkaio.NewClient(kafkaio.Brokers(c.Brokers))
	require.NoError(t, err)
	j := keyed.NewJob(name, keyed.Dir(t.TempDir()), keyed.CheckpointInterval(200*time.Millisecond))
	s := keyed.FromSource(j, "events", 1, kafkaio.NewSource(cl, in, serde.JSON[testjob.Event](), kafkaio.PartitionMetrics())).Watermarks(time.Second).Idleness(300 * time.Millisecond)
	o := keyed.Process(keyed.KeyByString("uuid", func(e testjob.Event) string { return e.UUID }, s), "count", 2,
		func() keyed.Operator[testjob.Event, testjob.Result] { return &testjob.Counter{} })
	keyed.ToSink(o, "results", kafkaio.NewSink(cl, out, serde.JSON[testjob.Result](), kafkaio.PartitionMetrics()))
	srv := httptest.NewServer(kordhttp.Handler([]*keyed.Job{j}))
	t.Cleanup(srv.Close)

	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- j.Run(ctx) }()
	t.Cleanup(func() { stop(); require.NoError(t, <-done) })
	sourceLag := fmt.Sprintf(`kord_source_lag_records{kord_job=%q,stage="events",topic=%q}`, name, in)
	caughtUp := func(want int) func() bool {
		return func() bool {
			m := scrape(t, srv.URL)
			v, ok := m.get(sourceLag)
			results, _ := m.get(fmt.Sprintf(`kord_stage_records_in_total{kind="sink",kord_job=%q,stage="results"}`, name))
			return ok && v == 0 && results == float64(want)
		}
	}
	require.Eventually(t, caughtUp(n-later), time.Minute, 20*time.Millisecond)
	// The rest once a partition without events is idle: the watermark
	// then moves past them.
	time.Sleep(500 * time.Millisecond)
	produceEvents(t, kc, in, later, seq)
	require.Eventually(t, caughtUp(n), time.Minute, 20*time.Millisecond)
	return countJob{job: j, srv: srv, in: in, name: name}
}
