package doccheck

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// mdFile is a Markdown file of the repository, split in lines.
type mdFile struct {
	rel   string // from the repository's root, with slashes
	lines []string
}

// markdownFiles reads the Markdown files the tests check: README.md and
// every .md under docs/ (not docs/snippets/, where the snippets' sources
// live), and DESIGN.md when withDesign. A file that does not exist is
// left out.
func markdownFiles(t *testing.T, withDesign bool) []mdFile {
	t.Helper()
	r := repoRoot(t)
	rels := []string{"README.md"}
	if withDesign {
		rels = append(rels, "DESIGN.md")
	}
	rels = append(rels, docsMarkdown(t, true)...)
	return readMarkdown(t, r, rels)
}

// readMarkdown reads the markdown files rels (relative to the repository
// root r), leaving out those that do not exist.
func readMarkdown(t *testing.T, r string, rels []string) []mdFile {
	t.Helper()
	var files []mdFile
	for _, rel := range rels {
		b, err := os.ReadFile(filepath.Join(r, filepath.FromSlash(rel)))
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, mdFile{rel, strings.Split(string(b), "\n")})
	}
	return files
}

// docsMarkdown lists the .md files under docs/ (recursively when deep, but
// never under docs/snippets/), sorted, from the repository's root.
func docsMarkdown(t *testing.T, deep bool) []string {
	t.Helper()
	r := repoRoot(t)
	var rels []string
	docs := filepath.Join(r, "docs")
	err := filepath.WalkDir(docs, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if os.IsNotExist(err) && p == docs {
				return filepath.SkipAll
			}
			return err
		}
		if d.IsDir() {
			if p != docs && (!deep || d.Name() == "snippets" && filepath.Dir(p) == docs) {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(d.Name(), ".md") {
			rel, _ := filepath.Rel(r, p)
			rels = append(rels, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(rels)
	return rels
}

// fence is a fenced code block: the line of its opening fence (0-based),
// the line of its closing one (len(lines) when unclosed), and its info
// string.
type fence struct {
	open, close int
	info        string
}

var fenceRE = regexp.MustCompile("^ {0,3}(`{3,}|~{3,})(.*)$")

// fences finds the fenced code blocks of lines. Fences indented in a list
// item count too: the opening fence may be indented by any amount, and
// its closing fence is the next line of the same character, at least as
// long, with nothing else on it.
func fences(lines []string) []fence {
	var fs []fence
	for i := 0; i < len(lines); i++ {
		m := fenceRE.FindStringSubmatch(strings.TrimLeft(lines[i], " \t"))
		if m == nil || m[1][0] == '`' && strings.Contains(m[2], "`") {
			continue
		}
		f := fence{open: i, close: len(lines), info: strings.TrimSpace(m[2])}
		for j := i + 1; j < len(lines); j++ {
			s := strings.TrimSpace(lines[j])
			if len(s) >= len(m[1]) && strings.Trim(s, m[1][:1]) == "" {
				f.close = j
				break
			}
		}
		fs = append(fs, f)
		i = f.close
	}
	return fs
}

// inFence marks the lines that belong to a fenced code block, fences
// included.
func inFence(lines []string) []bool {
	in := make([]bool, len(lines))
	for _, f := range fences(lines) {
		for i := f.open; i <= f.close && i < len(lines); i++ {
			in[i] = true
		}
	}
	return in
}

// segment is a run of text lines: no blank line, no fenced line.
type segment struct {
	first int // 0-based line of its first line
	text  string
}

// lineOf is the 0-based line of byte offset off of s.
func (s segment) lineOf(off int) int {
	return s.first + strings.Count(s.text[:off], "\n")
}

// segments splits lines, outside their fenced blocks, into paragraphs.
func segments(lines []string) []segment {
	in := inFence(lines)
	var segs []segment
	var cur []string
	first := 0
	flush := func() {
		if len(cur) > 0 {
			segs = append(segs, segment{first, strings.Join(cur, "\n")})
		}
		cur = nil
	}
	for i, l := range lines {
		if in[i] || strings.TrimSpace(l) == "" {
			flush()
			continue
		}
		if len(cur) == 0 {
			first = i
		}
		cur = append(cur, l)
	}
	flush()
	return segs
}

// codeSpan is an inline code span: its content and where it starts.
type codeSpan struct {
	start, end int // byte offsets of the span in the segment, backticks included
	text       string
}

// codeSpans finds s's inline code spans (CommonMark: a run of n
// backticks up to the next run of exactly n; a run with no match is
// text).
func codeSpans(s string) []codeSpan {
	var spans []codeSpan
	for i := 0; i < len(s); {
		if s[i] != '`' || i > 0 && s[i-1] == '\\' {
			i++
			continue
		}
		n := 0
		for i+n < len(s) && s[i+n] == '`' {
			n++
		}
		end := -1
		for j := i + n; j < len(s); {
			if s[j] != '`' {
				j++
				continue
			}
			k := 0
			for j+k < len(s) && s[j+k] == '`' {
				k++
			}
			if k == n {
				end = j
				break
			}
			j += k
		}
		if end < 0 {
			i += n
			continue
		}
		text := strings.ReplaceAll(s[i+n:end], "\n", " ")
		if len(text) > 2 && text[0] == ' ' && text[len(text)-1] == ' ' && strings.Trim(text, " ") != "" {
			text = text[1 : len(text)-1]
		}
		spans = append(spans, codeSpan{i, end + n, text})
		i = end + n
	}
	return spans
}

// blankSpans returns s with its code spans' contents replaced by spaces,
// offsets kept.
func blankSpans(s string) string {
	b := []byte(s)
	for _, sp := range codeSpans(s) {
		for i := sp.start + 1; i < sp.end-1; i++ {
			if b[i] != '\n' && b[i] != '`' {
				b[i] = ' '
			}
		}
	}
	return string(b)
}

var headingRE = regexp.MustCompile(`^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$`)

// heading is an ATX heading: its level and text.
type heading struct {
	line  int // 0-based
	level int
	text  string
}

func headings(lines []string) []heading {
	in := inFence(lines)
	var hs []heading
	for i, l := range lines {
		if in[i] {
			continue
		}
		if m := headingRE.FindStringSubmatch(l); m != nil {
			hs = append(hs, heading{i, len(m[1]), strings.TrimSpace(m[2])})
		}
	}
	return hs
}

var (
	mdLinkRE  = regexp.MustCompile(`!?\[([^\]]*)\]\(([^)]*)\)`)
	htmlTagRE = regexp.MustCompile(`<[^>]*>`)
	anchorRE  = regexp.MustCompile(`<a\s+(?:name|id)="([^"]+)"`)
)

// slug is GitHub's anchor for a heading's text, before the suffix of a
// duplicate: the rendered text (links' text, no HTML tags, no backticks),
// lower case, without punctuation but hyphens and underscores, each space
// a hyphen.
func slug(text string) string {
	text = mdLinkRE.ReplaceAllString(text, "$1")
	text = htmlTagRE.ReplaceAllString(text, "")
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchors are the anchors of a Markdown file: its headings' slugs, a
// duplicate suffixed -1, -2, ... (GitHub's rule), and explicit
// <a name="..."> or <a id="..."> targets.
func anchors(lines []string) map[string]bool {
	seen := map[string]int{}
	as := map[string]bool{}
	for _, h := range headings(lines) {
		s := slug(h.text)
		orig := s
		for {
			if _, dup := seen[s]; !dup {
				break
			}
			seen[orig]++
			s = orig + "-" + strconv.Itoa(seen[orig])
		}
		seen[s] = 0
		as[s] = true
	}
	in := inFence(lines)
	for i, l := range lines {
		if in[i] {
			continue
		}
		for _, m := range anchorRE.FindAllStringSubmatch(l, -1) {
			as[m[1]] = true
		}
	}
	return as
}

// link is a Markdown link or image in a file: its line (0-based) and
// target.
type link struct {
	line   int
	target string
}

var refDefRE = regexp.MustCompile(`^ {0,3}\[[^\]]+\]:\s*(\S+)`)

// links finds the inline links and link reference definitions of lines,
// outside code blocks and code spans.
func links(lines []string) []link {
	var ls []link
	for _, seg := range segments(lines) {
		text := blankSpans(seg.text)
		for _, m := range mdLinkRE.FindAllStringSubmatchIndex(text, -1) {
			target := strings.TrimSpace(text[m[4]:m[5]])
			if strings.HasPrefix(target, "<") {
				target, _, _ = strings.Cut(target[1:], ">")
			} else if i := strings.IndexAny(target, " \t\n"); i >= 0 {
				target = target[:i] // a title follows
			}
			ls = append(ls, link{seg.lineOf(m[0]), target})
		}
		for i, l := range strings.Split(text, "\n") {
			if m := refDefRE.FindStringSubmatch(l); m != nil {
				ls = append(ls, link{seg.first + i, strings.Trim(m[1], "<>")})
			}
		}
	}
	return ls
}

// external reports whether a link target leaves the repository (a URL
// with a scheme, or a protocol-relative one).
func external(target string) bool {
	if strings.HasPrefix(target, "//") {
		return true
	}
	scheme, _, ok := strings.Cut(target, ":")
	return ok && scheme != "" && !strings.ContainsAny(scheme, "/#.?")
}
