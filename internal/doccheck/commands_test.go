package doccheck

import (
	"fmt"
	"go/ast"
	"go/build"
	"go/build/constraint"
	"go/doc"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode"
	"unicode/utf8"
)

// TestCommands: every `go test` command in README.md, DESIGN.md, docs/,
// bench/RESULTS.md and the READMEs under bench/ runs something. Its
// packages exist in the module the command runs in (the repository's root,
// or the directory a `cd DIR &&` before it names) and have test files;
// its -run, -bench and -fuzz patterns match a Test (Example, Fuzz),
// Benchmark or Fuzz function of them, declared in a _test.go file that
// the command's -tags (and -race) build; so do the -test.run, -test.bench
// and -test.fuzz flags of a test binary built by `go test -c` in the same
// command or code block. Commands in code spans, in shell code blocks
// (fenced or indented) and on several lines (a code span that wraps, a
// line ending with a backslash) count.
//
// With -bench or -fuzz, a -run that does not look like a test's name
// (XXX, ^$) may match nothing: it is there to run no test. A package or a
// pattern that is a placeholder (<pkg>, $PKG) is not checked, nor is a
// command in a directory outside the repository (cd /tmp/old && ...), nor
// a go test in prose with no package ("so `go test` compiles it"). A
// command of bench/RESULTS.md may be history: one whose package is gone is
// not an error when its paragraph, or a heading of its section, says
// "removed"; one whose function is gone, when a heading does.
func TestCommands(t *testing.T) {
	tc := newTestIndex(repoRoot(t))
	checked := 0
	files := commandFiles(t)
	for _, f := range files {
		for _, sc := range scripts(f.lines) {
			for _, c := range sc.commands() {
				checked++
				why := tc.check(c)
				if why == "" {
					continue
				}
				if k := goneKind(why); k != "" && removedNear(f.lines, c.line, k == "package") {
					t.Logf("%s:%d: `%s`: %s; not an error: the text around it says it was removed", f.rel, c.line+1, c.text, why)
					continue
				}
				t.Errorf("%s:%d: `%s`: %s", f.rel, c.line+1, c.text, why)
			}
		}
	}
	t.Logf("checked %d go test commands in %d files", checked, len(files))
	if checked == 0 {
		t.Error("found no go test command in the docs: the parser is broken")
	}
}

// commandFiles are the Markdown files TestCommands reads: README.md,
// DESIGN.md, docs/ (not docs/snippets/), bench/RESULTS.md and every
// README.md under bench/.
func commandFiles(t *testing.T) []mdFile {
	t.Helper()
	files := markdownFiles(t, true)
	r := repoRoot(t)
	rels := []string{"bench/RESULTS.md"}
	bench := filepath.Join(r, "bench")
	err := filepath.WalkDir(bench, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if os.IsNotExist(err) && p == bench {
				return filepath.SkipAll
			}
			return err
		}
		if d.IsDir() {
			if n := d.Name(); p != bench && (n == "testdata" || n == "node_modules" || strings.HasPrefix(n, ".") || strings.HasPrefix(n, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if d.Name() == "README.md" {
			rel, _ := filepath.Rel(r, p)
			rels = append(rels, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return append(files, readMarkdown(t, r, rels)...)
}

// goneKind tells a failure of something that is not there, which history
// may name: "package" (a package or a directory), "func" (no function
// matches), "" for any other failure.
func goneKind(why string) string {
	switch {
	case strings.HasPrefix(why, "no such package"):
		return "package"
	case strings.Contains(why, "matches no "):
		return "func"
	}
	return ""
}

var removedRE = regexp.MustCompile(`(?i)\b(removed|deleted)\b`)

// removedNear reports whether the text around line i says that what the
// command there names was removed: the headings of its section (its own
// and those above it, "## bench/rawloop (history, the tool is removed)")
// say so, or, for a missing package (wide is true), its paragraph does.
func removedNear(lines []string, i int, wide bool) bool {
	level := 7
	for _, h := range slices.Backward(headings(lines)) {
		if h.line > i || h.level >= level {
			continue
		}
		level = h.level
		if removedRE.MatchString(h.text) {
			return true
		}
	}
	if !wide {
		return false
	}
	lo, hi := i, i
	for lo > 0 && strings.TrimSpace(lines[lo-1]) != "" {
		lo--
	}
	for hi+1 < len(lines) && strings.TrimSpace(lines[hi+1]) != "" {
		hi++
	}
	return removedRE.MatchString(strings.Join(lines[lo:hi+1], "\n"))
}

// A script is shell text of a Markdown file: a code span, or the lines of
// a shell code block. Directories changed to (cd) and test binaries built
// (go test -c) carry from one line of a code block to the next.
type script struct {
	lines []logicalLine
}

// logicalLine is one line of shell: lines joined where one ends with a
// backslash, or a code span's lines joined by spaces.
type logicalLine struct {
	first  int // 0-based line of the file where it starts
	text   string
	breaks []int // offsets in text where a line of the file begins
}

func (l logicalLine) lineAt(off int) int {
	n := 0
	for _, b := range l.breaks {
		if b <= off {
			n++
		}
	}
	return l.first + n
}

var goTestRE = regexp.MustCompile(`\bgo\s+test\b`)

// shellInfo are the info strings of fenced blocks that hold shell.
var shellInfo = map[string]bool{"": true, "sh": true, "bash": true, "shell": true, "console": true, "zsh": true, "text": true}

// scripts finds the shell of a Markdown file that mentions go test: code
// spans, fenced blocks with a shell (or no) info string, and indented
// code blocks.
func scripts(lines []string) []script {
	var scs []script
	in := inFence(lines)
	for _, f := range fences(lines) {
		info, _, _ := strings.Cut(f.info, " ")
		if !shellInfo[strings.ToLower(info)] || f.close > len(lines) {
			continue
		}
		end := min(f.close, len(lines))
		if sc := blockScript(lines, f.open+1, end); sc != nil {
			scs = append(scs, *sc)
		}
	}
	// Indented code blocks: a run of lines indented by four spaces or a
	// tab after a blank line, outside fences, that reads as commands.
	for i := 0; i < len(lines); i++ {
		if in[i] || !indented(lines[i]) || i > 0 && strings.TrimSpace(lines[i-1]) != "" {
			continue
		}
		j := i
		for j < len(lines) && !in[j] && strings.TrimSpace(lines[j]) != "" && indented(lines[j]) {
			j++
		}
		if looksLikeShell(lines[i:j]) {
			if sc := blockScript(lines, i, j); sc != nil {
				scs = append(scs, *sc)
			}
		}
		i = j
	}
	for _, seg := range segments(lines) {
		for _, sp := range codeSpans(seg.text) {
			if !goTestRE.MatchString(sp.text) {
				continue
			}
			n := 0
			for seg.text[sp.start+n] == '`' {
				n++
			}
			raw := seg.text[sp.start+n : sp.end-n]
			ll := logicalLine{first: seg.lineOf(sp.start)}
			for k := 0; k < len(raw); k++ {
				if raw[k] == '\n' {
					ll.breaks = append(ll.breaks, k+1)
				}
			}
			ll.text = strings.ReplaceAll(raw, "\n", " ")
			scs = append(scs, script{[]logicalLine{ll}})
		}
	}
	return scs
}

func indented(l string) bool {
	return strings.HasPrefix(l, "    ") || strings.HasPrefix(l, "\t")
}

var shellStartRE = regexp.MustCompile(`^(\$\s+)?(go\s+test\b|cd\s|[A-Za-z_][A-Za-z0-9_]*=\S*\s)`)

// looksLikeShell reports whether an indented block is commands, not a
// list item's text: no backticks, and a line that starts a go test, a cd
// or an environment assignment.
func looksLikeShell(lines []string) bool {
	for _, l := range lines {
		if strings.Contains(l, "`") {
			return false
		}
	}
	for _, l := range lines {
		if shellStartRE.MatchString(strings.TrimSpace(l)) {
			return true
		}
	}
	return false
}

// blockScript is the script of lines[from:to], a code block; nil when it
// does not mention go test.
func blockScript(lines []string, from, to int) *script {
	if !goTestRE.MatchString(strings.Join(lines[from:to], "\n")) {
		return nil
	}
	var sc script
	for i := from; i < to; i++ {
		ll := logicalLine{first: i}
		var b strings.Builder
		for j := i; j < to; j++ {
			s := strings.TrimLeft(lines[j], " \t")
			if j == i {
				s = strings.TrimPrefix(s, "$ ")
			} else {
				b.WriteByte(' ')
				ll.breaks = append(ll.breaks, b.Len())
			}
			cont := strings.HasSuffix(s, "\\") && !strings.HasSuffix(s, "\\\\")
			b.WriteString(strings.TrimSuffix(s, "\\"))
			i = j
			if !cont {
				break
			}
		}
		ll.text = b.String()
		sc.lines = append(sc.lines, ll)
	}
	return &sc
}

var placeholderWordRE = regexp.MustCompile(`^<[A-Za-z][^<>\s]*>`)

// word is a shell word, quotes removed, or an operator.
type word struct {
	text     string
	off, end int // in the line
	op       bool
}

// shellWords splits a line of shell into words and operators (&& || | ;
// & ( ) and redirections), with the quoting of the shell: '...', "...",
// backslashes, $(...) and `...` kept whole. A # that starts a word starts
// a comment.
func shellWords(s string) []word {
	var ws []word
	var cur strings.Builder
	start, inWord := 0, false
	begin := func(i int) {
		if !inWord {
			inWord, start = true, i
		}
	}
	flush := func(i int) {
		if inWord {
			ws = append(ws, word{text: cur.String(), off: start, end: i})
		}
		cur.Reset()
		inWord = false
	}
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n':
			flush(i)
			i++
		case c == '#' && !inWord:
			return ws
		case c == '\'':
			begin(i)
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				j = len(s) - i - 1
			}
			cur.WriteString(s[i+1 : i+1+j])
			i += j + 2
		case c == '"':
			begin(i)
			i++
			for i < len(s) && s[i] != '"' {
				if s[i] == '\\' && i+1 < len(s) && strings.IndexByte("\"\\$`", s[i+1]) >= 0 {
					i++
				}
				cur.WriteByte(s[i])
				i++
			}
			i++
		case c == '\\':
			begin(i)
			if i+1 < len(s) {
				cur.WriteByte(s[i+1])
			}
			i += 2
		case c == '$' && i+1 < len(s) && s[i+1] == '(', c == '`':
			begin(i)
			j, depth := i+1, 0
			for ; j < len(s); j++ {
				if c == '`' {
					if s[j] == '`' {
						break
					}
					continue
				}
				if s[j] == '(' {
					depth++
				} else if s[j] == ')' {
					if depth--; depth == 0 {
						break
					}
				}
			}
			j = min(j, len(s)-1)
			cur.WriteString(s[i : j+1])
			i = j + 1
		case c == '<' && placeholderWordRE.MatchString(s[i:]):
			// <pkg>, <bootstrap>: a placeholder, not a redirection
			begin(i)
			j := strings.IndexByte(s[i:], '>')
			cur.WriteString(s[i : i+j+1])
			i += j + 1
		case strings.IndexByte("&|;()<>", c) >= 0:
			// 2>&1, 2> file: the descriptor's number is part of the
			// redirection.
			if (c == '>' || c == '<') && inWord && strings.Trim(cur.String(), "0123456789") == "" {
				cur.Reset()
				inWord = false
			}
			flush(i)
			op := string(c)
			if i+1 < len(s) {
				switch two := s[i : i+2]; two {
				case "&&", "||", ">>", ">&", "&>", "<<", ";;":
					op = two
				}
			}
			ws = append(ws, word{text: op, off: i, end: i + len(op), op: true})
			i += len(op)
		default:
			begin(i)
			cur.WriteByte(c)
			i++
		}
	}
	flush(len(s))
	return ws
}

func isRedirect(op string) bool {
	return strings.ContainsAny(op, "<>") || op == "&>"
}

// command is a go test command, or a run of a test binary it built, found
// in a Markdown file.
type command struct {
	line int    // 0-based, of its go (or its binary)
	text string // as written, environment included
	dir  string // the directory it runs in, from the repository's root ("" the root)
	cded bool   // dir was set by a cd
	pkgs []string
	tags map[string]bool
	set  map[string]string // -run, -bench, -fuzz, when given: their patterns
	bin  *testBinary       // a run of this binary (pkgs, tags from its go test -c)
	err  string            // why the command is not checked: it names a placeholder, no package, a place outside the repository
}

// testBinary is a test binary that go test -c built.
type testBinary struct {
	dir  string
	pkgs []string
	tags map[string]bool
}

// shellState is where a script is: its directory (known is false when it
// is outside the repository), and the test binaries it built.
type shellState struct {
	dir   string
	known bool
	cded  bool
	bins  map[string]*testBinary
}

// commands parses the script's go test commands and its runs of the test
// binaries they built.
func (sc script) commands() []command {
	st := shellState{known: true, bins: map[string]*testBinary{}}
	var cmds []command
	for _, ll := range sc.lines {
		var stack []shellState
		ws := shellWords(ll.text)
		for i := 0; i < len(ws); {
			if ws[i].op {
				switch ws[i].text {
				case "(":
					stack = append(stack, st)
				case ")":
					if n := len(stack); n > 0 {
						bins := st.bins
						st = stack[n-1]
						st.bins = bins
						stack = stack[:n-1]
					}
				}
				if isRedirect(ws[i].text) {
					i++ // its target
				}
				i++
				continue
			}
			j := i
			var simple []word
			for j < len(ws) && !(ws[j].op && !isRedirect(ws[j].text)) {
				if ws[j].op {
					j += 2 // a redirection and its target
					continue
				}
				simple = append(simple, ws[j])
				j++
			}
			if c, ok := st.run(simple, ll); ok {
				cmds = append(cmds, c)
			}
			i = j
		}
	}
	return cmds
}

var assignRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=`)

// run interprets one simple command: a cd changes the directory; a go
// test, or a run of a binary built by go test -c, is a command to check.
func (st *shellState) run(ws []word, ll logicalLine) (command, bool) {
	if len(ws) == 0 {
		return command{}, false
	}
	first := ws[0].off
	env := map[string]string{}
	for len(ws) > 0 {
		switch w := ws[0].text; {
		case w == "do" || w == "then" || w == "else" || w == "time" || w == "env" || w == "{" || w == "!" || w == "$":
			first = ws[min(1, len(ws)-1)].off
		case assignRE.MatchString(w):
			k, v, _ := strings.Cut(w, "=")
			env[k] = v
		default:
			goto done
		}
		ws = ws[1:]
	}
done:
	if len(ws) == 0 {
		return command{}, false
	}
	text := strings.TrimSpace(ll.text[first:ws[len(ws)-1].end])
	switch {
	case ws[0].text == "cd":
		st.cded = true
		if len(ws) < 2 || strings.HasPrefix(ws[1].text, "/") || strings.ContainsAny(ws[1].text, "~$<>") || ws[1].text == "-" {
			st.known = false
			return command{}, false
		}
		d := path.Join(st.dir, ws[1].text)
		if d == ".." || strings.HasPrefix(d, "../") {
			st.known = false
		}
		if d == "." {
			d = ""
		}
		st.dir = d
		return command{}, false
	case ws[0].text == "go" && len(ws) > 1 && ws[1].text == "test":
		if !st.known {
			return command{}, false
		}
		c := command{line: ll.lineAt(ws[0].off), text: text, dir: st.dir, cded: st.cded, tags: map[string]bool{}, set: map[string]string{}}
		st.parseGoTest(&c, ws[2:], env)
		return c, true
	default:
		b := st.bins[binKey(st.dir, ws[0].text)]
		if b == nil || !st.known {
			return command{}, false
		}
		c := command{line: ll.lineAt(ws[0].off), text: text, dir: b.dir, pkgs: b.pkgs, tags: b.tags, set: map[string]string{}, bin: b}
		for i := 1; i < len(ws); i++ {
			name, val, has := strings.Cut(strings.TrimLeft(ws[i].text, "-"), "=")
			if !strings.HasPrefix(ws[i].text, "-") || !strings.HasPrefix(name, "test.") {
				continue
			}
			name = strings.TrimPrefix(name, "test.")
			if testValueFlags[name] && !has && i+1 < len(ws) {
				i++
				val = ws[i].text
			}
			if name == "run" || name == "bench" || name == "fuzz" {
				c.set[name] = val
				if placeholder(val) {
					c.err = "placeholder"
				}
			}
		}
		return c, true
	}
}

// binKey is how a script names a binary: its path, made absolute from the
// repository's root when relative.
func binKey(dir, p string) string {
	if strings.HasPrefix(p, "/") {
		return path.Clean(p)
	}
	return "/" + path.Join(dir, p)
}

// testValueFlags are the flags of go test and of test binaries that take
// a value (-count 3, -test.count 3); buildValueFlags those of go build.
var (
	testValueFlags = setOf("bench", "benchtime", "blockprofile", "blockprofilerate", "count", "coverprofile", "cpu",
		"cpuprofile", "fuzz", "fuzzcachedir", "fuzzminimizetime", "fuzztime", "list", "memprofile", "memprofilerate",
		"mutexprofile", "mutexprofilefraction", "outputdir", "parallel", "run", "shuffle", "skip", "timeout", "trace",
		"artifacts", "testlogfile", "gocoverdir")
	buildValueFlags = setOf("C", "asmflags", "buildmode", "compiler", "covermode", "coverpkg", "exec",
		"gccgoflags", "gcflags", "installsuffix", "ldflags", "mod", "modfile", "o", "overlay", "p", "pgo",
		"pkgdir", "tags", "toolexec", "vet")
	boolFlags = setOf("a", "asan", "benchmem", "buildvcs", "c", "cover", "failfast", "fullpath", "i", "json",
		"linkshared", "modcacherw", "msan", "n", "paniconexit0", "race", "short", "trimpath", "v", "work", "x")
)

func setOf(names ...string) map[string]bool {
	m := map[string]bool{}
	for _, n := range names {
		m[n] = true
	}
	return m
}

// parseGoTest reads go test's arguments as go test does: flags (known
// ones with their values), then the packages, then, after a flag go test
// does not know (-update), arguments of the test binary. It registers the
// binary that -c builds.
func (st *shellState) parseGoTest(c *command, args []word, env map[string]string) {
	compile, race, out := false, false, ""
	cgo := env["CGO_ENABLED"] != "0"
	for _, f := range strings.Fields(env["GOFLAGS"]) {
		if v, ok := strings.CutPrefix(f, "-tags="); ok {
			addTags(c.tags, v)
		}
	}
	pkgsStarted, inPkgs := false, false
	for i := 0; i < len(args); i++ {
		a := args[i].text
		if a == "-args" || a == "--args" {
			break
		}
		if len(a) > 1 && a[0] == '-' {
			inPkgs = false
			name, val, has := strings.Cut(strings.TrimLeft(a, "-"), "=")
			name = strings.TrimPrefix(name, "test.")
			switch {
			case testValueFlags[name] || buildValueFlags[name]:
				if !has && i+1 < len(args) {
					i++
					val = args[i].text
				}
			case boolFlags[name]:
				if has && val != "true" && val != "1" {
					continue
				}
			default:
				pkgsStarted = true // a flag of the test binary: what follows is not a package
				continue
			}
			switch name {
			case "tags":
				addTags(c.tags, val)
			case "run", "bench", "fuzz":
				c.set[name] = val
			case "c":
				compile = true
			case "race":
				race = true
			case "o":
				out = val
			case "C":
				if strings.HasPrefix(val, "/") || placeholder(val) {
					c.err = "outside"
				}
				c.dir, c.cded = path.Join(c.dir, val), true
				if c.dir == "." {
					c.dir = ""
				} else if c.dir == ".." || strings.HasPrefix(c.dir, "../") {
					c.err = "outside"
				}
			}
			continue
		}
		if pkgsStarted && !inPkgs {
			break // arguments of the test binary
		}
		pkgsStarted, inPkgs = true, true
		c.pkgs = append(c.pkgs, a)
	}
	if race {
		c.tags["race"] = true
	}
	if !cgo {
		c.tags["!cgo"] = true
	}
	for _, p := range c.pkgs {
		if placeholder(p) {
			c.err = "placeholder"
		}
	}
	for _, v := range c.set {
		if placeholder(v) {
			c.err = "placeholder"
		}
	}
	if len(c.pkgs) == 0 && !c.cded {
		// go test in prose, with no package: the reader's package, not
		// the repository's root.
		c.err = "no package"
	}
	if compile && c.err == "" && len(c.pkgs) <= 1 {
		p := "."
		if len(c.pkgs) == 1 {
			p = c.pkgs[0]
		}
		elem := path.Base(path.Join("/"+c.dir, strings.TrimSuffix(p, "/")))
		if out == "" {
			out = elem + ".test"
		} else if strings.HasSuffix(out, "/") {
			out += elem + ".test"
		}
		st.bins[binKey(c.dir, out)] = &testBinary{dir: c.dir, pkgs: c.pkgs, tags: c.tags}
	}
}

func addTags(tags map[string]bool, v string) {
	for _, tag := range strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == ' ' }) {
		tags[tag] = true
	}
}

var placeholderRE = regexp.MustCompile(`<[^<>]*>|\$[A-Za-z_{(]|^\.\.\.$`)

func placeholder(s string) bool {
	return placeholderRE.MatchString(s)
}

// testIndex reads the repository's test files, each directory once.
type testIndex struct {
	root string
	mu   sync.Mutex
	dirs map[string]*testDir // by directory from the root
}

// testDir is a directory's Go files: whether it has any, and its test
// files.
type testDir struct {
	exists  bool
	goFiles bool
	files   []*testFile
}

// testFile is a _test.go file: its build constraint and its tests.
type testFile struct {
	name   string
	expr   constraint.Expr // nil when it has none
	goos   string          // a GOOS or GOARCH its name constrains it to
	funcs  []testFunc
	parsed error
}

// testFunc is a function go test runs: kind is Test, Benchmark, Fuzz or
// Example (examples only with an output comment).
type testFunc struct {
	kind, name string
}

func newTestIndex(root string) *testIndex {
	return &testIndex{root: root, dirs: map[string]*testDir{}}
}

// dir reads directory rel (from the root), parsing its test files in
// parallel.
func (ti *testIndex) dir(rel string) *testDir {
	ti.mu.Lock()
	d, ok := ti.dirs[rel]
	ti.mu.Unlock()
	if ok {
		return d
	}
	d = &testDir{}
	entries, err := os.ReadDir(filepath.Join(ti.root, filepath.FromSlash(rel)))
	if err == nil {
		d.exists = true
		var wg sync.WaitGroup
		for _, e := range entries {
			n := e.Name()
			if e.IsDir() || !strings.HasSuffix(n, ".go") || strings.HasPrefix(n, ".") || strings.HasPrefix(n, "_") {
				continue
			}
			d.goFiles = true
			if !strings.HasSuffix(n, "_test.go") {
				continue
			}
			tf := &testFile{name: n, goos: nameConstraint(n)}
			d.files = append(d.files, tf)
			wg.Add(1)
			go func() {
				defer wg.Done()
				tf.parse(filepath.Join(ti.root, filepath.FromSlash(rel), n))
			}()
		}
		wg.Wait()
	}
	ti.mu.Lock()
	ti.dirs[rel] = d
	ti.mu.Unlock()
	return d
}

func (tf *testFile) parse(p string) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, p, nil, parser.ParseComments|parser.SkipObjectResolution)
	if err != nil {
		tf.parsed = err
		return
	}
	for _, cg := range f.Comments {
		if cg.Pos() > f.Package {
			break
		}
		for _, c := range cg.List {
			if constraint.IsGoBuild(c.Text) {
				if x, err := constraint.Parse(c.Text); err == nil {
					tf.expr = x
				}
			}
		}
	}
	for _, d := range f.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok || fd.Recv != nil {
			continue
		}
		name := fd.Name.Name
		for _, k := range []struct{ prefix, arg string }{{"Test", "T"}, {"Benchmark", "B"}, {"Fuzz", "F"}} {
			if isTest(name, k.prefix) && testParam(fd) == k.arg {
				tf.funcs = append(tf.funcs, testFunc{k.prefix, name})
			}
		}
	}
	for _, ex := range doc.Examples(f) {
		if ex.Output != "" || ex.EmptyOutput {
			tf.funcs = append(tf.funcs, testFunc{"Example", "Example" + ex.Name})
		}
	}
}

// isTest is go test's test: name is prefix, or prefix and a rune that is
// not lower case.
func isTest(name, prefix string) bool {
	if !strings.HasPrefix(name, prefix) {
		return false
	}
	if len(name) == len(prefix) {
		return true
	}
	r, _ := utf8.DecodeRuneInString(name[len(prefix):])
	return !unicode.IsLower(r)
}

// testParam is the T of a function's one parameter of type *T or *pkg.T
// ("" for any other signature).
func testParam(fd *ast.FuncDecl) string {
	ps := fd.Type.Params.List
	if len(ps) != 1 || len(ps[0].Names) > 1 || fd.Type.Results != nil && len(fd.Type.Results.List) > 0 {
		return ""
	}
	star, ok := ps[0].Type.(*ast.StarExpr)
	if !ok {
		return ""
	}
	switch x := star.X.(type) {
	case *ast.Ident:
		return x.Name
	case *ast.SelectorExpr:
		return x.Sel.Name
	}
	return ""
}

var (
	knownOS = setOf("aix", "android", "darwin", "dragonfly", "freebsd", "hurd", "illumos", "ios", "js", "linux",
		"nacl", "netbsd", "openbsd", "plan9", "solaris", "wasip1", "windows", "zos")
	unixOS = setOf("aix", "android", "darwin", "dragonfly", "freebsd", "hurd", "illumos", "ios", "linux",
		"netbsd", "openbsd", "solaris")
	knownArch = setOf("386", "amd64", "amd64p32", "arm", "armbe", "arm64", "arm64be", "loong64", "mips", "mipsle",
		"mips64", "mips64le", "mips64p32", "mips64p32le", "ppc", "ppc64", "ppc64le", "riscv", "riscv64", "s390",
		"s390x", "sparc", "sparc64", "wasm")
)

// nameConstraint is the constraint of a file's name (x_linux_test.go,
// x_linux_arm64_test.go) as a build expression, "" when it has none.
func nameConstraint(name string) string {
	name = strings.TrimSuffix(strings.TrimSuffix(name, ".go"), "_test")
	i := strings.Index(name, "_")
	if i < 0 {
		return ""
	}
	l := strings.Split(name[i:], "_")
	n := len(l)
	if n >= 2 && knownOS[l[n-2]] && knownArch[l[n-1]] {
		return l[n-2] + " && " + l[n-1]
	}
	if n >= 1 && (knownOS[l[n-1]] || knownArch[l[n-1]]) {
		return l[n-1]
	}
	return ""
}

var releaseTags = setOf(build.Default.ReleaseTags...)

// builds reports whether the file is built with tags (and the host's
// GOOS and GOARCH, cgo unless tags has "!cgo", gc, unix where it applies,
// the release tags).
func (tf *testFile) builds(tags map[string]bool) bool {
	has := func(tag string) bool {
		switch {
		case tags[tag], tag == runtime.GOOS, tag == runtime.GOARCH, tag == "gc", releaseTags[tag]:
			return true
		case tag == "cgo":
			return !tags["!cgo"]
		case tag == "unix":
			return unixOS[runtime.GOOS]
		case tag == "linux":
			return runtime.GOOS == "android"
		case tag == "solaris":
			return runtime.GOOS == "illumos"
		case tag == "darwin":
			return runtime.GOOS == "ios"
		}
		return false
	}
	if tf.goos != "" {
		x, err := constraint.Parse("//go:build " + tf.goos)
		if err == nil && !x.Eval(has) {
			return false
		}
	}
	return tf.expr == nil || tf.expr.Eval(has)
}

// why is a file's build constraint, for a message.
func (tf *testFile) why() string {
	var parts []string
	if tf.expr != nil {
		parts = append(parts, "//go:build "+tf.expr.String())
	}
	if tf.goos != "" {
		parts = append(parts, "its name: "+tf.goos)
	}
	return strings.Join(parts, ", ")
}

// moduleOf is the directory of the module that holds rel: the nearest
// directory up from it with a go.mod.
func (ti *testIndex) moduleOf(rel string) string {
	for d := rel; ; {
		if _, err := os.Stat(filepath.Join(ti.root, filepath.FromSlash(d), "go.mod")); err == nil {
			return d
		}
		if d == "" {
			return ""
		}
		d = path.Dir(d)
		if d == "." {
			d = ""
		}
	}
}

func (ti *testIndex) modulePath(mod string) string {
	b, err := os.ReadFile(filepath.Join(ti.root, filepath.FromSlash(mod), "go.mod"))
	if err != nil {
		return ""
	}
	for _, l := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(strings.TrimSpace(l), "module "); ok {
			return strings.Trim(strings.TrimSpace(p), `"`)
		}
	}
	return ""
}

// pkgGroup is what one package argument names: one directory, or those
// under a /... pattern.
type pkgGroup struct {
	arg  string
	dirs []string
}

// show is a directory for a message.
func show(rel string) string {
	if rel == "" {
		return "the repository's root"
	}
	return rel + "/"
}

// resolve finds the packages of a command's arguments, in the module of
// its directory; why is set when one is missing.
func (ti *testIndex) resolve(c command) (groups []pkgGroup, why string) {
	mod := ti.moduleOf(c.dir)
	modPath := ti.modulePath(mod)
	args := c.pkgs
	if len(args) == 0 {
		args = []string{"."}
	}
	for _, a := range args {
		var rel string
		switch {
		case a == "." || a == ".." || strings.HasPrefix(a, "./") || strings.HasPrefix(a, "../"):
			rel = path.Join(c.dir, a)
		case modPath != "" && (a == modPath || strings.HasPrefix(a, modPath+"/")):
			rel = path.Join(mod, strings.TrimPrefix(strings.TrimPrefix(a, modPath), "/"))
		default:
			continue // the standard library's, another module's
		}
		if rel == "." {
			rel = ""
		}
		if rel == ".." || strings.HasPrefix(rel, "../") {
			return nil, fmt.Sprintf("package %s is outside the repository", a)
		}
		pattern := false
		if rel == "..." || strings.HasSuffix(rel, "/...") {
			pattern = true
			rel = strings.TrimSuffix(strings.TrimSuffix(rel, "..."), "/")
		} else if strings.Contains(rel, "...") {
			continue // a pattern like ./x...: not checked
		}
		if !ti.dir(rel).exists {
			return nil, fmt.Sprintf("no such package %s: no directory %s", a, show(rel))
		}
		if m := ti.moduleOf(rel); m != mod {
			return nil, fmt.Sprintf("package %s is in the module of %s (a go.mod of its own), not in the module of %s where the command runs: cd %s first", a, show(m), show(mod), m)
		}
		if !pattern {
			d := ti.dir(rel)
			switch {
			case !d.goFiles:
				return nil, fmt.Sprintf("no such package %s: %s has no Go files", a, show(rel))
			case len(d.files) == 0:
				return nil, fmt.Sprintf("package %s has no test files", a)
			}
			var built bool
			var cons []string
			for _, f := range d.files {
				if f.builds(c.tags) {
					built = true
				} else if w := f.why(); !slices.Contains(cons, w) {
					cons = append(cons, w)
				}
			}
			if !built {
				return nil, fmt.Sprintf("package %s has no test file the command builds: they are built only with %s (the command's tags: %s)", a, strings.Join(cons, "; "), tagList(c.tags))
			}
			groups = append(groups, pkgGroup{a, []string{rel}})
			continue
		}
		g := pkgGroup{arg: a}
		err := filepath.WalkDir(filepath.Join(ti.root, filepath.FromSlash(rel)), func(p string, e fs.DirEntry, err error) error {
			if err != nil || !e.IsDir() {
				return err
			}
			r, _ := filepath.Rel(ti.root, p)
			r = filepath.ToSlash(r)
			if r == "." {
				r = ""
			}
			if r != rel {
				n := e.Name()
				if n == "testdata" || n == "vendor" || strings.HasPrefix(n, ".") || strings.HasPrefix(n, "_") {
					return filepath.SkipDir
				}
				if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil {
					return filepath.SkipDir
				}
			}
			if d := ti.dir(r); len(d.files) > 0 {
				g.dirs = append(g.dirs, r)
			}
			return nil
		})
		if err != nil {
			return nil, err.Error()
		}
		if len(g.dirs) == 0 {
			return nil, fmt.Sprintf("%s matches no package with test files", a)
		}
		groups = append(groups, g)
	}
	return groups, ""
}

func tagList(tags map[string]bool) string {
	var ts []string
	for t := range tags {
		if t != "!cgo" {
			ts = append(ts, t)
		}
	}
	if len(ts) == 0 {
		return "none"
	}
	slices.Sort(ts)
	return strings.Join(ts, ",")
}

// topPatterns are the patterns a top-level test's name must match for
// pattern to select it, as the testing package splits it: each
// alternative (a | outside brackets and parentheses) up to its first /.
func topPatterns(pattern string) []string {
	var alts []string
	cs, cp, inFirst := 0, 0, true
	start := 0
	for i := 0; i < len(pattern); i++ {
		switch pattern[i] {
		case '[':
			cs++
		case ']':
			if cs--; cs < 0 {
				cs = 0
			}
		case '(':
			if cs == 0 {
				cp++
			}
		case ')':
			if cs == 0 {
				cp--
			}
		case '\\':
			i++
		case '/':
			if cs == 0 && cp == 0 && inFirst {
				alts = append(alts, pattern[start:i])
				inFirst = false
			}
		case '|':
			if cs == 0 && cp == 0 {
				if inFirst {
					alts = append(alts, pattern[start:i])
				}
				start, inFirst = i+1, true
			}
		}
	}
	if inFirst {
		alts = append(alts, pattern[start:])
	}
	return alts
}

// flagKinds are the functions each flag selects.
var flagKinds = map[string][]string{
	"run":   {"Test", "Fuzz", "Example"},
	"bench": {"Benchmark"},
	"fuzz":  {"Fuzz"},
}

var testNameRE = regexp.MustCompile(`^\^?\(?(Test|Example|Fuzz)`)

// check checks a command: "" when it runs something, else why not.
func (ti *testIndex) check(c command) string {
	if c.err != "" {
		return ""
	}
	groups, why := ti.resolve(c)
	if why != "" {
		return why
	}
	if len(groups) == 0 {
		return "" // packages this test does not read
	}
	_, bench := c.set["bench"]
	_, fuzz := c.set["fuzz"]
	var whys []string
	for _, flag := range []string{"run", "bench", "fuzz"} {
		pat, ok := c.set[flag]
		if !ok {
			continue
		}
		pre := "-"
		if c.bin != nil {
			pre = "-test."
		}
		alts := topPatterns(pat)
		res := make([]*regexp.Regexp, len(alts))
		for i, p := range alts {
			re, err := regexp.Compile(p)
			if err != nil {
				return fmt.Sprintf("%s%s %q is no regular expression: %v", pre, flag, pat, err)
			}
			res[i] = re
		}
		if flag == "run" && (bench || fuzz) && !testNameRE.MatchString(pat) {
			continue // -run XXX: no test, only the benchmarks or the fuzzing
		}
		kinds := strings.Join(flagKinds[flag], ", ")
		for _, g := range groups {
			// Per alternative (-run 'TestA|TestB'): the functions it
			// selects, and those it would in files the command does not
			// build.
			found := make([][]string, len(alts))
			excluded := make([][]string, len(alts))
			var fuzzed []string
			for _, rel := range g.dirs {
				for _, f := range ti.dir(rel).files {
					for _, fn := range f.funcs {
						if !slices.Contains(flagKinds[flag], fn.kind) {
							continue
						}
						any := false
						for i, re := range res {
							if !re.MatchString(fn.name) {
								continue
							}
							any = true
							if f.builds(c.tags) {
								found[i] = append(found[i], fn.name)
							} else {
								excluded[i] = append(excluded[i], fmt.Sprintf("%s in %s (%s)", fn.name, path.Join(rel, f.name), f.why()))
							}
						}
						if any && flag == "fuzz" && f.builds(c.tags) {
							fuzzed = append(fuzzed, path.Join(rel, fn.name))
						}
					}
				}
			}
			none := !slices.ContainsFunc(found, func(fs []string) bool { return len(fs) > 0 })
			for i := range alts {
				what := fmt.Sprintf("%s%s %s", pre, flag, pat)
				switch {
				case len(found[i]) > 0:
					continue
				case none && i > 0:
					continue // reported as a whole
				case !none:
					what = fmt.Sprintf("%s%s %s: its alternative %q", pre, flag, pat, alts[i])
				}
				var ex []string
				for j := range alts {
					if none || j == i {
						for _, e := range excluded[j] {
							if !slices.Contains(ex, e) {
								ex = append(ex, e)
							}
						}
					}
				}
				if len(ex) > 0 {
					whys = append(whys, fmt.Sprintf("%s matches in %s only %s, which the command does not build (its tags: %s)", what, g.arg, strings.Join(ex, ", "), tagList(c.tags)))
				} else {
					whys = append(whys, fmt.Sprintf("%s matches no %s function of %s", what, kinds, g.arg))
				}
			}
			if len(fuzzed) > 1 {
				whys = append(whys, fmt.Sprintf("%sfuzz %s matches more than one fuzz test (%s): go test fuzzes one", pre, pat, strings.Join(fuzzed, ", ")))
			}
		}
		if flag == "fuzz" && len(groups) == 1 && len(groups[0].dirs) > 1 || flag == "fuzz" && len(groups) > 1 {
			whys = append(whys, fmt.Sprintf("%sfuzz with more than one package: go test fuzzes one package", pre))
		}
	}
	return strings.Join(whys, "; ")
}

func TestShellWords(t *testing.T) {
	for line, want := range map[string]string{
		`KORD_X=1 go test -run 'A|B' ./x/`:                  `KORD_X=1|go|test|-run|A|B|./x/`,
		`cd bench/peers && go test . > out.txt 2>&1`:        `cd|bench/peers|&&|go|test|.|>|out.txt|>&|1`,
		`B=$(scripts/kafka.sh start) go test "./x" # note`:  `B=$(scripts/kafka.sh start)|go|test|./x`,
		`(cd /tmp/a && go test -c ./k/) && /tmp/a.test -v`:  `(|cd|/tmp/a|&&|go|test|-c|./k/|)|&&|/tmp/a.test|-v`,
		`go test -run 'Test\(x\)' -tags "a b" ./...;echo x`: `go|test|-run|Test\(x\)|-tags|a b|./...|;|echo|x`,
	} {
		var got []string
		for _, w := range shellWords(line) {
			got = append(got, w.text)
		}
		if g := strings.Join(got, "|"); g != want {
			t.Errorf("shellWords(%q) = %q, want %q", line, g, want)
		}
	}
}

func TestTopPatterns(t *testing.T) {
	for pat, want := range map[string]string{
		"TestA":            "TestA",
		"TestA/sub":        "TestA",
		"TestA|TestB/sub":  "TestA,TestB",
		"^Test(A|B)$/x":    "^Test(A|B)$",
		"Test[/|]x":        "Test[/|]x",
		"TestA/x|TestB/y":  "TestA,TestB",
		"":                 "",
		"^$":               "^$",
		"/sub":             "",
		`Test\/x|Test\|y`:  `Test\/x,Test\|y`,
		"TestA/(x|y)|TstB": "TestA,TstB",
	} {
		if got := strings.Join(topPatterns(pat), ","); got != want {
			t.Errorf("topPatterns(%q) = %q, want %q", pat, got, want)
		}
	}
}

func TestCommandParse(t *testing.T) {
	lines := []string{
		"Run `KORD_X=1 go test -tags kordfailpoints,race -run 'TestA|TestB/x' -count=N ./keyed/ -update` and",
		"`cd bench/peers && go test -run XXX -bench . ./...`.",
		"",
		"```sh",
		"cd bench/suite",
		"go test -c -o /tmp/s.test . # built",
		"/tmp/s.test -test.run XXX -test.bench Watch \\",
		"  -test.count 2",
		"```",
		"",
		"    go test -short \\",
		"      ./internal/...",
		"",
		"So `go test` compiles it; `go test ./<pkg>/`.",
	}
	type want struct {
		line                 int
		dir                  string
		pkgs, tags, run, bin string
	}
	var got []want
	for _, sc := range scripts(lines) {
		for _, c := range sc.commands() {
			bin := ""
			if c.bin != nil {
				bin = "bin"
			}
			if c.err != "" {
				bin = c.err
			}
			got = append(got, want{c.line, c.dir, strings.Join(c.pkgs, " "), tagList(c.tags), c.set["run"] + "|" + c.set["bench"], bin})
		}
	}
	slices.SortStableFunc(got, func(a, b want) int { return a.line - b.line })
	wants := []want{
		{0, "", "./keyed/", "kordfailpoints,race", "TestA|TestB/x|", ""},
		{1, "bench/peers", "./...", "none", "XXX|.", ""},
		{5, "bench/suite", ".", "none", "|", ""},
		{6, "bench/suite", ".", "none", "XXX|Watch", "bin"},
		{10, "", "./internal/...", "none", "|", ""},
		{13, "", "", "none", "|", "no package"},
		{13, "", "./<pkg>/", "none", "|", "placeholder"},
	}
	if !slices.Equal(got, wants) {
		t.Errorf("commands:\n got %v\nwant %v", got, wants)
	}
}

// TestCommandCheck runs the checks on a module of its own: a package with
// tests, a file built only with a tag, a nested module.
func TestCommandCheck(t *testing.T) {
	root := t.TempDir()
	for name, text := range map[string]string{
		"go.mod":                           "module example.com/m\n",
		"a/a.go":                           "package a\n",
		"a/a_test.go":                      "package a\n\nimport \"testing\"\n\nfunc TestA(t *testing.T) {}\nfunc Testlower(t *testing.T) {}\nfunc BenchmarkA(b *testing.B) {}\nfunc FuzzA(f *testing.F) {}\nfunc FuzzAB(f *testing.F) {}\n",
		"a/fp_test.go":                     "//go:build kordfailpoints\n\npackage a\n\nimport \"testing\"\n\nfunc TestCrash(t *testing.T) {}\n",
		"a/ex_test.go":                     "package a_test\n\nfunc ExampleRun() {\n\t// Output: x\n}\n\nfunc ExampleQuiet() {}\n",
		"a/b/b.go":                         "package b\n",
		"a/b/windows_only_windows_test.go": "package b\n\nimport \"testing\"\n\nfunc TestWin(t *testing.T) {}\n",
		"c/c.go":                           "package c\n",
		"sub/go.mod":                       "module example.com/m/sub\n",
		"sub/s_test.go":                    "package sub\n\nimport \"testing\"\n\nfunc BenchmarkS(b *testing.B) {}\n",
	} {
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	win := runtime.GOOS == "windows"
	ti := newTestIndex(root)
	for cmd, want := range map[string]string{
		"go test ./a/":                                        "",
		"go test -run TestA ./a/":                             "",
		"go test -run 'TestA/sub|Nothing' ./a/":               "its alternative \"Nothing\" matches no",
		"go test -run 'TestA|TestCrash' ./a/":                 "its alternative \"TestCrash\" matches in ./a/ only TestCrash in a/fp_test.go",
		"go test -run 'TestA/sub|FuzzA$' ./a/":                "",
		"go test -run ExampleRun ./a/":                        "",
		"go test -run ExampleQuiet ./a/":                      "matches no Test, Fuzz, Example function",
		"go test -run Testlower ./a/":                         "matches no",
		"go test -run TestCrash ./a/":                         "TestCrash in a/fp_test.go (//go:build kordfailpoints), which the command does not build",
		"go test -tags kordfailpoints -run TestCrash ./a/":    "",
		"go test -tags=x,kordfailpoints -run TestCrash ./...": "",
		"go test -run TestCrash ./...":                        "which the command does not build",
		"go test -run XXX -bench . ./a/":                      "",
		"go test -run '^$' -bench A ./a/":                     "",
		"go test -run TestMisspelt -bench A ./a/":             "-run TestMisspelt matches no",
		"go test -bench Nothing ./a/":                         "-bench Nothing matches no Benchmark function of ./a/",
		"go test -run XXX -fuzz FuzzAB ./a/":                  "",
		"go test -run XXX -fuzz FuzzA ./a/":                   "more than one fuzz test",
		"go test -run XXX -fuzz FuzzAB ./...":                 "more than one package",
		"go test -run '(' ./a/":                               "no regular expression",
		"go test ./nope/":                                     "no such package ./nope/",
		"go test ./c/":                                        "package ./c/ has no test files",
		"go test ./c/...":                                     "./c/... matches no package with test files",
		"go test ./sub/":                                      "in the module of sub/",
		"cd sub && go test -bench S .":                        "",
		"cd sub && go test -bench S ./...":                    "",
		"cd sub && go test -bench Nothing .":                  "matches no Benchmark",
		"go test example.com/m/a":                             "",
		"go test -c -o /tmp/a.test ./a/ && /tmp/a.test -test.run XXX -test.bench A": "",
		"go test -c ./a/ && ./a.test -test.run TestNothing":                         "-test.run TestNothing matches no",
		"go test ./<pkg>/":                         "",
		"go test -run <Test> ./a/":                 "",
		"cd /tmp/elsewhere && go test -run X ./a/": "",
		"go test -C sub -bench S .":                "",
		"go test -C sub -bench Nothing .":          "matches no Benchmark",
	} {
		var whys []string
		for _, sc := range scripts([]string{"`" + cmd + "`"}) {
			for _, c := range sc.commands() {
				if w := ti.check(c); w != "" {
					whys = append(whys, w)
				}
			}
		}
		got := strings.Join(whys, "; ")
		if want == "" && got != "" || want != "" && !strings.Contains(got, want) {
			t.Errorf("%s: got %q, want %q", cmd, got, want)
		}
	}
	if got := ti.check(command{pkgs: []string{"./a/b/"}, tags: map[string]bool{}}); (got == "") != win {
		t.Errorf("a test file named _windows_test.go: got %q", got)
	}
}

func TestRemovedNear(t *testing.T) {
	lines := []string{
		"## bench/rawloop (history, the tool is removed)", // 0
		"",
		"### Throughput",
		"",
		"`go test -bench X ./bench/rawloop/`", // 4
		"",
		"## Keyed",
		"",
		"A key is added or removed; `go test -bench Y ./keyed/`.", // 8
	}
	for _, c := range []struct {
		line int
		wide bool
		want bool
	}{{4, false, true}, {4, true, true}, {8, false, false}, {8, true, true}} {
		if got := removedNear(lines, c.line, c.wide); got != c.want {
			t.Errorf("removedNear(line %d, wide %v) = %v, want %v", c.line, c.wide, got, c.want)
		}
	}
}
