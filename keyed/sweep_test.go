//go:build kordfailpoints

package keyed_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kordproject/kord/checkpoint"
	"github.com/kordproject/kord/internal/failpoint"
	"github.com/kordproject/kord/keyed"
	"github.com/kordproject/kord/keyed/connector"
	"github.com/kordproject/kord/vfs"
)

// TestSweepOtherRuns: a job on shared storage, as one of several
// processes, crashes twice, leaving two earlier runs' checkpoints behind.
// With retention's age at zero, the runs after them delete every earlier
// run's checkpoint that no partition's record names; with the default age
// (longer than the transaction timeout) none goes. The output stays
// exactly-once either way.
func TestSweepOtherRuns(t *testing.T) {
	for _, sweep := range []bool{true, false} {
		t.Run(map[bool]string{true: "age 0", false: "default age"}[sweep], func(t *testing.T) {
			if sweep {
				defer keyed.SetSweepAge(0)()
			}
			src, want := input(5, 4, 40, 30_000)
			sink := newMemberSink[result]("events", 4)
			mem := vfs.NewMem()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			runs := map[string]bool{}
			for incarnation := 0; ; incarnation++ {
				require.Less(t, incarnation, 5)
				rctx := ctx
				if incarnation < 2 {
					// The first commit of the run: a later one may not come
					// before the input ends (30,000 events take tens of
					// milliseconds without the race detector).
					rctx = failpoint.WithHook(ctx, crashAt(failpoint.AfterCommit, 1))
				}
				j := keyed.NewJob("users", keyed.Instance("p0"), keyed.FS(mem), keyed.Dir("/shared"), keyed.CheckpointInterval(2*time.Millisecond), keyed.BatchSize(16))
				s := keyed.FromSource(j, "events", 2, connector.Source[event](src))
				out := keyed.Process(keyed.ByPartition(s), "count", 2, func() keyed.Operator[event, result] { return &counter{} })
				keyed.ToSink(out, "results", connector.Sink[result](sink))
				err := j.Run(rctx)
				st, oerr := checkpoint.OpenSharedStore(mem, "/shared")
				require.NoError(t, oerr)
				refs, lerr := checkpoint.ListCheckpoints(t.Context(), st)
				require.NoError(t, lerr)
				for _, r := range refs {
					runs[r.Run] = true
				}
				if errors.Is(err, failpoint.ErrCrashed) {
					continue
				}
				require.NoError(t, err)
				named := sink.named()
				var others []checkpoint.Ref
				last := refs[len(refs)-1].Run
				for _, r := range refs {
					if r.Run != last && !named[r] {
						others = append(others, r)
					}
				}
				t.Logf("runs seen: %d; checkpoints left: %v; named: %v", len(runs), refs, named)
				require.GreaterOrEqual(t, len(runs), 3, "two crashed runs and the last")
				if sweep {
					require.Empty(t, others, "earlier runs' checkpoints no record names are deleted")
				} else {
					require.NotEmpty(t, others, "young checkpoints of earlier runs stay")
				}
				break
			}
			checkOutput(t, sink.Committed(), want)
		})
	}
}
