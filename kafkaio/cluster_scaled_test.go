//go:build kordfailpoints

package kafkaio_test

import (
	"math/rand/v2"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kordproject/kord/internal/rig/kafkatest"
	"github.com/kordproject/kord/kafkaio"
)

// TestClusterScaledFaults: one job on three processes, on three brokers,
// input arriving, and in one run: processes SIGKILLed at random and
// restarted, one SIGSTOPped past its session timeout while the others go
// on (its partitions move, a survivor fences it; continued, it comes
// back), and the commit group's coordinator restarted (stopped, then
// resumed) while that happens, with another process killed meanwhile. At
// the end every running process commits again, and the independent
// read_committed check finds every result exactly once, in order, with
// counts that continue.
func TestClusterScaledFaults(t *testing.T) {
	th := kafkatest.ThreeBrokers(t)
	f := newFixture(t, th.Cluster, 6, 300)
	f.fill(1000)
	prodErr := f.produceInBackground(24000, 300, 4*time.Minute)
	const session = 6 * time.Second
	r := rand.New(rand.NewPCG(30, 4))
	ps := f.procs(session)
	// A process whose broker calls fail for longer than they wait (a
	// coordinator moving, its transaction's abort not yet complete) fails
	// its run; a deployment would restart it, the job's strategy does.
	ps.env = []string{"KORD_JOB_RESTARTS=10"}
	ids := []string{"p0", "p1", "p2"}
	ps.start(ids...)
	ps.waitCommits(2, "every process commits")
	pausedID := "" // killRestart leaves it alone
	killRestart := func(what string) {
		victim := ids[r.IntN(len(ids))]
		for victim == pausedID {
			victim = ids[r.IntN(len(ids))]
		}
		ps.kill(victim)
		ps.start(victim)
		t.Logf("%s: SIGKILLed and restarted %s", what, victim)
	}
	for i := 0; i < 3; i++ {
		killRestart("before the pause")
		ps.waitCommits(1, "after a kill", "p0", "p1")
	}

	// p2 stops past its session timeout; meanwhile the commit group's
	// coordinator is restarted and another process is killed.
	zombie, pausedID := ps.get("p2"), "p2"
	zombie.Stop(t)
	stopped := time.Now()
	t.Logf("SIGSTOPped p2")
	coord := th.GroupCoordinator(kafkaio.CommitGroup(f.name))
	th.Stop(coord)
	t.Logf("stopped broker %d, the commit group's coordinator", coord)
	killRestart("with the coordinator down")
	time.Sleep(3 * time.Second)
	th.Resume(coord)
	t.Logf("resumed broker %d after %v", coord, time.Since(stopped).Round(time.Millisecond))
	if wait := session + 3*time.Second - time.Since(stopped); wait > 0 {
		time.Sleep(wait)
	}
	require.NoError(t, zombie.Cmd.Process.Signal(syscall.SIGCONT))
	t.Logf("SIGCONTinued p2 after %v", time.Since(stopped).Round(time.Millisecond))
	pausedID = ""
	killRestart("after the pause")
	ps.waitCommits(2, "every process commits after the faults")

	require.NoError(t, <-prodErr)
	recs := f.c.ReadAll(t, f.out, f.expected(), true, 3*time.Minute)
	ps.stopAll()
	require.Equal(t, f.expected(), len(recs), "%s", ps.logs())
	f.verify()
}
