package keyed_test

import (
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kordproject/kord/keyed"
	"github.com/kordproject/kord/keyed/connector"
	"github.com/kordproject/kord/serde"
	"github.com/kordproject/kord/vfs"
)

// The pipeline model test: random pipelines of keyed stages, chained
// MapValues, Filter and FlatMapValues, fan-out and Union, and in half of
// them side outputs of every keyed stage unioned into a second sink that
// commits with the first (MemoryOutput), run with a
// failure and a restore at other parallelisms, checked against a model
// that runs the same functions in memory.
//
// What the model checks:
//   - the committed output is the model's multiset of records, each named
//     by its event and the path it took (no loss, no duplicate); so is the
//     side sink's;
//   - stage one sees each user's events in order (its operator fails the
//     job otherwise);
//   - each keyed stage numbers each key's records 1, 2, ... in its state:
//     the numbers a key's records carry out are distinct and within the
//     records the model sends that key (a replay over restored state, or
//     state lost, repeats or exceeds them). The order between records of
//     one key from different upstream tasks is not defined, so the
//     numbers are compared as a set.
//
// KORD_MODEL_SEEDS sets how many seeds run (default 24; the long mode is
// KORD_MODEL_SEEDS=1000).

// item is a record past stage one.
type item struct {
	UUID   string
	Seq    int64
	Path   string // the chained functions, copies and branches it went through
	Key    string // what the next keyed stage keys by
	Counts string // "stage/key=n@id;" per keyed stage passed: the number it got there, and its id then
}

func (it item) id() string { return fmt.Sprintf("%s/%d/%s", it.UUID, it.Seq, it.Path) }

func hashOf(parts ...string) uint64 {
	h := fnv.New64a()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return h.Sum64()
}

// chainStep is one chained function of a branch.
type chainStep struct {
	kind byte // 'm' map (new key), 'f' filter, 'x' flatMap (0 to 2 copies)
	salt string
}

func (c chainStep) apply(it item, emit func(item)) {
	h := hashOf(it.id(), c.salt)
	switch c.kind {
	case 'm':
		it.Key = strconv.FormatUint(h%7, 10)
		it.Path += "m"
		emit(it)
	case 'f':
		if h%4 != 0 {
			it.Path += "f"
			emit(it)
		}
	case 'x':
		for k := range h % 3 {
			c := it
			c.Path += "x" + strconv.FormatUint(k, 10)
			emit(c)
		}
	}
}

// branch is a chain of functions, then a keyed stage.
type branch struct {
	chain []chainStep
	stage string
	mark  string // added to Path when a level has two branches
}

// level is one or two branches, unioned after when two.
type level []branch

func randomPipeline(r *rand.Rand) []level {
	var levels []level
	n := 0
	for l := range 1 + r.IntN(3) {
		ways := 1 + r.IntN(2)
		var lv level
		for b := range ways {
			var chain []chainStep
			for c := range r.IntN(3) {
				chain = append(chain, chainStep{kind: "mfx"[r.IntN(3)], salt: fmt.Sprintf("%d.%d.%d", l, b, c)})
			}
			mark := ""
			if ways > 1 {
				mark = "b" + strconv.Itoa(b)
			}
			n++
			lv = append(lv, branch{chain: chain, stage: "s" + strconv.Itoa(n), mark: mark})
		}
		levels = append(levels, lv)
	}
	return levels
}

// sideOf says whether stage sends a copy of it to the side output.
func sideOf(it item, stage string) bool { return hashOf(it.id(), stage, "side")%5 == 0 }

// modelOf runs the pipeline's functions over stage one's output: the
// output's ids, how many records each (stage, key) receives, and (with
// sides) the side output's ids.
func modelOf(levels []level, first []item, sides bool) (map[string]int, map[string]int, map[string]int) {
	in, side := map[string]int{}, map[string]int{}
	cur := first
	for _, lv := range levels {
		var next []item
		for _, b := range lv {
			for _, it := range cur {
				it.Path += b.mark
				items := []item{it}
				for _, c := range b.chain {
					var out []item
					for _, x := range items {
						c.apply(x, func(y item) { out = append(out, y) })
					}
					items = out
				}
				for _, x := range items {
					in[b.stage+"/"+x.Key]++
					next = append(next, x)
					if sides && sideOf(x, b.stage) {
						side[x.id()+"~"+b.stage]++
					}
				}
			}
		}
		cur = next
	}
	ids := map[string]int{}
	for _, it := range cur {
		ids[it.id()]++
	}
	return ids, in, side
}

// numberStage is a keyed stage of the model: it numbers each key's records.
// With a side output, the copies sideOf picks go there too, their path
// marked with the stage.
func numberStage(stage string, side *keyed.SideOutput[item]) func(key string, it item, n *keyed.ValueState[int64], out *keyed.Collector[item]) error {
	return func(key string, it item, n *keyed.ValueState[int64], out *keyed.Collector[item]) error {
		c, _ := n.Get()
		c++
		n.Set(c)
		id := it.id()
		it.Counts += fmt.Sprintf("%s/%s=%d@%s;", stage, key, c, id)
		out.Emit(it)
		if side != nil && sideOf(it, stage) {
			it.Path += "~" + stage
			keyed.EmitSide(out, side, it)
		}
		return nil
	}
}

// buildPipeline declares the pipeline on j, with parallelisms from par.
// With sideSink, every keyed stage's side output goes there.
func buildPipeline(j *keyed.Job, src connector.Source[event], levels []level, par func() int, sink, sideSink *keyed.MemorySink[item]) {
	var tag *keyed.SideOutput[item]
	var sides []*keyed.Stream[item]
	if sideSink != nil {
		tag = keyed.NewSideOutput[item]("copies")
	}
	events := keyed.FromSource(j, "events", par(), src)
	first := keyed.ProcessValue(keyed.ByPartition(events), "users", par(), serde.Int64(),
		func(_ []byte, e event, n *keyed.ValueState[int64], out *keyed.Collector[item]) error {
			c, _ := n.Get()
			if e.Seq != c {
				return fmt.Errorf("user %s: seq %d after %d events: out of order", e.UUID, e.Seq, c)
			}
			n.Set(c + 1)
			out.Emit(item{UUID: e.UUID, Seq: e.Seq, Key: e.UUID})
			return nil
		})
	cur := first
	for _, lv := range levels {
		var outs []*keyed.Stream[item]
		for _, b := range lv {
			s := cur
			if b.mark != "" {
				mark := b.mark
				s = keyed.MapValues(s, func(it item) item { it.Path += mark; return it })
			}
			for _, c := range b.chain {
				c := c
				s = keyed.FlatMapValues(s, func(it item, emit func(item)) { c.apply(it, emit) })
			}
			k := keyed.KeyByString("key", func(it item) string { return it.Key }, s)
			st := keyed.ProcessValue(k, b.stage, par(), serde.Int64(), numberStage(b.stage, tag))
			outs = append(outs, st)
			if tag != nil {
				sides = append(sides, keyed.Side(st, tag))
			}
		}
		cur = outs[0]
		if len(outs) > 1 {
			cur = keyed.Union(outs...)
		}
	}
	keyed.ToSink(cur, "out", connector.Sink[item](sink))
	if tag != nil {
		keyed.ToSink(keyed.Union(sides...), "side", connector.Sink[item](sideSink))
	}
}

func TestPipelineModel(t *testing.T) {
	seeds := 24
	if s := os.Getenv("KORD_MODEL_SEEDS"); s != "" {
		n, err := strconv.Atoi(s)
		require.NoError(t, err)
		seeds = n
	}
	for seed := range uint64(seeds) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { pipelineModel(t, seed) })
	}
}

func pipelineModel(t *testing.T, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 27))
	levels := randomPipeline(r)
	withSides := r.IntN(2) == 0
	src, want := input(seed+100, 4, 30, 1_500)
	var first []item
	// Stage one's output, in any order: the model needs only the set.
	for u, n := range want {
		for seq := range n {
			first = append(first, item{UUID: u, Seq: seq, Key: u})
		}
	}
	wantIDs, wantIn, wantSide := modelOf(levels, first, withSides)

	// Run one fails after checkpoint failAt commits, with no restart; run
	// two restores it at other parallelisms and finishes. Within run two
	// a failure and restart come too.
	fs := vfs.NewMem()
	failAt := 1 + r.Uint64N(3)
	// One sink for both runs: it holds what the last run committed, as a
	// Kafka topic and its commit group would.
	sink := keyed.NewMemorySink[item]()
	var sideSink *keyed.MemorySink[item]
	if withSides {
		sideSink = keyed.MemoryOutput[item](sink)
	}
	var desc []string
	for run := range 2 {
		par := func() int { return 1 + r.IntN(3) }
		opts := []keyed.Opt{keyed.FS(fs), keyed.Dir("/ckpt"), keyed.CheckpointInterval(2 * time.Millisecond), keyed.BatchSize(8)}
		if run == 0 {
			fail, _ := failOnce(failAt)
			opts = append(opts, fail, keyed.RestartStrategy(keyed.FixedDelay(0, 0)))
		} else {
			f2, _ := failOnce(failAt + 2)
			opts = append(opts, f2, keyed.RestartStrategy(keyed.FixedDelay(1, time.Millisecond)))
		}
		j := keyed.NewJob("model", opts...)
		buildPipeline(j, connector.Source[event](src), levels, par, sink, sideSink)
		require.NoError(t, j.Validate())
		err := runJob(t, j)
		desc = append(desc, fmt.Sprintf("run %d: %v", run, err))
		if run == 0 && err != nil && !strings.Contains(err.Error(), "on purpose") {
			t.Fatalf("run one: %v", err)
		}
		if run == 1 {
			require.NoError(t, err)
		}
	}
	got := map[string]int{}
	// Per stage and key: the record each number went to, and the number
	// each record got. Copies made downstream (fan-out, FlatMapValues)
	// carry the same pair.
	byNumber := map[string]map[int]string{}
	byID := map[string]map[string]int{}
	committed := sink.Committed()
	gotSide := map[string]int{}
	if sideSink != nil {
		for _, it := range sideSink.Committed() {
			gotSide[it.id()]++
		}
		// A side copy carries the numbers its stage and those before gave
		// it: they must agree with the main output's.
		committed = append(committed, sideSink.Committed()...)
	}
	for _, it := range committed {
		if !strings.Contains(it.Path, "~") {
			got[it.id()]++
		}
		for _, c := range strings.Split(strings.TrimSuffix(it.Counts, ";"), ";") {
			k, rest, _ := strings.Cut(c, "=")
			n, id, _ := strings.Cut(rest, "@")
			v, err := strconv.Atoi(n)
			require.NoError(t, err, "counts %q", it.Counts)
			if byNumber[k] == nil {
				byNumber[k], byID[k] = map[int]string{}, map[string]int{}
			}
			if prev, ok := byNumber[k][v]; ok && prev != id {
				t.Fatalf("%s: number %d went to %s and to %s: a replay over restored state, or state lost (pipeline %v, %v)", k, v, prev, id, levels, desc)
			}
			if prev, ok := byID[k][id]; ok && prev != v {
				t.Fatalf("%s: %s numbered %d and %d: processed twice (pipeline %v, %v)", k, id, prev, v, levels, desc)
			}
			byNumber[k][v], byID[k][id] = id, v
			require.LessOrEqual(t, v, wantIn[k], "%s: number %d, but %d records came (pipeline %v, %v)", k, v, wantIn[k], levels, desc)
		}
	}
	requireSame(t, "main output", got, wantIDs, levels, desc)
	requireSame(t, "side output", gotSide, wantSide, levels, desc)
}

func requireSame(t *testing.T, what string, got, want map[string]int, levels []level, desc []string) {
	t.Helper()
	if mapsEqual(got, want) {
		return
	}
	var missing, extra []string
	for id, n := range want {
		if got[id] < n {
			missing = append(missing, id)
		}
	}
	for id, n := range got {
		if want[id] < n {
			extra = append(extra, id)
		}
	}
	sort.Strings(missing)
	sort.Strings(extra)
	t.Fatalf("%s: pipeline %v (%v): %d missing (first %v), %d duplicated or unknown (first %v)", what, levels, desc, len(missing), first3(missing), len(extra), first3(extra))
}

func mapsEqual(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func first3(s []string) []string { return s[:min(3, len(s))] }
