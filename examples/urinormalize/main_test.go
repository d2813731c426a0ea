package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kordproject/kord/internal/rig/kafkatest"
)

// testOptions are the command's defaults (its flags unset) on cluster c,
// on a fresh topic, with the summary captured.
func testOptions(t *testing.T, c *kafkatest.Cluster, out *bytes.Buffer) options {
	o, err := parseFlags(nil)
	require.NoError(t, err)
	o.brokers, o.topic, o.dir, o.stdout = c.Brokers, kafkatest.TopicName(t), t.TempDir(), out
	return o
}

// summaryOf parses the -quiet summary line.
func summaryOf(t *testing.T, line string) map[string]string {
	kv := map[string]string{}
	for _, f := range strings.Fields(line) {
		k, v, ok := strings.Cut(f, "=")
		require.True(t, ok, "summary field %q", f)
		kv[k] = v
	}
	return kv
}

// The job runs end to end, crash and recovery included, and checks its
// own output with an independent read_committed reader against a model of
// the input (run returns an error on any mismatch): every malformed record
// once in the dead-letter topic, every other event either once in the late
// topic or counted in its window, each window's last result exact.
func TestRunEndToEnd(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		var out bytes.Buffer
		o := testOptions(t, c, &out)
		// 3 minutes of event time, for many events a minute: the
		// partitions' reads interleave in event time closely enough that
		// most events stamped far in the past come late, and some within
		// the allowed lateness fire their window again.
		o.events, o.minutes, o.lateFraction, o.seed, o.quiet = 20_000, 3, 0.005, 3, true
		// A checkpoint every 20 ms: the job reads the input in about a
		// second on kfake, and crashes only if it commits twice before
		// its final checkpoint.
		o.interval = 20 * time.Millisecond
		require.NoError(t, run(ctx, o))
		line := strings.TrimSpace(out.String())
		t.Log(line)
		s := summaryOf(t, line)
		require.Equal(t, "20000", s["events_in"])
		require.Equal(t, "0", s["mismatches"])
		require.Equal(t, s["malformed"], s["dead_letters"])
		require.NotEqual(t, "0", s["malformed"])
		require.Equal(t, "true", s["crashed"], "the job crashed and recovered")
		require.Equal(t, "10", s["patterns"])
		// Which events are late depends on the watermark as the reads
		// interleave: not required, only logged.
		results, _ := strconv.Atoi(s["results_out"])
		windows, _ := strconv.Atoi(s["windows_out"])
		t.Logf("%s late events (%s stamped far in the past), %d windows fired again", s["late"], s["far_behind"], results-windows)
	})
}

// A -rules file is tried before the default rules, end to end: the
// users/<name>/profile URIs, one pattern per user by default, fold into
// one, and the check (which normalizes with the same rules) holds.
func TestRunRules(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		rules := filepath.Join(t.TempDir(), "rules.txt")
		require.NoError(t, os.WriteFile(rules, []byte("# user names are ids here\nusers/[^/]+/profile => users/{name}/profile\n"), 0o644))
		var out bytes.Buffer
		o := testOptions(t, c, &out)
		// No event stamped far in the past: each pattern has exactly the 3
		// windows of the 3 minutes.
		o.events, o.minutes, o.crash, o.rules, o.lateFraction = 5_000, 3, false, rules, 0
		require.NoError(t, run(ctx, o))
		requireRulesApplied(t, out.String())
	})
}

// requireRulesApplied checks the summary of a run with the rule that
// names users/{name}/profile against the model: the pattern in each of the
// 3 minutes, no user's own path left.
func requireRulesApplied(t *testing.T, out string) {
	t.Helper()
	t.Log(out)
	require.Regexp(t, `\nusers/\{name\}/profile +3 +\d+ `, out, "one pattern for every user, in each of the 3 minutes")
	require.NotContains(t, out, "users/alice")
	require.Contains(t, out, "\npatterns:                   6\n")
	require.Contains(t, out, "\nmismatches:                 0\n")
}

// TestRunRulesTopic: the rules of TestRunRules come from a compacted topic
// (-rules-topic: its latest value is a rule file, read by the job as it
// runs, as broadcast state) instead of a file; a first value that a later
// one replaces is not used. The same patterns result, checked against the
// model with the rules the topic ends with, and the job ends with its
// access input although the rules input never does.
func TestRunRulesTopic(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		rules := c.CreateTopic(t, 1, map[string]string{"cleanup.policy": "compact"})
		kc := c.Client(t)
		for _, v := range []string{"users/[^/]+/profile => people/{name}\n", "# user names are ids here\nusers/[^/]+/profile => users/{name}/profile\n"} {
			require.NoError(t, kc.ProduceSync(ctx, &kgo.Record{Topic: rules, Key: []byte("rules"), Value: []byte(v)}).FirstErr())
		}
		var out bytes.Buffer
		o := testOptions(t, c, &out)
		o.events, o.minutes, o.crash, o.rulesTopic, o.lateFraction = 5_000, 3, false, rules, 0
		require.NoError(t, run(ctx, o))
		requireRulesApplied(t, out.String())
		require.NotContains(t, out.String(), "people/", "the rule file the later one replaced")
	})
}

// The phases run one at a time on the topic -input names, as the package
// doc says: produce, then process, then verify.
func TestRunPhases(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		var out bytes.Buffer
		o := testOptions(t, c, &out)
		o.events, o.minutes, o.crash, o.quiet = 3_000, 2, false, true
		for _, phase := range []string{"produce", "process", "verify"} {
			o.phase = phase
			require.NoError(t, run(ctx, o), phase)
		}
		t.Log(out.String())
		s := summaryOf(t, strings.TrimSpace(out.String()))
		require.Equal(t, "0", s["mismatches"])
		require.NotContains(t, s, "checkpoints_committed", "verify alone: the job's counters are not known")
	})
}

func TestRunRejectsBadFlags(t *testing.T) {
	defaults, err := parseFlags(nil)
	require.NoError(t, err)
	bad := filepath.Join(t.TempDir(), "bad-rules.txt")
	require.NoError(t, os.WriteFile(bad, []byte("ok => fine\nusers/(x => p\n"), 0o644))
	for _, tc := range []struct {
		name string
		set  func(o *options)
		want string
	}{
		{"phase", func(o *options) { o.phase = "nope" }, `-phase "nope": want all, produce, process or verify`},
		{"process without input", func(o *options) { o.phase = "process" }, "-phase process: name the topic -input"},
		{"verify without input", func(o *options) { o.phase = "verify" }, "-phase verify: name the topic -input"},
		{"events", func(o *options) { o.events = 0 }, "-events 0, -minutes 10, -partitions 6: want each positive"},
		{"fractions", func(o *options) { o.lateFraction, o.badFraction = 0.6, 0.6 }, "1 at most together"},
		{"lateness", func(o *options) { o.allowedLateness = -time.Second }, "-allowed-lateness -1s"},
		{"interval", func(o *options) { o.interval = 0 }, "-interval 0s"},
		// A bad rule file is found before any cluster starts.
		{"rules", func(o *options) { o.rules = bad }, "rules " + bad + ":2: error parsing regexp"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := defaults
			tc.set(&o)
			require.ErrorContains(t, run(context.Background(), o), tc.want)
		})
	}
	// A flag that does not parse is exit code 2 (flag prints why, and
	// the usage, to stderr).
	require.Equal(t, 2, cli([]string{"-X", "no-value"}))
}

func TestParseFlags(t *testing.T) {
	o, err := parseFlags([]string{"-input", "in", "-phase", "verify", "-rules", "r.txt", "-events", "7", "-X", "a=b", "-X", "c=d=e", "-quiet"})
	require.NoError(t, err)
	require.Equal(t, "in", o.topic)
	require.Equal(t, "verify", o.phase)
	require.Equal(t, "r.txt", o.rules)
	require.Equal(t, 7, o.events)
	require.Equal(t, []string{"a=b", "c=d=e"}, o.set)
	require.True(t, o.quiet)
	require.Equal(t, "in.windows", o.windowsTopic())
	require.Equal(t, "in.late", o.lateTopic())
	require.Equal(t, "in.dlq", o.dlqTopic())
}

// TestRunEmbedded: with no cluster named (no -brokers, -properties or
// -X bootstrap.servers), the job runs on the embedded default, as the
// README's first command does.
func TestRunEmbedded(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	o, err := parseFlags(nil)
	require.NoError(t, err)
	var out bytes.Buffer
	o.dir, o.stdout, o.events, o.quiet = t.TempDir(), &out, 2_000, true
	require.NoError(t, run(ctx, o))
	require.Equal(t, "2000", summaryOf(t, strings.TrimSpace(out.String()))["events_in"])
}
