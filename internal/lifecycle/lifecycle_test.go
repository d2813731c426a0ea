package lifecycle

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kordproject/kord/internal/transcript"
)

// TestLifecycleTranscripts runs the scripts in testdata: each case
// is a command, a "----" line, and the effects it must return, one per line.
// go test ./internal/lifecycle/ -run Transcripts -rewrite regenerates the expectations
// (review the diff).
//
// Commands: new key=value... (interval timeout minpause tolerable tasks
// committed at), tick at=D, ack ID task=N, task-failed ID at=D, meta-durable
// ID, meta-failed ID at=D, commit-done ID at=D, commit-failed ID, stop at=D,
// state. Times are durations from an epoch.
func TestLifecycleTranscripts(t *testing.T) {
	transcript.RunDir(t, func(t *testing.T) func(cmd string) string {
		var l *Lifecycle
		epoch := time.Unix(1_700_000_000, 0)
		return func(cmd string) string { return execLifecycle(t, &l, epoch, cmd) }
	})
}

func execLifecycle(t *testing.T, lp **Lifecycle, epoch time.Time, line string) string {
	c := transcript.Parse(t, line)
	id := c.ID
	dur, num := c.Duration, c.Int
	at := epoch.Add(dur("at"))
	var effs []Effect
	l := *lp
	switch c.Name {
	case "new":
		var err error
		*lp, err = New(Config{Interval: dur("interval"), Timeout: dur("timeout"), MinPause: dur("minpause"), TolerableFailures: num("tolerable")},
			num("tasks"), uint64(num("committed")), at)
		if err != nil {
			return "error: " + err.Error()
		}
		return ""
	case "tick":
		effs = l.Tick(at)
	case "ack":
		effs = l.Ack(id, num("task"))
	case "task-failed":
		effs = l.TaskFailed(id, at)
	case "meta-durable":
		effs = l.MetadataDurable(id)
	case "meta-failed":
		effs = l.MetadataFailed(id, at)
	case "commit-done":
		effs = l.CommitDone(id, at)
	case "commit-failed":
		effs = l.CommitFailed(id)
	case "stop":
		effs = l.Stop(at)
	case "state":
		cur, ok := l.InFlight()
		return fmt.Sprintf("committed=%d inflight=%v/%d", l.Committed(), ok, cur)
	default:
		t.Fatalf("unknown command %q", line)
	}
	s := make([]string, len(effs))
	for i, e := range effs {
		s[i] = e.String()
	}
	return strings.Join(s, "\n")
}

func TestConfigValidate(t *testing.T) {
	require.NoError(t, Config{}.Validate())
	require.Error(t, Config{Interval: time.Microsecond}.Validate())
	require.Error(t, Config{Timeout: time.Millisecond}.Validate())
	require.Error(t, Config{MinPause: -1}.Validate())
	require.Error(t, Config{TolerableFailures: -1}.Validate())
	_, err := New(Config{}, 0, 0, time.Now())
	require.Error(t, err)
}
