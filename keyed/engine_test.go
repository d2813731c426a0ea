package keyed_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kordproject/kord/internal/rig/testjob"
	"github.com/kordproject/kord/keyed"
	"github.com/kordproject/kord/keyed/connector"
	"github.com/kordproject/kord/partitioner"
	"github.com/kordproject/kord/vfs"
)

// The counting job the tests run (internal/rig/testjob).
type (
	event   = testjob.Event
	result  = testjob.Result
	counter = testjob.Counter
)

// input fills a bounded memory source with n events over keys uuids,
// each key on its Java-exact partition, numbered per key.
func input(seed uint64, partitions, keys, n int) (*keyed.MemorySource[event], map[string]int64) {
	return inputOf(seed, partitions, keys, n, true)
}

// inputOf is input, bounded or not.
func inputOf(seed uint64, partitions, keys, n int, bounded bool) (*keyed.MemorySource[event], map[string]int64) {
	r := rand.New(rand.NewPCG(seed, 99))
	src := keyed.NewMemorySource[event]("events", partitions, bounded)
	uuids := make([]string, keys)
	for i := range uuids {
		uuids[i] = fmt.Sprintf("%08x-%04x-4%03x-a%03x-%012x", r.Uint32(), r.Uint32()&0xffff, r.Uint32()&0xfff, r.Uint32()&0xfff, r.Uint64()&0xffffffffffff)
	}
	seq := map[string]int64{}
	for i := 0; i < n; i++ {
		u := uuids[r.IntN(keys)]
		src.Append(partitioner.KeyPartition([]byte(u), partitions), []byte(u), event{UUID: u, Seq: seq[u]})
		seq[u]++
	}
	return src, seq
}

// checkOutput asserts each key's committed results are exactly its events
// in order, with counts that match.
func checkOutput(t testing.TB, out []result, want map[string]int64) {
	t.Helper()
	next := map[string]int64{}
	for _, r := range out {
		if r.Seq != next[r.UUID] {
			t.Fatalf("key %s: committed result for seq %d, want %d (duplicate, loss or reorder)", r.UUID, r.Seq, next[r.UUID])
		}
		if r.Count != r.Seq+1 {
			t.Fatalf("key %s seq %d: count %d", r.UUID, r.Seq, r.Count)
		}
		next[r.UUID] = r.Seq + 1
	}
	for k, n := range want {
		if next[k] != n {
			t.Fatalf("key %s: %d results committed, want %d", k, next[k], n)
		}
	}
	require.Len(t, next, len(want))
}

func newJob(t testing.TB, opts []keyed.Opt, src *keyed.MemorySource[event], sink *keyed.MemorySink[result], byPartition bool, srcP, opP int) *keyed.Job {
	j := keyed.NewJob("users", opts...)
	s := keyed.FromSource(j, "events", srcP, connector.Source[event](src))
	var k *keyed.KeyedStream[[]byte, event]
	if byPartition {
		k = keyed.ByPartition(s)
	} else {
		k = keyed.KeyBy("uuid", func(e event) []byte { return []byte(e.UUID) }, s)
	}
	out := keyed.Process(k, "count", opP, func() keyed.Operator[event, result] { return &counter{} })
	keyed.ToSink(out, "results", connector.Sink[result](sink))
	require.NoError(t, j.Validate())
	return j
}

func TestRunBounded(t *testing.T) {
	for _, byPartition := range []bool{false, true} {
		t.Run(fmt.Sprintf("byPartition=%v", byPartition), func(t *testing.T) {
			src, want := input(1, 6, 300, 20_000)
			sink := keyed.NewMemorySink[result]()
			fs := vfs.NewMem()
			j := newJob(t, []keyed.Opt{keyed.FS(fs), keyed.Dir("/ckpt"), keyed.CheckpointInterval(20 * time.Millisecond)}, src, sink, byPartition, 3, 2)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			require.NoError(t, j.Run(ctx))
			checkOutput(t, sink.Committed(), want)
			require.Greater(t, sink.Commits(), 1)
		})
	}
}
