package accesslog

import (
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
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
