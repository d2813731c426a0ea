package doccheck

import (
	"fmt"
	"go/ast"
	"go/doc/comment"
	"go/token"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// docComments lists the documentation comments of f: the package's, each
// declaration's, each spec's, and each struct field's and interface
// method's (their line comments too), in source order.
func docComments(f *ast.File) []*ast.CommentGroup {
	var cgs []*ast.CommentGroup
	add := func(cg *ast.CommentGroup) {
		if cg != nil && !slices.Contains(cgs, cg) {
			cgs = append(cgs, cg)
		}
	}
	add(f.Doc)
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.FuncDecl:
			add(n.Doc)
			return false // comments in bodies are no documentation
		case *ast.GenDecl:
			add(n.Doc)
		case *ast.TypeSpec:
			add(n.Doc)
			add(n.Comment)
		case *ast.ValueSpec:
			add(n.Doc)
			add(n.Comment)
		case *ast.Field:
			add(n.Doc)
			add(n.Comment)
		case *ast.FuncLit, *ast.BlockStmt:
			return false
		}
		return true
	})
	slices.SortFunc(cgs, func(a, b *ast.CommentGroup) int { return int(a.Pos() - b.Pos()) })
	return cgs
}

// locator finds text in a comment group's source lines, to report the
// line it is on; successive finds move forward.
type locator struct {
	lines []string
	nums  []int
	at    int
}

func newLocator(fset *token.FileSet, cg *ast.CommentGroup) *locator {
	loc := &locator{}
	for _, c := range cg.List {
		first := fset.Position(c.Slash).Line
		for i, l := range strings.Split(c.Text, "\n") {
			loc.lines = append(loc.lines, l)
			loc.nums = append(loc.nums, first+i)
		}
	}
	return loc
}

func (loc *locator) find(s string) int {
	for _, from := range []int{loc.at, 0} {
		for i := from; i < len(loc.lines); i++ {
			if strings.Contains(loc.lines[i], s) {
				loc.at = i
				return loc.nums[i]
			}
		}
	}
	return loc.nums[0]
}

// linkParser parses a doc comment with every syntactic doc link taken as
// one ([Name], [pkg.Name], [pkg.Type.Method], [*T], [path/to/pkg.Name],
// [pkg]): the test, not go doc, decides whether it resolves. (go doc
// shows a link it cannot resolve as plain text, brackets and all.)
var linkParser = &comment.Parser{
	LookupPackage: func(name string) (string, bool) {
		return name, token.IsIdentifier(name)
	},
	LookupSym: func(recv, name string) bool { return true },
}

// plain is the text of a run of comment text, as written.
func plain(ts []comment.Text) string {
	var b strings.Builder
	for _, t := range ts {
		switch t := t.(type) {
		case comment.Plain:
			b.WriteString(string(t))
		case comment.Italic:
			b.WriteString(string(t))
		case *comment.Link:
			b.WriteString(plain(t.Text))
		case *comment.DocLink:
			b.WriteString(plain(t.Text))
		}
	}
	return b.String()
}

// texts walks the text of a parsed comment's paragraphs, headings and
// lists, and hands code the text of its code blocks.
func texts(d *comment.Doc, fn func(comment.Text), code func(string)) {
	var blocks func([]comment.Block)
	blocks = func(bs []comment.Block) {
		for _, b := range bs {
			switch b := b.(type) {
			case *comment.Paragraph:
				for _, t := range b.Text {
					fn(t)
				}
			case *comment.Heading:
				for _, t := range b.Text {
					fn(t)
				}
			case *comment.List:
				for _, it := range b.Items {
					blocks(it.Content)
				}
			case *comment.Code:
				code(b.Text)
			}
		}
	}
	blocks(d.Content)
}

// mentionRE matches a bare pkg.Name or pkg.Name.Member in comment text;
// the test checks the character before it and whether pkg is kord's.
var mentionRE = regexp.MustCompile(`([a-z][a-z0-9]*)\.([A-Z][A-Za-z0-9_]*)(?:\.([A-Za-z_][A-Za-z0-9_]*))?`)

// linkChecker checks the doc comments of kord's packages (every package
// of the module: programs, internal packages and bench included).
type linkChecker struct {
	l               *loader
	kord            map[string][]*pkg // kord's packages (no program) by name
	links, mentions int               // how many the test checked
}

// pkgCandidates are the packages a qualifier q may mean in a doc comment
// of pk. For a doc link (link true), as go doc resolves it: with a slash,
// the package of that import path; else the package pk imports under
// that name, pk itself, or a standard library package. For a bare
// mention: any of pk's imports under that name, pk itself, and kord's
// packages of that name.
func (c *linkChecker) pkgCandidates(pk *pkg, q string, link bool) []*pkg {
	var cands []*pkg
	add := func(p *pkg) {
		if p != nil && !slices.Contains(cands, p) {
			cands = append(cands, p)
		}
	}
	if strings.Contains(q, "/") {
		p, _ := c.l.get(q)
		add(p)
		return cands
	}
	if ip := pk.imports[q]; ip != "" {
		p, _ := c.l.get(ip)
		add(p)
	}
	if pk.name == q {
		add(pk)
	}
	if link {
		if len(cands) == 0 && isStd(q) {
			p, _ := c.l.get(q)
			add(p)
		}
		return cands[:min(len(cands), 1)]
	}
	for _, p := range c.kord[q] {
		add(p)
	}
	return cands
}

// check resolves name (and member) in any of cands: "" when one has it,
// or why none does.
func (c *linkChecker) check(cands []*pkg, name, member string) string {
	var why []string
	for _, p := range cands {
		w := c.l.resolve(p, name, member, false)
		if w == "" {
			return ""
		}
		why = append(why, w)
	}
	return strings.Join(why, "; ")
}

// TestDocLinks: every doc link in the module's doc comments resolves, and
// so does every bare mention of a kord package's declaration
// (kafkaio.NewSink, keyed.Job.Run) in their text.
func TestDocLinks(t *testing.T) {
	l := getLoader(t)
	r := repoRoot(t)
	c := &linkChecker{l: l, kord: l.byName(func(*pkg) bool { return true })}
	for _, pk := range l.kord {
		names := make([]string, 0, len(pk.files))
		for n := range pk.files {
			names = append(names, n)
		}
		slices.Sort(names)
		for _, n := range names {
			f := pk.files[n]
			if ast.IsGenerated(f) {
				continue
			}
			rel, _ := filepath.Rel(r, filepath.Join(pk.dir, n))
			rel = filepath.ToSlash(rel)
			for _, cg := range docComments(f) {
				c.checkComment(t, pk, rel, cg)
			}
		}
	}
	t.Logf("checked %d doc links and %d mentions of kord's names in the doc comments of %d packages", c.links, c.mentions, len(l.kord))
}

func (c *linkChecker) checkComment(t *testing.T, pk *pkg, rel string, cg *ast.CommentGroup) {
	t.Helper()
	loc := newLocator(pk.fset, cg)
	d := linkParser.Parse(cg.Text())
	texts(d, func(txt comment.Text) {
		switch x := txt.(type) {
		case *comment.DocLink:
			text := plain(x.Text)
			c.links++
			line := loc.find("[" + text + "]")
			if why := c.checkLink(pk, x); why != "" {
				t.Errorf("%s:%d: doc link [%s] does not resolve: %s", rel, line, text, why)
			}
		case comment.Plain:
			checkUnlinked(t, rel, loc, string(x))
			c.checkMentions(t, pk, rel, loc, string(x))
		case comment.Italic:
			c.checkMentions(t, pk, rel, loc, string(x))
		}
	}, func(code string) {
		// Go code in a doc comment: its kordpkg.Name mentions too, but
		// not a variable's selectors (cluster.Client() of a cluster
		// declared in the block).
		c.checkMentions(t, pk, rel, loc, maskVars(code))
	})
}

// maskVars returns code with each identifier it declares as a variable or
// parameter (x := ..., x, y := ..., var x, func(x T)) replaced, at each of
// its uses, by one no package is named (a kord package's name may be a
// variable's too).
func maskVars(code string) string {
	for _, m := range declRE.FindAllStringSubmatch(code, -1) {
		for _, id := range strings.Split(m[1]+m[2]+m[3], ",") {
			if id = strings.TrimSpace(id); id != "" && id != "_" {
				code = regexp.MustCompile(`\b`+regexp.QuoteMeta(id)+`\.`).ReplaceAllString(code, "X_.")
			}
		}
	}
	return code
}

var declRE = regexp.MustCompile(`(?m)(?:^|[^\w.])([a-z_]\w*(?:\s*,\s*[a-z_]\w*)*)\s*:=|\bvar\s+([a-z_]\w*)|[(,]\s*([a-z_]\w*)\s+\*?[A-Za-z]`)

func (c *linkChecker) checkLink(pk *pkg, dl *comment.DocLink) string {
	if dl.ImportPath == "" {
		if dl.Recv != "" {
			return c.l.resolve(pk, dl.Recv, dl.Name, false)
		}
		if _, ok := pk.decls[dl.Name]; !ok {
			return fmt.Sprintf("package %s declares no %s", pk.name, dl.Name)
		}
		return ""
	}
	q := dl.ImportPath
	cands := c.pkgCandidates(pk, q, true)
	switch {
	case len(cands) > 0:
	case dl.Name == "" && !strings.Contains(q, "/"):
		return "" // [word]: a word in brackets, no package go doc knows
	case strings.Contains(q, "/"):
		return fmt.Sprintf("no package %s (a doc link names a package by its full import path, or by the name of an import of the package's)", q)
	case len(c.kord[q]) > 0:
		// go doc (go/doc's lookupPackage) links pkg only when the
		// package imports it under that name, or it is the package
		// itself or a standard one: it shows any other [pkg.Name] as
		// text, brackets and all.
		return fmt.Sprintf("go doc shows it as text, brackets and all: package %s does not import kord's %s (write the name without brackets: the test checks it still; or link it with the full import path)", pk.name, q)
	default:
		return fmt.Sprintf("no package %s: package %s imports none of that name, and it is not a standard library package", q, pk.name)
	}
	if dl.Name == "" {
		return "" // [pkg]: the package exists
	}
	if dl.Recv != "" {
		return c.check(cands, dl.Recv, dl.Name)
	}
	return c.check(cands, dl.Name, "")
}

// unlinkedRE matches what looks like a doc link in text that the comment
// parser left as text.
var unlinkedRE = regexp.MustCompile(`\[\*?[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*){0,2}\]`)

// checkUnlinked reports brackets in plain text s that hold a doc link's
// name ([Name], [pkg.Name]) but that go doc leaves as text, brackets and
// all, because a character next to them is neither a space nor
// punctuation (OrReset([ResetEarliest]|[ResetLatest]): '|' is a symbol).
// An index or type argument (a[i], Map[K]) is no doc link, and no error.
func checkUnlinked(t *testing.T, rel string, loc *locator, s string) {
	t.Helper()
	for _, m := range unlinkedRE.FindAllStringIndex(s, -1) {
		if m[0] > 0 {
			if r, _ := utf8.DecodeLastRuneInString(s[:m[0]]); unicode.IsLetter(r) || unicode.IsDigit(r) || r == ']' || r == ')' || r == '_' {
				continue
			}
		}
		text := s[m[0]:m[1]]
		inner := strings.TrimPrefix(text[1:len(text)-1], "*")
		last := inner[strings.LastIndex(inner, ".")+1:]
		if r, _ := utf8.DecodeRuneInString(last); !unicode.IsUpper(r) {
			continue // [word], [pkg]: not a link to a name
		}
		t.Errorf("%s:%d: %s is no doc link: go doc shows it as text, brackets and all, since a doc link must have a space or punctuation on each side (not a symbol like | + = < >)", rel, loc.find(text), text)
	}
}

func (c *linkChecker) checkMentions(t *testing.T, pk *pkg, rel string, loc *locator, s string) {
	t.Helper()
	for _, m := range mentionRE.FindAllStringSubmatchIndex(s, -1) {
		if m[0] > 0 {
			prev := s[m[0]-1]
			if prev == '.' || prev == '/' || prev == '_' || prev == '-' || prev == '\\' || prev == '@' ||
				'a' <= prev && prev <= 'z' || 'A' <= prev && prev <= 'Z' || '0' <= prev && prev <= '9' {
				continue
			}
		}
		q := s[m[2]:m[3]]
		if len(c.kord[q]) == 0 {
			continue // not a kord package
		}
		name, member := s[m[4]:m[5]], ""
		if m[6] >= 0 {
			member = s[m[6]:m[7]]
		}
		mention := s[m[0]:m[1]]
		c.mentions++
		line := loc.find(mention)
		cands := c.pkgCandidates(pk, q, false)
		why := c.check(cands, name, member)
		if why != "" && member == "" && strings.HasSuffix(name, "s") && c.check(cands, strings.TrimSuffix(name, "s"), "") == "" {
			why = "" // a plural: metrics.Collectors, sinks that are metrics.Collector
		}
		if why != "" {
			t.Errorf("%s:%d: %s in a doc comment names nothing: %s", rel, line, mention, why)
		}
	}
}

func TestMaskVars(t *testing.T) {
	code := "cluster, err := kordtest.NewCluster()\nclient, err := cluster.Client()\nfunc f(metrics *Thing) { metrics.Foo() }\nkeyed.NewJob(\"x\")\n"
	got := maskVars(code)
	for _, gone := range []string{"cluster.Client", "metrics.Foo"} {
		if strings.Contains(got, gone) {
			t.Errorf("maskVars left %s: %q", gone, got)
		}
	}
	for _, kept := range []string{"kordtest.NewCluster", "keyed.NewJob"} {
		if !strings.Contains(got, kept) {
			t.Errorf("maskVars masked %s: %q", kept, got)
		}
	}
}
