package doccheck

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// citeRE finds a comment's citation of a part of DESIGN.md by its title:
// DESIGN.md, a comma, and the title in double quotes (or the title in
// parentheses and quotes).
var citeRE = regexp.MustCompile(`DESIGN\.md,?\s*\(?"([^"]+)"`)

// boldRE is a bold lead in DESIGN.md, the title of a part of a section
// (**Start**, - **Broadcast state** ...).
var boldRE = regexp.MustCompile(`\*\*([^*]+)\*\*`)

// designTitles are DESIGN.md's headings and bold leads, what a comment
// may cite.
func designTitles(t *testing.T, r string) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(r, "DESIGN.md"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	titles := map[string]bool{}
	for _, h := range headings(lines) {
		titles[h.text] = true
	}
	for _, m := range boldRE.FindAllStringSubmatch(string(b), -1) {
		titles[strings.TrimRight(m[1], ".:")] = true
		// A lead with its gloss, "Unknown outcomes (KIP-890)", is cited
		// by its words.
		if i := strings.Index(m[1], " ("); i > 0 {
			titles[m[1][:i]] = true
		}
	}
	return titles
}

// TestDesignCitations: every comment in the module's Go files that cites
// a part of DESIGN.md by its title names a heading or a bold lead that
// DESIGN.md has, so that a renamed or removed part is caught.
func TestDesignCitations(t *testing.T) {
	r := repoRoot(t)
	titles := designTitles(t, r)
	fset := token.NewFileSet()
	err := filepath.WalkDir(r, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); p != r && (strings.HasPrefix(n, ".") || strings.HasPrefix(n, "_") || n == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			return nil // not this test's business (a generated or broken file)
		}
		rel, _ := filepath.Rel(r, p)
		for _, cg := range f.Comments {
			text := strings.Join(strings.Fields(cg.Text()), " ")
			for _, m := range citeRE.FindAllStringSubmatch(text, -1) {
				if !titles[strings.TrimRight(m[1], ".:")] {
					t.Errorf("%s:%d: cites DESIGN.md, %q, which is no heading or bold lead of DESIGN.md (name one that is, or link the section)", rel, fset.Position(cg.Pos()).Line, m[1])
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
