package main

import (
	"encoding/json"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kordproject/kord/keyed"
)

func TestGenerate(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, tmpl := range templates {
		for range 200 {
			uri, want := tmpl.make(r)
			require.Equal(t, want, Normalizer{}.Pattern(uri), uri)
		}
	}

	g := genConfig{events: 20_000, span: 10 * time.Minute, seed: 7, lateFraction: 0.01, badFraction: 0.01}
	var first []input
	ids := map[string]bool{}
	bad, far := 0, 0
	badValues := map[string]bool{}
	decode := newAccessSerde().Decode
	for in := range generate(g) {
		first = append(first, in)
		v, err := decode(in.value)
		if in.event == nil {
			bad++
			require.Error(t, err, "%s", in.value)
			require.False(t, badValues[string(in.value)], "the check tells malformed records apart by value: %s", in.value)
			badValues[string(in.value)] = true
			continue
		}
		require.NoError(t, err)
		require.Equal(t, *in.event, v)
		require.False(t, ids[v.ID], v.ID)
		ids[v.ID] = true
		require.Equal(t, in.key, v.ID)
		require.Equal(t, v.Time, v.Time.Truncate(time.Millisecond))
		if in.farBehind {
			far++
		}
	}
	require.Len(t, first, g.events)
	require.InDelta(t, 200, bad, 60)
	require.InDelta(t, 200, far, 60)
	i := 0
	for in := range generate(g) {
		require.Equal(t, first[i], in, "the same config gives the same input")
		i++
	}
}

func TestP99(t *testing.T) {
	require.Zero(t, p99(nil))
	require.Equal(t, 7.0, p99([]float64{7}))
	// 100 values 1..100: the 99th is 99; 101 values: ceil(99.99) = 100.
	var xs []float64
	for i := 100; i >= 1; i-- {
		xs = append(xs, float64(i))
	}
	require.Equal(t, 99.0, p99(append([]float64(nil), xs...)))
	require.Equal(t, 100.0, p99(append([]float64{101}, xs...)))
	// The definition: the smallest value with at least 99% of the values
	// at or below it.
	r := rand.New(rand.NewPCG(3, 3))
	for n := 1; n < 2_000; n++ {
		xs := make([]float64, n)
		for i := range xs {
			xs[i] = float64(r.IntN(50))
		}
		got := p99(append([]float64(nil), xs...))
		atOrBelow := 0
		for _, x := range xs {
			if x <= got {
				atOrBelow++
			}
		}
		require.GreaterOrEqual(t, 100*atOrBelow, 99*n, "n=%d", n)
		// The next smaller value has fewer than 99% at or below it.
		below, next := 0, -1.0
		for _, x := range xs {
			if x < got {
				below++
				next = max(next, x)
			}
		}
		if next >= 0 {
			require.Less(t, 100*below, 99*n, "n=%d: %v would do", n, next)
		}
		require.Equal(t, got, nearestRank(xs, 0.99), "the model's p99, n=%d", n)
	}
}

func TestWindowResult(t *testing.T) {
	win := keyed.Window{Start: base, End: base.Add(time.Minute)}
	events := []Access{{Status: 200, LatencyMs: 5}, {Status: 503, LatencyMs: 50}, {Status: 500, LatencyMs: 1}, {Status: 404, LatencyMs: 9}}
	got := windowResult("p/{}", win, events)
	require.Equal(t, Out{Kind: kindWindow, Pattern: "p/{}", WindowStart: base, WindowEnd: base.Add(time.Minute), Count: 4, Errors: 2, P99LatencyMs: 50}, got)
	require.Equal(t, 5.0, events[0].LatencyMs, "the window's records are the job's state: not reordered")
	b, err := json.Marshal(got)
	require.NoError(t, err)
	require.JSONEq(t, `{"kind":"window","pattern":"p/{}","windowStart":"2026-01-01T00:00:00Z","windowEnd":"2026-01-01T00:01:00Z","count":4,"errors":2,"p99LatencyMs":50}`, string(b))
}

// What the job cannot window goes to the dead letters (the decoder
// refuses it), not to keyed's timestamp check, which would fail the job.
func TestDecodeAccess(t *testing.T) {
	decode := newAccessSerde().Decode
	for value, want := range map[string]string{
		`{"id":"a","identityUri":"x","status":200,"latencyMs":1,"time":"2026-01-01T00:00:00Z"}`: "",
		`{"id":"a","identityUri":"x","status":200,"latencyMs":1}`:                               `access event "a": no time`,
		`{"id":"a","identityUri":"x","time":"1969-12-31T23:59:59Z"}`:                            `access event "a": no time (or one before 1970)`,
		`{"id":"a","time":"2026-01-01T00:00:00Z"}`:                                              `access event "a": no identityUri`,
		`{}`:     "no time",
		`null`:   "no time",
		`[1]`:    "json: cannot unmarshal array",
		`{"id":`: "serde: json: unexpected end of JSON input",
		`GET x`:  "serde: json: invalid character 'G'",
	} {
		_, err := decode([]byte(value))
		if want == "" {
			require.NoError(t, err, value)
		} else {
			require.ErrorContains(t, err, want, value)
		}
	}
}
