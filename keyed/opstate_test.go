//go:build kordfailpoints

package keyed_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kordproject/kord/internal/failpoint"
	"github.com/kordproject/kord/keyed"
	"github.com/kordproject/kord/keyed/connector"
	"github.com/kordproject/kord/vfs"
	"github.com/kordproject/kord/vfs/errorfs"
)

// posSource is a MemorySource whose readers keep operator state: their
// positions (partition, next offset), as a reader of a system without
// replayable offsets would have to. Restore checks that the elements are
// exactly the restored checkpoint's offsets: taken at the same barrier and
// given back in full at any parallelism.
type posSource struct {
	*keyed.MemorySource[event]
	mu        sync.Mutex
	restores  [][]connector.Position // what each RestoreState received, decoded
	committed func() int             // results committed (one per event read)
	mismatch  []string
}

func (s *posSource) Reader(ctx context.Context) (connector.Reader[event], error) {
	r, err := s.MemorySource.Reader(ctx)
	return &posReader{Reader: r, s: s, pos: map[int32]int64{}}, err
}

type posReader struct {
	connector.Reader[event]
	s   *posSource
	pos map[int32]int64
}

func (r *posReader) Assign(ctx context.Context, ps []connector.Position) error {
	for _, p := range ps {
		r.pos[p.Partition] = p.Offset
	}
	return r.Reader.Assign(ctx, ps)
}

func (r *posReader) Poll(ctx context.Context, max int, wait time.Duration) ([]connector.SourceRecord[event], bool, error) {
	recs, done, err := r.Reader.Poll(ctx, max, wait)
	for _, rec := range recs {
		r.pos[rec.Partition] = rec.Offset + 1
	}
	return recs, done, err
}

func (r *posReader) SnapshotState(uint64) ([][]byte, error) {
	var out [][]byte
	for p, o := range r.pos {
		out = append(out, binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint32(nil, uint32(p)), uint64(o)))
	}
	return out, nil
}

func (r *posReader) RestoreState(elems [][]byte) error {
	var ps []connector.Position
	for _, e := range elems {
		if len(e) != 12 {
			return fmt.Errorf("element of %d bytes", len(e))
		}
		ps = append(ps, connector.Position{Partition: int32(binary.BigEndian.Uint32(e)), Offset: int64(binary.BigEndian.Uint64(e[4:]))})
	}
	var sum int64
	for _, p := range ps {
		sum += p.Offset
	}
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	r.s.restores = append(r.s.restores, ps)
	// One result per event: the restored positions cover exactly the
	// events whose results the restored checkpoint committed.
	if got := r.s.committed(); int64(got) != sum {
		r.s.mismatch = append(r.s.mismatch, fmt.Sprintf("positions cover %d events, %d results committed", sum, got))
	}
	return nil
}

// countSink is a MemorySink whose operator state is how many records were
// written before the barrier; restored, it must equal the committed
// output's length.
type countSink struct {
	*keyed.MemorySink[result]
	written  int64
	restored []int64
	mismatch []string
}

func (s *countSink) Write(ctx context.Context, epoch uint64, v result) error {
	s.written++
	return s.MemorySink.Write(ctx, epoch, v)
}

func (s *countSink) SnapshotState(uint64) ([][]byte, error) {
	return [][]byte{binary.BigEndian.AppendUint64(nil, uint64(s.written))}, nil
}

func (s *countSink) RestoreState(elems [][]byte) error {
	if len(elems) != 1 {
		return fmt.Errorf("%d elements, want 1", len(elems))
	}
	s.written = int64(binary.BigEndian.Uint64(elems[0]))
	s.restored = append(s.restored, s.written)
	if got := int64(len(s.Committed())); got != s.written {
		s.mismatch = append(s.mismatch, fmt.Sprintf("restored count %d, committed output %d", s.written, got))
	}
	return nil
}

// TestOperatorState: a source's readers and the sink keep operator state
// across crashes at checkpoint steps and rescaling 2 -> 3 -> 1: each
// restore gives every reader the restored checkpoint's positions in full,
// and the sink its count as of that checkpoint.
func TestOperatorState(t *testing.T) {
	mem, want := inputOf(7, 6, 200, 30_000, false)
	src := &posSource{MemorySource: mem}
	sink := &countSink{MemorySink: keyed.NewMemorySink[result]()}
	src.committed = func() int { return len(sink.Committed()) }
	fs := vfs.NewMem()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	runs := []struct {
		p    int
		hook failpoint.Hook
	}{{2, crashAt(failpoint.AfterCommit, 2)}, {3, crashAt(failpoint.AfterSnapshots, 2)}, {3, crashAt(failpoint.BeforeCommit, 3)}, {1, nil}}
	total := 0
	for _, n := range want {
		total += int(n)
	}
	for _, r := range runs {
		j := keyed.NewJob("users", keyed.FS(fs), keyed.Dir("/c"), keyed.CheckpointInterval(5*time.Millisecond))
		s := keyed.FromSource(j, "events", r.p, connector.Source[event](src))
		k := keyed.KeyBy("uuid", func(e event) []byte { return []byte(e.UUID) }, s)
		keyed.ToSink(keyed.Process(k, "count", r.p, func() keyed.Operator[event, result] { return &counter{} }), "results", connector.Sink[result](sink))
		require.NoError(t, j.Validate())
		if r.hook != nil {
			require.ErrorIs(t, j.Run(failpoint.WithHook(ctx, r.hook)), failpoint.ErrCrashed)
			continue
		}
		runUntil(t, j, sink.MemorySink, total)
	}
	checkOutput(t, sink.Committed(), want)
	require.Empty(t, sink.mismatch)
	require.Len(t, sink.restored, 3, "one sink restore per restart")

	// Every reader of a restored run got the same union, and it has one
	// position per partition.
	require.NotEmpty(t, src.restores)
	require.Empty(t, src.mismatch)
	for _, ps := range src.restores {
		parts := make([]int32, len(ps))
		for i, p := range ps {
			parts[i] = p.Partition
		}
		slices.Sort(parts)
		require.Equal(t, []int32{0, 1, 2, 3, 4, 5}, parts, "every partition's position, once")
	}
	require.Len(t, src.restores, 3+3+1, "each reader of each restored run (3, 3 and 1 readers)")
}

// TestDistinctNames: sources, the operator and the sink name their state
// files, so a job that gives two of them one name is refused.
func TestDistinctNames(t *testing.T) {
	j := keyed.NewJob("users", keyed.Dir("/c"))
	s := keyed.FromSource(j, "count", 1, connector.Source[event](keyed.NewMemorySource[event]("events", 1, true)))
	keyed.ToSink(keyed.Process(keyed.ByPartition(s), "count", 1, func() keyed.Operator[event, result] { return &counter{} }), "results", connector.Sink[result](keyed.NewMemorySink[result]()))
	require.ErrorContains(t, j.Validate(), `two parts of the job are named "count"`)
}

// TestOperatorStateWriteDeclines: the checkpoint storage failing to keep a
// source's or the sink's operator-state file declines that checkpoint, as
// a keyed state file's failure does, within TolerableFailures; the run
// goes on without a restart (none is allowed here), and the next
// checkpoint carries the state. A restore of the last checkpoint then
// gives the readers and the sink exactly what the committed output
// covers.
func TestOperatorStateWriteDeclines(t *testing.T) {
	mem, want := inputOf(7, 4, 200, 20_000, false)
	src := &posSource{MemorySource: mem}
	sink := &countSink{MemorySink: keyed.NewMemorySink[result]()}
	src.committed = func() int { return len(sink.Committed()) }
	var mu sync.Mutex
	failed := map[string]int{}
	fs := errorfs.New(vfs.NewMem(), func(op errorfs.Op, name string) error {
		mu.Lock()
		defer mu.Unlock()
		for _, who := range []string{"events.operator-state", "results.operator-state"} {
			if op == errorfs.OpCreate && strings.Contains(name, who) && failed[who] < 3 {
				failed[who]++
				return errorfs.ErrInjected
			}
		}
		return nil
	})
	total := 0
	for _, n := range want {
		total += int(n)
	}
	for range 2 {
		j := keyed.NewJob("users", keyed.FS(fs), keyed.Dir("/c"), keyed.CheckpointInterval(5*time.Millisecond), keyed.TolerableFailures(10))
		s := keyed.FromSource(j, "events", 2, connector.Source[event](src))
		k := keyed.KeyBy("uuid", func(e event) []byte { return []byte(e.UUID) }, s)
		keyed.ToSink(keyed.Process(k, "count", 2, func() keyed.Operator[event, result] { return &counter{} }), "results", connector.Sink[result](sink))
		runUntil(t, j, sink.MemorySink, total)
	}
	require.Equal(t, map[string]int{"events.operator-state": 3, "results.operator-state": 3}, failed, "every injected failure was met")
	checkOutput(t, sink.Committed(), want)
	require.Empty(t, sink.mismatch)
	require.Empty(t, src.mismatch)
	require.Len(t, sink.restored, 1)
	require.Len(t, src.restores, 2, "each reader of the second run")
}
