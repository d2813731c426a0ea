package doccheck

import (
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// guidePackages are the packages the guides must cover: every public
// package (nothing internal, no program but the kord command, nothing
// under bench/, examples/ or docs/).
func guidePackages(l *loader) []*pkg {
	var pkgs []*pkg
	for _, pk := range l.kord {
		switch {
		case pk.rel == "", pk.internal,
			strings.HasPrefix(pk.rel, "bench/"), strings.HasPrefix(pk.rel, "examples/"), strings.HasPrefix(pk.rel, "docs/"),
			pk.main && pk.rel != "cmd/kord":
			continue
		}
		pkgs = append(pkgs, pk)
	}
	return pkgs
}

// named reports whether text names package pk: by its import path (the
// full one, or from the module's root when that has a slash, like
// serde/registry), by a reference to one of its names (registry.Avro), or
// by its last element or its path in backticks (`registry`).
func named(text string, spans map[string]bool, pk *pkg) bool {
	last := path.Base(pk.rel)
	if strings.Contains(text, modPath+"/"+pk.rel) || spans[last] || spans[pk.rel] {
		return true
	}
	if strings.Contains(pk.rel, "/") && regexp.MustCompile(`(^|[^\w/.-])`+regexp.QuoteMeta(pk.rel)+`($|[^\w/-])`).MatchString(text) {
		return true
	}
	return regexp.MustCompile(`(^|[^\w./])` + regexp.QuoteMeta(last) + `\.[A-Z]`).MatchString(text)
}

// TestGuides: the guides (docs/*.md) name every public package, and each
// ends with a section "## Next" that links to what to read after it.
func TestGuides(t *testing.T) {
	guides := docsMarkdown(t, false)
	if len(guides) == 0 {
		t.Fatal("docs/ holds no guide (docs/*.md)")
	}
	r := repoRoot(t)
	l := getLoader(t)
	var all strings.Builder
	spans := map[string]bool{}
	for _, g := range guides {
		b, err := os.ReadFile(filepath.Join(r, filepath.FromSlash(g)))
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(string(b), "\n")
		all.Write(b)
		all.WriteByte('\n')
		for _, seg := range segments(lines) {
			for _, sp := range codeSpans(seg.text) {
				spans[strings.TrimSpace(sp.text)] = true
			}
		}
		var last *heading
		for _, h := range headings(lines) {
			if h.level == 2 {
				last = &h
			}
		}
		switch {
		case last == nil:
			t.Errorf("%s: no ## heading: a guide ends with a section \"## Next\" linking the guides to read after it", g)
			continue
		case last.text != "Next":
			t.Errorf("%s:%d: the last ## heading is %q: a guide ends with a section \"## Next\" linking the guides to read after it", g, last.line+1, "## "+last.text)
			continue
		}
		relative := false
		for _, ln := range links(lines[last.line:]) {
			if ln.target != "" && !external(ln.target) && !strings.HasPrefix(ln.target, "#") {
				relative = true
			}
		}
		if !relative {
			t.Errorf("%s:%d: the section \"## Next\" holds no relative link (like [Time and windows](time-and-windows.md))", g, last.line+1)
		}
	}
	for _, pk := range guidePackages(l) {
		if !named(all.String(), spans, pk) {
			last := path.Base(pk.rel)
			t.Errorf("package %s is named in no guide (docs/*.md): name it by its import path %q, by a reference like `%s.Name`, or as `%s`", pk.rel, pk.rel, last, last)
		}
	}
}
