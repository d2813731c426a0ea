package testing_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/kordproject/kord/keyed"
	"github.com/kordproject/kord/metrics"
	"github.com/kordproject/kord/serde"
	"github.com/kordproject/kord/vfs"
	"github.com/kordproject/kord/vfs/errorfs"
)

// snippet:job
// countJob declares a job that counts each user's clicks, from an
// in-memory source to an in-memory sink, its checkpoints on fs.
func countJob(fs vfs.FS, opts ...keyed.Opt) (*keyed.Job, *keyed.MemorySink[string]) {
	src := keyed.NewMemorySource[string]("clicks", 2, true) // bounded: Run returns at its end
	for i, user := range []string{"ana", "bo", "ana", "cy", "ana", "bo"} {
		src.Append(int32(i%2), []byte(user), "click") // partition, key, value
	}
	opts = append([]keyed.Opt{keyed.FS(fs), keyed.Dir("/ckpt"), keyed.CheckpointInterval(20 * time.Millisecond)}, opts...)
	job := keyed.NewJob("click-counts", opts...)
	clicks := keyed.FromSource[string](job, "clicks", 0, src)
	counts := keyed.ProcessValue(keyed.ByPartition(clicks), "count", 0, serde.Int64(),
		func(user []byte, _ string, n *keyed.ValueState[int64], out *keyed.Collector[string]) error {
			c, _ := n.Get()
			n.Set(c + 1)
			out.Emit(fmt.Sprintf("%s %d", user, c+1))
			return nil
		})
	sink := keyed.NewMemorySink[string]()
	keyed.ToSink[string](counts, "counts", sink)
	return job, sink
}

// snippet:end

// A full disk at a checkpoint: one fsync of the stage's state file fails
// with ENOSPC. Without TolerableFailures the run fails with that error;
// with one failure tolerated, the checkpoint aborts, and its output
// commits with the next one.
func Example_fullDisk() {
	ctx := context.Background()
	// snippet:errorfs
	var failed atomic.Bool
	fullOnce := func(op errorfs.Op, name string) error {
		if op == errorfs.OpSync && strings.Contains(name, "count.value") && failed.CompareAndSwap(false, true) {
			return syscall.ENOSPC
		}
		return nil
	}

	job, _ := countJob(errorfs.New(vfs.NewMem(), fullOnce))
	err := job.Run(ctx)
	fmt.Println("no failure tolerated: ENOSPC:", errors.Is(err, syscall.ENOSPC))

	failed.Store(false)
	job, sink := countJob(errorfs.New(vfs.NewMem(), fullOnce), keyed.TolerableFailures(1))
	err = job.Run(ctx)
	fmt.Println("one failure tolerated:", err)
	job.Collect(func(s metrics.Sample) {
		if s.Name == "kord_checkpoints_aborted_total" {
			fmt.Println("checkpoints aborted:", s.Value)
		}
	})
	out := sink.Committed()
	sort.Strings(out)
	fmt.Println(strings.Join(out, ", "))
	// snippet:end

	// Output:
	// no failure tolerated: ENOSPC: true
	// one failure tolerated: <nil>
	// checkpoints aborted: 1
	// ana 1, ana 2, ana 3, bo 1, bo 2, cy 1
}
