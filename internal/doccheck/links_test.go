package doccheck

import (
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestLinks: every relative link in README.md, DESIGN.md and docs/ leads
// to a file or directory of the repository, and its #anchor, into a
// Markdown file, to a heading of it (GitHub's anchors). External links
// are not fetched.
func TestLinks(t *testing.T) {
	r := repoRoot(t)
	anchorsOf := map[string]map[string]bool{}
	fileAnchors := func(rel string) (map[string]bool, error) {
		if as, ok := anchorsOf[rel]; ok {
			return as, nil
		}
		b, err := os.ReadFile(filepath.Join(r, filepath.FromSlash(rel)))
		if err != nil {
			return nil, err
		}
		as := anchors(strings.Split(string(b), "\n"))
		anchorsOf[rel] = as
		return as, nil
	}
	for _, f := range markdownFiles(t, true) {
		for _, ln := range links(f.lines) {
			if ln.target == "" || external(ln.target) {
				continue
			}
			where := f.rel + ":" + strconv.Itoa(ln.line+1)
			p, frag, _ := strings.Cut(ln.target, "#")
			p, _, _ = strings.Cut(p, "?")
			if u, err := url.PathUnescape(p); err == nil {
				p = u
			}
			target := f.rel
			if p != "" {
				if strings.HasPrefix(p, "/") {
					target = path.Clean(strings.TrimPrefix(p, "/"))
				} else {
					target = path.Join(path.Dir(f.rel), p)
				}
				if target == ".." || strings.HasPrefix(target, "../") {
					t.Errorf("%s: link %q leaves the repository", where, ln.target)
					continue
				}
				if _, err := os.Stat(filepath.Join(r, filepath.FromSlash(target))); err != nil {
					t.Errorf("%s: link %q: no file %s in the repository", where, ln.target, target)
					continue
				}
			}
			if frag == "" || !strings.HasSuffix(target, ".md") {
				continue
			}
			as, err := fileAnchors(target)
			if err != nil {
				t.Errorf("%s: link %q: %v", where, ln.target, err)
				continue
			}
			if !as[frag] {
				t.Errorf("%s: link %q: %s has no heading with anchor #%s (GitHub's anchor: the heading in lower case, punctuation but - and _ dropped, each space a -)", where, ln.target, target, frag)
			}
		}
	}
}

func TestSlug(t *testing.T) {
	for text, want := range map[string]string{
		"Exactly-once to Kafka with librdkafka": "exactly-once-to-kafka-with-librdkafka",
		"Placement: the other clients' rules":   "placement-the-other-clients-rules",
		"Files: the exactly-once file sink":     "files-the-exactly-once-file-sink",
		"The `kord` command":                    "the-kord-command",
		"Why [kord](README.md)?":                "why-kord",
		"A/B tests & more":                      "ab-tests--more",
		"snake_case stays":                      "snake_case-stays",
	} {
		if got := slug(text); got != want {
			t.Errorf("slug(%q) = %q, want %q", text, got, want)
		}
	}
	as := anchors([]string{"# Next", "## Next", "```sh", "# Not a heading", "```", "### Next"})
	for _, a := range []string{"next", "next-1", "next-2"} {
		if !as[a] {
			t.Errorf("anchors: no %s in %v", a, as)
		}
	}
	if as["not-a-heading"] {
		t.Errorf("anchors: a line in a code block counted as a heading")
	}
}
