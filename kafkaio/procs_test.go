//go:build kordfailpoints

package kafkaio_test

import (
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kordproject/kord/internal/rig/crashtest"
)

// procs are processes of the fixture's job (startChild: SIGKILL-able
// children of the test binary), by instance id, with every incarnation
// kept for the logs.
type procs struct {
	t       *testing.T
	f       *fixture
	session time.Duration
	env     []string // the children's environment beside startChild's
	running map[string]*crashtest.Child
	all     []*crashtest.Child
}

func (f *fixture) procs(session time.Duration) *procs {
	return &procs{t: f.t, f: f, session: session, running: map[string]*crashtest.Child{}}
}

// start starts instance ids.
func (ps *procs) start(ids ...string) {
	for _, id := range ids {
		ps.running[id] = ps.f.startChild(id, ps.session, ps.env...)
		ps.all = append(ps.all, ps.running[id])
	}
}

// get is the running process id.
func (ps *procs) get(id string) *crashtest.Child { return ps.running[id] }

// ids are the running instances, sorted.
func (ps *procs) ids() []string {
	out := make([]string, 0, len(ps.running))
	for id := range ps.running {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}

// logs is the stderr of the last six incarnations.
func (ps *procs) logs() string {
	var b strings.Builder
	from := max(0, len(ps.all)-6)
	for i, k := range ps.all[from:] {
		fmt.Fprintf(&b, "--- incarnation %d stderr:\n%s", from+i, k.Stderr)
	}
	return b.String()
}

// commits is how many commits process id reported.
func (ps *procs) commits(id string) int {
	return strings.Count(ps.running[id].Stdout.String(), "committed")
}

// waitCommits waits until every running process (or only those of ids)
// has committed n more times than now.
func (ps *procs) waitCommits(n int, what string, ids ...string) {
	ps.t.Helper()
	if len(ids) == 0 {
		ids = ps.ids()
	}
	before := map[string]int{}
	for _, id := range ids {
		before[id] = ps.commits(id)
	}
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(20 * time.Millisecond) {
		done := true
		for _, id := range ids {
			done = done && ps.commits(id) >= before[id]+n
		}
		if done {
			return
		}
		if time.Now().After(deadline) {
			require.FailNow(ps.t, fmt.Sprintf("%s: %v did not commit %d times within 2 minutes", what, ids, n), ps.logs())
		}
	}
}

// stop stops process id with SIGTERM and requires a clean exit.
func (ps *procs) stop(id string) {
	ps.t.Helper()
	c := ps.running[id]
	require.NoError(ps.t, terminate(c), "%s ended before it was stopped; its stdout:\n%s\nits stderr:\n%s", id, c.Stdout, c.Stderr)
	ps.exited(id)
}

// stopAll stops every running process with SIGTERM, all at once, and
// requires clean exits.
func (ps *procs) stopAll() {
	ps.t.Helper()
	ids := ps.ids()
	for _, id := range ids {
		c := ps.running[id]
		require.NoError(ps.t, terminate(c), "%s ended before it was stopped; its stdout:\n%s\nits stderr:\n%s", id, c.Stdout, c.Stderr)
	}
	for _, id := range ids {
		ps.exited(id)
	}
}

// exited waits for process id to exit cleanly after SIGTERM.
func (ps *procs) exited(id string) {
	ps.t.Helper()
	signaled, err := ps.running[id].Wait(time.Minute, true)
	require.False(ps.t, signaled, "%s did not stop on SIGTERM\n%s", id, ps.logs())
	require.NoError(ps.t, err, "%s\n%s", id, ps.logs())
	delete(ps.running, id)
}

// kill kills process id with SIGKILL.
func (ps *procs) kill(id string) {
	ps.t.Helper()
	require.NoError(ps.t, ps.running[id].Cmd.Process.Signal(syscall.SIGKILL))
	signaled, _ := ps.running[id].Wait(time.Minute, true)
	require.True(ps.t, signaled, "%s did not die of SIGKILL", id)
	delete(ps.running, id)
}
