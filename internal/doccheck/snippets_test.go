package doccheck

import (
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "TestSnippets: rewrite every ```go block of the docs from its source")

const updateCmd = "go test ./internal/doccheck/ -run TestSnippets -update"

var (
	markerRE = regexp.MustCompile(`^\s*<!--\s*snippet:\s*(.*?)\s*-->\s*$`)
	regionRE = regexp.MustCompile(`^// snippet:(\S+)$`)
)

// region is a snippet region of a source file: the 0-based lines of its
// marker lines.
type region struct{ start, end int }

// regions finds the regions of a source file: a line whose trimmed text
// is "// snippet:NAME" opens region NAME, and the matching line
// "// snippet:end" closes it (regions may nest). A name declared twice, an
// end without a region and a region without an end are errors.
func regions(lines []string) (map[string]region, []string) {
	rs := map[string]region{}
	var errs []string
	type open struct {
		name string
		line int
	}
	var stack []open
	for i, l := range lines {
		m := regionRE.FindStringSubmatch(strings.TrimSpace(l))
		if m == nil {
			continue
		}
		if m[1] != "end" {
			if r, dup := rs[m[1]]; dup {
				errs = append(errs, fmt.Sprintf("line %d declares region %q again (first at line %d)", i+1, m[1], r.start+1))
			}
			for _, o := range stack {
				if o.name == m[1] {
					errs = append(errs, fmt.Sprintf("line %d declares region %q again (first at line %d)", i+1, m[1], o.line+1))
				}
			}
			stack = append(stack, open{m[1], i})
			continue
		}
		if len(stack) == 0 {
			errs = append(errs, fmt.Sprintf("line %d: // snippet:end closes no region", i+1))
			continue
		}
		o := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if _, dup := rs[o.name]; !dup {
			rs[o.name] = region{o.line, i}
		}
	}
	for _, o := range stack {
		errs = append(errs, fmt.Sprintf("line %d: region %q has no // snippet:end", o.line+1, o.name))
	}
	return rs, errs
}

// extract is the text of region r of lines: the lines between its
// markers, other regions' marker lines left out, the lines' common
// leading tabs removed (blank lines do not count, and come out empty).
func extract(lines []string, r region) string {
	var body []string
	for _, l := range lines[r.start+1 : r.end] {
		if regionRE.MatchString(strings.TrimSpace(l)) {
			continue
		}
		body = append(body, l)
	}
	common := -1
	for _, l := range body {
		if strings.TrimSpace(l) == "" {
			continue
		}
		n := len(l) - len(strings.TrimLeft(l, "\t"))
		if common < 0 || n < common {
			common = n
		}
	}
	var b strings.Builder
	for _, l := range body {
		if strings.TrimSpace(l) == "" {
			l = ""
		} else {
			l = l[common:]
		}
		b.WriteString(l)
		b.WriteByte('\n')
	}
	return b.String()
}

// snippetSource is the text a marker's target names: a whole file
// (PATH) or one of its regions (PATH#REGION); an error when either does
// not exist or the file's regions are malformed.
func snippetSource(root, target string) (string, error) {
	file, name, hasRegion := strings.Cut(target, "#")
	if file == "" || filepath.IsAbs(file) || strings.HasPrefix(filepath.Clean(file), "..") {
		return "", fmt.Errorf("marker path %q is not a path from the repository's root", file)
	}
	b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(file)))
	if err != nil {
		return "", fmt.Errorf("its source %s: %v", file, err)
	}
	text := string(b)
	lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	rs, errs := regions(lines)
	if len(errs) > 0 {
		return "", fmt.Errorf("its source %s has malformed regions: %s", file, strings.Join(errs, "; "))
	}
	if !hasRegion {
		if !strings.HasSuffix(text, "\n") {
			text += "\n"
		}
		return text, nil
	}
	r, ok := rs[name]
	if !ok {
		return "", fmt.Errorf("its source %s has no region %q (a line // snippet:%s, then one // snippet:end)", file, name, name)
	}
	return extract(lines, r), nil
}

// goBlock is a ```go block of a Markdown file and its marker.
type goBlock struct {
	fence
	marker    int    // 0-based line of the marker; -1 when there is none
	target    string // the marker's PATH or PATH#REGION
	indent    string // the opening fence's indentation
	body      string // the block's text, its indentation removed
	bodyLines []string
}

// goBlocks finds the ```go blocks of a file, and the marker lines that
// name no ```go block (they are errors: the previous non-blank line of a
// marker's block is the marker).
func goBlocks(lines []string) (blocks []goBlock, stray []int) {
	claimed := map[int]bool{}
	for _, f := range fences(lines) {
		lang, _, _ := strings.Cut(f.info, " ")
		if lang != "go" {
			continue
		}
		b := goBlock{fence: f, marker: -1}
		open := lines[f.open]
		b.indent = open[:len(open)-len(strings.TrimLeft(open, " \t"))]
		for i := f.open - 1; i >= 0; i-- {
			if strings.TrimSpace(lines[i]) == "" {
				continue
			}
			if m := markerRE.FindStringSubmatch(lines[i]); m != nil {
				b.marker, b.target = i, m[1]
				claimed[i] = true
			}
			break
		}
		var body strings.Builder
		for i := f.open + 1; i < f.close && i < len(lines); i++ {
			l := strings.TrimPrefix(lines[i], b.indent)
			b.bodyLines = append(b.bodyLines, l)
			body.WriteString(l)
			body.WriteByte('\n')
		}
		b.body = body.String()
		blocks = append(blocks, b)
	}
	in := inFence(lines)
	for i, l := range lines {
		if !in[i] && markerRE.MatchString(l) && !claimed[i] {
			stray = append(stray, i)
		}
	}
	return blocks, stray
}

// firstDifference describes the first line where a block and its source
// differ.
func firstDifference(doc, src string) string {
	d, s := strings.Split(doc, "\n"), strings.Split(src, "\n")
	for i := 0; i < max(len(d), len(s)); i++ {
		var dl, sl string = "(no line)", "(no line)"
		if i < len(d) {
			dl = fmt.Sprintf("%q", d[i])
		}
		if i < len(s) {
			sl = fmt.Sprintf("%q", s[i])
		}
		if dl != sl {
			return fmt.Sprintf("first difference at the block's line %d:\n\tdoc:    %s\n\tsource: %s", i+1, dl, sl)
		}
	}
	return ""
}

// TestSnippets: every ```go block in README.md and docs/ is the marked
// source, exactly; with -update, the blocks are rewritten from their
// sources.
func TestSnippets(t *testing.T) {
	r := repoRoot(t)
	for _, f := range markdownFiles(t, false) {
		blocks, stray := goBlocks(f.lines)
		for _, i := range stray {
			t.Errorf("%s:%d: snippet marker %q is not followed by a ```go block (the marker must be the last non-blank line before the block's opening fence)", f.rel, i+1, strings.TrimSpace(f.lines[i]))
		}
		changed := false
		lines := f.lines
		var errs []string // in reverse order of lines
		// Rewrite from the last block up, so that earlier blocks' lines stay put.
		for k := len(blocks) - 1; k >= 0; k-- {
			b := blocks[k]
			if b.marker < 0 {
				errs = append(errs, fmt.Sprintf("%s:%d: a ```go block without a snippet marker: Go code in the docs is copied from compiled source; put it in a file under docs/snippets/ (between // snippet:NAME and // snippet:end lines) and precede the block with <!-- snippet: docs/snippets/DIR/example_test.go#NAME -->, then run %s", f.rel, b.open+1, updateCmd))
				continue
			}
			src, err := snippetSource(r, b.target)
			if err != nil {
				errs = append(errs, fmt.Sprintf("%s:%d: snippet marker %q: %v", f.rel, b.marker+1, b.target, err))
				continue
			}
			if src == b.body {
				continue
			}
			if !*update {
				errs = append(errs, fmt.Sprintf("%s:%d: the ```go block differs from its source %s; %s\n(%s rewrites the blocks from their sources)", f.rel, b.open+1, b.target, firstDifference(b.body, src), updateCmd))
				continue
			}
			var repl []string
			for _, l := range strings.Split(strings.TrimSuffix(src, "\n"), "\n") {
				if l != "" {
					l = b.indent + l
				}
				repl = append(repl, l)
			}
			if src == "" {
				repl = nil
			}
			lines = append(append(append([]string{}, lines[:b.open+1]...), repl...), lines[b.close:]...)
			changed = true
			t.Logf("%s:%d: rewrote the block from %s", f.rel, b.open+1, b.target)
		}
		for k := len(errs) - 1; k >= 0; k-- {
			t.Error(errs[k])
		}
		if changed {
			if err := os.WriteFile(filepath.Join(r, filepath.FromSlash(f.rel)), []byte(strings.Join(lines, "\n")), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Every source file under docs/snippets/ has well-formed regions, used
	// or not.
	snippets := filepath.Join(r, "docs", "snippets")
	err := filepath.WalkDir(snippets, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if os.IsNotExist(err) && p == snippets {
				return filepath.SkipAll
			}
			return err
		}
		if d.IsDir() || !strings.HasSuffix(p, ".go") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if _, errs := regions(strings.Split(string(b), "\n")); len(errs) > 0 {
			rel, _ := filepath.Rel(r, p)
			for _, e := range errs {
				t.Errorf("%s: %s", filepath.ToSlash(rel), e)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestRegions(t *testing.T) {
	src := strings.Split(strings.Join([]string{
		"package x",
		"func F() {",
		"\t// snippet:outer",
		"\tif true {",
		"\t\t// snippet:inner",
		"\t\tg()",
		"",
		"\t\th()",
		"\t\t// snippet:end",
		"\t}",
		"\t// snippet:end",
		"}",
	}, "\n"), "\n")
	rs, errs := regions(src)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if got, want := extract(src, rs["inner"]), "g()\n\nh()\n"; got != want {
		t.Errorf("inner = %q, want %q", got, want)
	}
	if got, want := extract(src, rs["outer"]), "if true {\n\tg()\n\n\th()\n}\n"; got != want {
		t.Errorf("outer = %q, want %q", got, want)
	}
	_, errs = regions([]string{"// snippet:a", "// snippet:end", "// snippet:a", "// snippet:end", "// snippet:end", "// snippet:b"})
	if len(errs) != 3 {
		t.Errorf("errors %q, want a duplicate, a stray end and an unclosed region", errs)
	}
}
