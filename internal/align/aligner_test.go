package align

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kordproject/kord/checkpoint"
	"github.com/kordproject/kord/internal/transcript"
)

// TestAlignerTranscripts runs the scripts in testdata, in the format
// of internal/lifecycle's transcripts: each case is a command, a "----" line, and
// the effects it must return, one per line. go test ./internal/align/ -run
// AlignerTranscripts -rewrite regenerates the expectations (review the
// diff).
//
// Commands: new mode=exactly-once|at-least-once inputs=N, barrier ID
// input=N at=D, record input=N, end input=N at=D, cancel ID at=D, state.
// Times are durations from an epoch.
func TestAlignerTranscripts(t *testing.T) {
	transcript.RunDir(t, func(t *testing.T) func(cmd string) string {
		var a *Aligner
		epoch := time.Unix(1_700_000_000, 0)
		return func(cmd string) string { return execAligner(t, &a, epoch, cmd) }
	})
}

func execAligner(t *testing.T, ap **Aligner, epoch time.Time, line string) string {
	c := transcript.Parse(t, line)
	id, args, num := c.ID, c.Args, c.Int
	at := epoch.Add(c.Duration("at"))
	a := *ap
	var effs []Effect
	switch c.Name {
	case "new":
		modes := map[string]checkpoint.Mode{"exactly-once": checkpoint.ExactlyOnce, "at-least-once": checkpoint.AtLeastOnce}
		var err error
		*ap, err = New(modes[args["mode"]], num("inputs"))
		if err != nil {
			return "error: " + err.Error()
		}
		return ""
	case "barrier":
		effs = a.Barrier(num("input"), id, at)
	case "record":
		effs = a.Record(num("input"))
	case "end":
		effs = a.EndOfInput(num("input"), at)
	case "cancel":
		effs = a.Cancel(id, at)
	case "state":
		return alignerState(a)
	default:
		t.Fatalf("unknown command %q", line)
	}
	s := make([]string, len(effs))
	for i, e := range effs {
		s[i] = e.String()
	}
	return strings.Join(s, "\n")
}

func alignerState(a *Aligner) string {
	list := func(f func(int) bool) string {
		var s []string
		for i := range a.Inputs() {
			if f(i) {
				s = append(s, strconv.Itoa(i))
			}
		}
		if len(s) == 0 {
			return "none"
		}
		return strings.Join(s, ",")
	}
	pending := "none"
	if id, ok := a.Pending(); ok {
		pending = strconv.FormatUint(id, 10)
	}
	return fmt.Sprintf("pending=%s blocked=%s finished=%s", pending, list(a.Blocked), list(a.Finished))
}

func TestNewAlignerRejects(t *testing.T) {
	_, err := New(0, 2)
	require.ErrorContains(t, err, "mode")
	_, err = New(checkpoint.Mode(3), 2)
	require.ErrorContains(t, err, "mode(3)")
	_, err = New(checkpoint.ExactlyOnce, 0)
	require.ErrorContains(t, err, "at least one input")
	a, err := New(checkpoint.AtLeastOnce, 2)
	require.NoError(t, err)
	require.Equal(t, checkpoint.AtLeastOnce, a.Mode())
	require.Equal(t, 2, a.Inputs())
	require.False(t, a.Blocked(-1))
	require.False(t, a.Blocked(2))
	require.False(t, a.Finished(7))
}

func TestAlignEffectErr(t *testing.T) {
	require.NoError(t, Effect{Kind: Snapshot, ID: 1}.Err())
	require.EqualError(t, Effect{Kind: Error, Input: 2, ID: 5, Reason: InputBlocked}.Err(),
		"align: rejected barrier 5 on input 2: input-blocked")
	require.EqualError(t, Effect{Kind: Error, Input: 9, Reason: BadInput}.Err(),
		"align: rejected event on input 9: bad-input")
	require.Equal(t, "align-kind(99)", Kind(99).String())
	require.Equal(t, "align-reason(99)", Reason(99).String())
	require.Equal(t, "exactly-once", checkpoint.ExactlyOnce.String())
}

// channelItem is one element of a simulated input channel.
type channelItem struct {
	kind    byte   // 'r' record, 'b' barrier, 'e' end-of-input
	id      uint64 // barrier id
	records int    // barrier: records before it on this channel
}

// TestAlignerSnapshotConsistency simulates FIFO input channels carrying
// records, barriers and end-of-input, and a processor that takes only from
// inputs the aligner does not block. In exactly-once mode every snapshot n
// must see exactly the records before barrier n on every input (DESIGN.md
// invariant 5 at operator level; an input without barrier n must have
// ended, and then all its records count); in at-least-once mode at least
// those. Every channel must drain: alignment never deadlocks. Inputs drop
// barriers (an upstream that skipped a checkpoint), end early, and the
// coordinator cancels checkpoints, so subsumption and cancellation are
// exercised too.
func TestAlignerSnapshotConsistency(t *testing.T) {
	for _, mode := range []checkpoint.Mode{checkpoint.ExactlyOnce, checkpoint.AtLeastOnce} {
		t.Run(mode.String(), func(t *testing.T) {
			for seed := range uint64(2000) {
				simulateChannels(t, mode, seed)
			}
		})
	}
}

func simulateChannels(t *testing.T, mode checkpoint.Mode, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	n := 1 + rng.IntN(5)
	checkpoints := 1 + rng.IntN(8)
	lossy := rng.IntN(3) == 0   // inputs may skip barriers
	cancels := rng.IntN(3) == 0 // the coordinator may cancel checkpoints
	chans := make([][]channelItem, n)
	total := 0
	for i := range chans {
		recs := 0
		last := checkpoints
		if rng.IntN(4) == 0 {
			last = rng.IntN(checkpoints + 1) // this input ends early
		}
		for c := 1; c <= last; c++ {
			for range rng.IntN(4) {
				chans[i] = append(chans[i], channelItem{kind: 'r'})
				recs++
			}
			if lossy && rng.IntN(4) == 0 {
				continue
			}
			chans[i] = append(chans[i], channelItem{kind: 'b', id: uint64(c), records: recs})
		}
		for range rng.IntN(4) {
			chans[i] = append(chans[i], channelItem{kind: 'r'})
			recs++
		}
		chans[i] = append(chans[i], channelItem{kind: 'e', records: recs})
		total += recs
	}
	// before[i][c] = records before barrier c on input i; absent when input i
	// carries no barrier c.
	before := make([]map[uint64]int, n)
	all := make([]int, n)
	for i, ch := range chans {
		before[i] = map[uint64]int{}
		for _, it := range ch {
			switch it.kind {
			case 'b':
				before[i][it.id] = it.records
			case 'e':
				all[i] = it.records
			}
		}
	}

	a, err := New(mode, n)
	require.NoError(t, err)
	processed := make([]int, n) // the operator's state: records processed per input
	heads := make([]int, n)
	now := time.Unix(0, 0)
	var snapshots []uint64
	allFinished := false
	apply := func(effs []Effect) {
		for _, e := range effs {
			require.NoError(t, e.Err(), "seed %d", seed)
			switch e.Kind {
			case Snapshot:
				require.True(t, len(snapshots) == 0 || e.ID > snapshots[len(snapshots)-1], "seed %d: snapshots out of order", seed)
				snapshots = append(snapshots, e.ID)
				for i := range n {
					want, ok := before[i][e.ID]
					if !ok {
						// No barrier e.ID on input i: it must have ended, and
						// carry no later barrier either.
						require.Equal(t, len(chans[i]), heads[i], "seed %d: snapshot %d before input %d ended", seed, e.ID, i)
						want = all[i]
					}
					if mode == checkpoint.ExactlyOnce {
						require.Equal(t, want, processed[i], "seed %d: snapshot %d input %d", seed, e.ID, i)
					} else {
						require.GreaterOrEqual(t, processed[i], want, "seed %d: snapshot %d input %d", seed, e.ID, i)
					}
				}
			case AllFinished:
				allFinished = true
			}
		}
	}
	for {
		var ready []int
		done := true
		for i := range n {
			if heads[i] < len(chans[i]) {
				done = false
				if !a.Blocked(i) {
					ready = append(ready, i)
				}
			}
		}
		if done {
			break
		}
		require.NotEmpty(t, ready, "seed %d: deadlock: every input with items left is blocked", seed)
		now = now.Add(time.Duration(rng.IntN(10)) * time.Millisecond)
		if cancels && rng.IntN(10) == 0 {
			apply(a.Cancel(uint64(1+rng.IntN(checkpoints)), now))
			continue
		}
		i := ready[rng.IntN(len(ready))]
		it := chans[i][heads[i]]
		heads[i]++
		switch it.kind {
		case 'r':
			apply(a.Record(i))
			processed[i]++
		case 'b':
			apply(a.Barrier(i, it.id, now))
		case 'e':
			apply(a.EndOfInput(i, now))
		}
	}
	require.Equal(t, all, processed, "seed %d", seed)
	require.True(t, allFinished, "seed %d", seed)
	_, pending := a.Pending()
	require.False(t, pending, "seed %d", seed)
	if !lossy && !cancels {
		// Every checkpoint some input carried completes, in order.
		var want []uint64
		for c := uint64(1); c <= uint64(checkpoints); c++ {
			for i := range n {
				if _, ok := before[i][c]; ok {
					want = append(want, c)
					break
				}
			}
		}
		if mode == checkpoint.AtLeastOnce {
			// A newer checkpoint completing at the same end-of-input
			// subsumes older ones; each snapshot is still one of them.
			require.Subset(t, want, snapshots, "seed %d", seed)
		} else {
			require.Equal(t, want, snapshots, "seed %d", seed)
		}
	}
	require.True(t, slices.IsSorted(snapshots), "seed %d", seed)
	require.Equal(t, total, sum(processed))
}

func sum(s []int) int {
	n := 0
	for _, v := range s {
		n += v
	}
	return n
}

// BenchmarkAlignerBarrier measures one full alignment round per iteration:
// barrier n on each input in turn, the last completing checkpoint n.
func BenchmarkAlignerBarrier(b *testing.B) {
	for _, mode := range []checkpoint.Mode{checkpoint.ExactlyOnce, checkpoint.AtLeastOnce} {
		for _, inputs := range []int{2, 8} {
			b.Run(fmt.Sprintf("%s/inputs=%d", mode, inputs), func(b *testing.B) {
				a, err := New(mode, inputs)
				require.NoError(b, err)
				now := time.Unix(0, 0)
				var id uint64
				b.ReportAllocs()
				for b.Loop() {
					id++
					for i := range inputs {
						if effs := a.Barrier(i, id, now); len(effs) > 0 && effs[0].Kind == Error {
							b.Fatal(effs[0].Err())
						}
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(id*uint64(inputs)), "ns/barrier")
			})
		}
	}
}

// BenchmarkAlignerRecord measures the per-record check, the true hot path.
func BenchmarkAlignerRecord(b *testing.B) {
	a, err := New(checkpoint.ExactlyOnce, 8)
	require.NoError(b, err)
	a.Barrier(3, 1, time.Unix(0, 0)) // one input blocked, a checkpoint pending
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if i++; i == 8 {
			i = 0
		}
		if i != 3 && a.Record(i) != nil {
			b.Fatal("record rejected")
		}
	}
}

func ExampleAligner() {
	a, _ := New(checkpoint.ExactlyOnce, 2)
	t0 := time.Unix(0, 0)
	show := func(effs []Effect) {
		for _, e := range effs {
			fmt.Println(e)
		}
	}
	// Barrier 1 on input 0: the runtime stops taking from input 0.
	show(a.Barrier(0, 1, t0))
	// Records still ahead of barrier 1 on input 1 are processed.
	show(a.Record(1))
	// Barrier 1 on input 1 completes the alignment: snapshot, then unblock.
	show(a.Barrier(1, 1, t0.Add(20*time.Millisecond)))
	// Output:
	// block 1 input=0
	// snapshot 1 align=20ms
	// unblock 1 input=0
}
