package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kordproject/kord/admin"
	"github.com/kordproject/kord/internal/rig/kafkatest"
	"github.com/kordproject/kord/kafkaio"
)

// The main job runs end to end, crash and recovery included, and verifies
// its own output with an independent read_committed reader (run returns an
// error on any duplicate, loss, reorder or wrong count), in both keying
// modes and with a second keyed stage (-pages, whose results land in
// files too: -lake), on kfake and on the real broker.
func TestRunEndToEnd(t *testing.T) {
	// Long mode: KORD_E2E_EVENTS=1000000. The crash comes after the second
	// committed checkpoint whatever the count, so 40,000 events (12
	// partitions, 10,000 users) still cross it with most of the input
	// still to come.
	events := 40_000
	if n, _ := strconv.Atoi(os.Getenv("KORD_E2E_EVENTS")); n > 0 {
		events = n
	}
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		for _, mode := range []string{"keyby=false", "keyby=true", "pages"} {
			keyBy, pages := mode == "keyby=true", mode == "pages"
			if pages && c.Name == "kfake" && os.Getenv("KORD_E2E_EVENTS") == "" {
				continue // the second stage and the lake: on the real broker (and on kfake in the long mode)
			}
			t.Run(mode, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(3+events/20_000)*time.Minute)
				defer cancel()
				o := options{brokers: c.Brokers, topic: kafkatest.TopicName(t), events: events, users: 10_000, partitions: 12, seed: 3,
					phase: "all", crash: true, keyBy: keyBy, pages: pages, interval: 500 * time.Millisecond, quiet: true, dir: t.TempDir()}
				if pages {
					o.lake = t.TempDir() // the second stage's results land in files too
				}
				var out bytes.Buffer
				o.stdout = &out
				require.NoError(t, run(ctx, o))
				t.Log(strings.TrimSpace(out.String()))
				require.Contains(t, out.String(), fmt.Sprintf("events_in=%d ", events))
				require.Contains(t, out.String(), fmt.Sprintf("results_out=%d ", events))
				if pages {
					requireLakeByDuckDB(t, o.lake, events)
					require.Contains(t, out.String(), fmt.Sprintf("lake_rows=%d ", events))
				}
			})
		}
	})
}

// TestRunSecured: the main job, exactly-once, crash and recovery included,
// runs through the real broker's SASL_SSL listener (SCRAM-SHA-512) from
// the Java client.properties scripts/kafka.sh writes, unchanged, as
// -properties: every client of the run (producer, the job's source and
// sink, the watcher, the independent verifier, topic creation) reads it.
// Nothing names the plaintext listener: its bootstrap.servers is the
// secured one.
func TestRunSecured(t *testing.T) {
	s := kafkatest.Secure(t)
	props, err := os.ReadFile(s.Properties("sasl_ssl"))
	require.NoError(t, err)
	require.Contains(t, string(props), "bootstrap.servers="+s.SASLSSL)
	require.Contains(t, string(props), "ScramLoginModule")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	o := options{properties: s.Properties("sasl_ssl"), topic: kafkatest.TopicName(t), events: 20_000, users: 1_000, partitions: 12, seed: 5,
		phase: "all", crash: true, interval: 500 * time.Millisecond, quiet: true, dir: t.TempDir()}
	var out bytes.Buffer
	o.stdout = &out
	require.NoError(t, run(ctx, o))
	t.Log(strings.TrimSpace(out.String()))
	require.Contains(t, out.String(), "events_in=20000 results_out=20000 duplicates=0 order_violations=0 wrong_counts=0 missing=0")
	require.Regexp(t, `recovery_ms=[1-9]`, out.String(), "the job crashed and recovered")
}

// TestRunProcesses: the main job as three processes (children of the
// test binary, -processes 3), Kafka's consumer group sharing the 12
// partitions, input produced first; one process is SIGKILLed part-way and
// started again. The independent read_committed verification finds every
// result exactly once, in per-user order, with the right counts; the
// results land in one lake too (-lake), every one once.
func TestRunProcesses(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
		defer cancel()
		// On kfake the processes share a bucket (gocloud's fileblob: a
		// directory seen as object storage), on the real broker a
		// directory.
		dir := t.TempDir()
		ckpt := dir
		if c.Name == "kfake" {
			ckpt = "file://" + dir
		}
		o := options{brokers: c.Brokers, topic: kafkatest.TopicName(t), events: 60_000, users: 5_000, partitions: 12, seed: 7,
			phase: "all", crash: true, processes: 3, session: 6 * time.Second, interval: 500 * time.Millisecond, quiet: true, dir: ckpt,
			lake: t.TempDir()}
		var out bytes.Buffer
		o.stdout = &out
		err := run(ctx, o)
		t.Log(strings.TrimSpace(out.String()))
		require.NoError(t, err)
		require.Contains(t, out.String(), "events_in=60000 results_out=60000 duplicates=0 order_violations=0 wrong_counts=0 missing=0")
		require.Contains(t, out.String(), "processes=3 processes_killed=1")
		require.Regexp(t, `lake_rows=60000 lake_files=\d+ lake_duplicates=0 lake_missing=0 lake_wrong=0`, out.String())
		requireLakeByDuckDB(t, o.lake, o.events)
		metas, err := filepath.Glob(filepath.Join(dir, "*", "ckpt-*.meta"))
		require.NoError(t, err)
		if c.Name == "kfake" {
			require.NotEmpty(t, metas, "checkpoints in the bucket, under the job's name")
		} else {
			require.Empty(t, metas)
		}
	})
}

// TestRunProcessesKeyBy: the main job keyed by the uuid field, then
// re-keyed by page (-pages), on three processes: the records cross
// between them twice, through the job's two hop topics, in the job's own
// transactions; one process is SIGKILLed part-way and started again. The
// independent read_committed verification finds every result exactly
// once, in per-user order, each page's results numbered 1..n. On kfake
// and the real broker.
func TestRunProcessesKeyBy(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
		defer cancel()
		o := options{brokers: c.Brokers, topic: kafkatest.TopicName(t), events: 40_000, users: 5_000, partitions: 12, seed: 9,
			phase: "all", crash: true, processes: 3, keyBy: true, pages: true, session: 6 * time.Second, interval: 500 * time.Millisecond, quiet: true, dir: t.TempDir()}
		var out bytes.Buffer
		o.stdout = &out
		err := run(ctx, o)
		t.Log(strings.TrimSpace(out.String()))
		require.NoError(t, err)
		require.Contains(t, out.String(), "events_in=40000 results_out=40000 duplicates=0 order_violations=0 wrong_counts=0 missing=0")
		require.Contains(t, out.String(), "processes=3 processes_killed=1")
		a, err := admin.New(admin.Brokers(c.Brokers))
		require.NoError(t, err)
		defer a.Close()
		name := strings.NewReplacer(".", "-").Replace("userbehavior-" + o.topic)
		for _, stage := range []string{"count", "pages"} {
			offs, err := a.ListOffsets(ctx, kafkaio.RepartitionTopic(name, stage))
			require.NoError(t, err, "the hop into %s", stage)
			written := int64(0)
			for _, p := range offs {
				written += p.End
			}
			require.GreaterOrEqual(t, written, int64(40_000), "the hop into %s carried every record", stage)
		}
	})
}

func TestRunRejectsBadFlags(t *testing.T) {
	require.ErrorContains(t, run(context.Background(), options{events: 1, users: 1, partitions: 1, phase: "all", processes: 2, atLeastOnce: true}), "exactly-once only")
	require.Error(t, run(context.Background(), options{events: 0, users: 1, partitions: 1, phase: "all"}))
	require.Error(t, run(context.Background(), options{events: 1, users: 1, partitions: 1, phase: "nope"}))
}

// TestUnreachableFailsFast: -brokers naming a port nothing listens on ends
// the run within the admin client's request timeout (10 s, with slack),
// with one error that names the address and the cause.
func TestUnreachableFailsFast(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	l.Close()
	o, err := parseFlags([]string{"-brokers", addr, "-quiet"})
	require.NoError(t, err)
	start := time.Now()
	err = run(context.Background(), o)
	took := time.Since(start)
	t.Logf("after %v: %v\n%s", took.Round(time.Millisecond), err, o.book.Summary())
	require.ErrorIs(t, err, admin.ErrUnreachable)
	require.ErrorContains(t, err, "cannot reach the cluster at "+addr+" (connection refused)")
	require.NotContains(t, err.Error(), "\n", "one line")
	require.Less(t, took, 15*time.Second)
	require.Contains(t, o.book.Summary(), "Connection refused", "the clients' log, summed up")
}

// TestMain runs the process phase as a child process for the crash test.
func TestMain(m *testing.M) {
	if v, ok := os.LookupEnv(childArgsEnv); ok {
		// A process of -processes (TestRunProcesses).
		os.Exit(cli(strings.Split(v, "\x1f")))
	}
	if os.Getenv("USERBEHAVIOR_CHILD") == "1" {
		o := options{brokers: os.Getenv("UB_BROKERS"), topic: os.Getenv("UB_INPUT"), events: tortureEvents(), users: 500, partitions: 6,
			phase: "process", interval: 150 * time.Millisecond, dir: os.Getenv("UB_DIR"), quiet: true, atLeastOnce: os.Getenv("UB_AT_LEAST_ONCE") == "1",
			pages: os.Getenv("UB_PAGES") == "1", lake: os.Getenv("UB_LAKE"), lakeCompact: 500 * time.Millisecond}
		if err := run(context.Background(), o); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(3)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// tortureEvents is the crash test's input size: 24,000 (12 s at 2,000/s,
// longer than the killed cycles take even on a loaded machine), or 2,000 a
// cycle in long mode.
func tortureEvents() int {
	if n, _ := strconv.Atoi(os.Getenv("KORD_TORTURE_CYCLES")); n > 7 {
		return 2_000 * n
	}
	return 24_000
}

// TestRunEmbedded: with no cluster named (no -brokers, -properties or
// -X bootstrap.servers), the main job runs on the embedded default, as
// the README's first command does.
func TestRunEmbedded(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	o := options{events: 3_000, users: 300, partitions: 4, seed: 1, phase: "all", interval: 200 * time.Millisecond, quiet: true, dir: t.TempDir()}
	var out bytes.Buffer
	o.stdout = &out
	require.NoError(t, run(ctx, o))
	require.Contains(t, out.String(), "events_in=3000 results_out=3000 duplicates=0")
}
