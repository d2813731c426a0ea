package keyed_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kordproject/kord/keyed"
	"github.com/kordproject/kord/vfs"
)

// TestInstanceNeedsMembership: keyed.Instance makes the job one of several
// processes, whose partitions its sink assigns; a sink that cannot
// (connector.Membership) is refused before the job runs, naming it,
// instead of every process reading every partition.
func TestInstanceNeedsMembership(t *testing.T) {
	src := keyed.NewMemorySource[string]("in", 2, true)
	src.Append(0, []byte("k"), "v")
	build := func(opts ...keyed.Opt) *keyed.Job {
		j := keyed.NewJob("scaled", append(opts, keyed.FS(vfs.NewMem()), keyed.Dir("/c"))...)
		s := keyed.FromSource(j, "in", 1, src)
		out := keyed.ProcessFunc(keyed.ByPartition(s), "copy", 1, func(_ []byte, v string, out *keyed.Collector[string]) error {
			out.Emit(v)
			return nil
		})
		keyed.ToSink(out, "out", keyed.NewMemorySink[string]())
		return j
	}
	require.NoError(t, build().Validate())
	j := build(keyed.Instance("pod-0"))
	err := j.Validate()
	require.ErrorContains(t, err, `sink "out": Instance makes the job one of several processes, and its sink (*keyed.MemorySink[string]) cannot assign their partitions`)
	require.ErrorContains(t, j.Run(context.Background()), "cannot assign their partitions")
}
