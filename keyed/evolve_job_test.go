package keyed_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kordproject/kord/keyed"
	"github.com/kordproject/kord/keyed/connector"
	"github.com/kordproject/kord/serde"
	"github.com/kordproject/kord/vfs"
)

// A profile's state, in two versions of its Avro schema: v2 promotes seen
// to long, drops note and adds tier with a default.
type profileV1 struct {
	Seen int32  `json:"seen"`
	Note string `json:"note"`
}

type profileV2 struct {
	Seen int64  `json:"seen"`
	Tier string `json:"tier"`
}

const (
	profileSchemaV1 = `{"type":"record","name":"Profile","fields":[{"name":"seen","type":"int"},{"name":"note","type":"string"}]}`
	profileSchemaV2 = `{"type":"record","name":"Profile","fields":[{"name":"seen","type":"long"},{"name":"tier","type":"string","default":"free"}]}`
)

// TestStateSchemaEvolutionJob: a job restarted with a new Avro schema for
// its state goes on from the state the old schema wrote.
func TestStateSchemaEvolutionJob(t *testing.T) {
	fs := vfs.NewMem()
	src := keyed.NewMemorySource[string]("names", 2, true)
	sink := keyed.NewMemorySink[string]()
	add := func(n int) {
		for i := range n {
			src.Append(int32(i%2), nil, fmt.Sprint("k", i%3))
		}
	}
	job := func(stage func(*keyed.KeyedStream[string, string]) *keyed.Stream[string]) *keyed.Job {
		j := keyed.NewJob("evolve", keyed.FS(fs), keyed.Dir("/ckpt"))
		names := keyed.FromSource(j, "names", 1, connector.Source[string](src))
		keyed.ToSink(stage(keyed.KeyByString("name", func(s string) string { return s }, names)), "out", connector.Sink[string](sink))
		require.NoError(t, j.Validate())
		return j
	}
	v1, err := serde.Avro[profileV1](profileSchemaV1)
	require.NoError(t, err)
	v2, err := serde.Avro[profileV2](profileSchemaV2)
	require.NoError(t, err)

	add(9) // three of each key
	require.NoError(t, runJob(t, job(func(k *keyed.KeyedStream[string, string]) *keyed.Stream[string] {
		return keyed.ProcessValue(k, "profiles", 1, v1, func(key, _ string, st *keyed.ValueState[profileV1], out *keyed.Collector[string]) error {
			p, _ := st.Get()
			p.Seen++
			p.Note = "v1"
			st.Set(p)
			return nil
		})
	})))
	add(3) // one more of each
	require.NoError(t, runJob(t, job(func(k *keyed.KeyedStream[string, string]) *keyed.Stream[string] {
		return keyed.ProcessValue(k, "profiles", 1, v2, func(key, _ string, st *keyed.ValueState[profileV2], out *keyed.Collector[string]) error {
			p, _ := st.Get()
			p.Seen++
			st.Set(p)
			out.Emit(fmt.Sprintf("%s seen=%d tier=%s", key, p.Seen, p.Tier))
			return nil
		})
	})))
	got := sink.Committed()
	slices.Sort(got)
	require.Equal(t, []string{"k0 seen=4 tier=free", "k1 seen=4 tier=free", "k2 seen=4 tier=free"}, got)
}
