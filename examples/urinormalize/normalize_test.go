package main

import (
	"encoding/json"
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kordproject/kord/keyed"
)

func TestPattern(t *testing.T) {
	rules := []Rule{
		{Match: regexp.MustCompile(`^users/[^/]+/profile$`), Pattern: "users/{name}/profile"},
		// Not anchored: it matches anywhere in the path.
		{Match: regexp.MustCompile(`/legacy/`), Pattern: "legacy"},
		// Never reached for these paths: the first rule that matches wins.
		{Match: regexp.MustCompile(`^users/`), Pattern: "users"},
	}
	for _, tc := range []struct {
		name, uri, want string
		rules           []Rule
	}{
		{"the issue's example", "yiyang/user/getById/13782", "yiyang/user/getById/{}", nil},
		{"numeric segments anywhere", "shop/42/items/7", "shop/{}/items/{}", nil},
		{"uuid, lower case", "api/orders/3f2b8c1e-9a4d-4e7b-8c2a-1d5e6f7a8b9c/items", "api/orders/{}/items", nil},
		{"uuid, upper case", "api/orders/3F2B8C1E-9A4D-4E7B-8C2A-1D5E6F7A8B9C", "api/orders/{}", nil},
		{"uuid, mixed case", "o/3f2B8c1E-9a4D-4e7B-8c2A-1d5E6f7A8b9C", "o/{}", nil},
		{"uuid without hyphens is long hex", "o/3f2b8c1e9a4d4e7b8c2a1d5e6f7a8b9c", "o/{}", nil},
		{"uuid with a hyphen misplaced stays", "o/3f2b8c1e9-a4d-4e7b-8c2a-1d5e6f7a8b9c", "o/3f2b8c1e9-a4d-4e7b-8c2a-1d5e6f7a8b9c", nil},
		{"uuid with a non-hex digit stays", "o/3f2b8c1e-9a4d-4e7b-8c2a-1d5e6f7a8b9g", "o/3f2b8c1e-9a4d-4e7b-8c2a-1d5e6f7a8b9g", nil},
		{"hex of 16", "blob/00ff00ff00ff00ff", "blob/{}", nil},
		{"hex of 40 (a git sha), upper case", "commit/DA39A3EE5E6B4B0D3255BFEF95601890AFD80709", "commit/{}", nil},
		{"short hex stays", "blob/00ff00ff00ff00f", "blob/00ff00ff00ff00f", nil},
		{"words of hex letters stay", "feed/cafe/add", "feed/cafe/add", nil},
		{"mixed letters and digits stay", "api/v2/item42/abc123", "api/v2/item42/abc123", nil},
		{"signed or decimal numbers stay", "n/-1/1.5", "n/-1/1.5", nil},
		{"non-ASCII digits stay", "n/١٢٣", "n/١٢٣", nil},
		{"a file name with a hash stays", "static/0123456789abcdef0123.js", "static/0123456789abcdef0123.js", nil},
		{"query string dropped", "search?q=42&page=3", "search", nil},
		{"query string dropped after ids", "user/42?fields=name", "user/{}", nil},
		{"only a query string", "?a=1", "", nil},
		{"empty", "", "", nil},
		{"leading slash kept", "/user/42", "/user/{}", nil},
		{"trailing slash kept", "user/42/", "user/{}/", nil},
		{"empty segments kept", "//user//42", "//user//{}", nil},
		{"root", "/", "/", nil},
		{"one numeric segment", "42", "{}", nil},
		{"rules first", "users/alice/profile", "users/{name}/profile", rules},
		{"rules see no query string", "users/alice/profile?tab=2", "users/{name}/profile", rules},
		{"an anchored rule needs the whole path", "users/alice/profile/photo", "users", rules},
		{"an unanchored rule matches inside", "a/legacy/42", "legacy", rules},
		{"no rule matches: the default", "user/42", "user/{}", rules},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, Normalizer{Rules: tc.rules}.Pattern(tc.uri))
		})
	}
}

func TestParseRules(t *testing.T) {
	rules, err := ParseRules("rules.txt", strings.NewReader(`
# endpoints whose ids are names
users/[^/]+/profile => users/{name}/profile
   # an indented comment

  api/v[0-9]+/(.*)   =>   api/{version}/rest
a=>b=>c
`))
	require.NoError(t, err)
	require.Len(t, rules, 3)
	n := Normalizer{Rules: rules}
	require.Equal(t, "users/{name}/profile", n.Pattern("users/bob/profile"))
	require.Equal(t, "users/bob/profile/x", n.Pattern("users/bob/profile/x"), "anchored: the whole path must match")
	require.Equal(t, "xusers/bob/profile", n.Pattern("xusers/bob/profile"), "anchored at the start too")
	require.Equal(t, "api/{version}/rest", n.Pattern("api/v3/orders/42"))
	require.Equal(t, "c", n.Pattern("a=>b"), "split at the last =>")

	for _, tc := range []struct{ name, text, want string }{
		{"no arrow", "ok => fine\n\nusers/x\n", "rules rules.txt:3: \"users/x\": want REGEX => PATTERN"},
		{"no expression", "# c\n => p\n", "rules rules.txt:2: no expression before =>"},
		{"no pattern", "a => b\nx =>\n", "rules rules.txt:2: no pattern after =>"},
		{"bad expression", "a => b\n# c\n\nusers/(x => p\n", "rules rules.txt:4: error parsing regexp: missing closing ): `^(?:users/(x)$`"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseRules("rules.txt", strings.NewReader(tc.text))
			require.EqualError(t, err, tc.want)
		})
	}
	_, err = LoadRules(t.TempDir() + "/missing.txt")
	require.ErrorContains(t, err, "missing.txt")
}

// Every URI the generator makes normalizes to its template's pattern with
// the default rules, and a record's value decodes (or, malformed, fails to
// decode) as the generator says.
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
