package doccheck

import (
	"go/ast"
	"regexp"
	"strings"
	"testing"
)

var (
	groupRE      = regexp.MustCompile(`\([^()]*\)|\[[^\[\]]*\]|\{[^{}]*\}`)
	methodExprRE = regexp.MustCompile(`^\(\*?([A-Za-z_][A-Za-z0-9_.]*)\)\.`)
	refRE        = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*){1,2}$`)
)

// fileExts are the last elements of code spans that name files, not Go
// declarations (`metrics.txt`, `keyed.go`).
var fileExts = map[string]bool{
	"go": true, "md": true, "txt": true, "sh": true, "json": true, "yaml": true, "yml": true, "toml": true,
	"properties": true, "proto": true, "avsc": true, "mod": true, "sum": true, "html": true, "js": true,
	"csv": true, "parquet": true, "log": true, "conf": true, "jks": true, "p12": true, "pem": true,
	"key": true, "crt": true, "xml": true, "gz": true, "tgz": true, "zip": true, "png": true, "svg": true,
	"orc": true, "avro": true, "jsonl": true, "ndjson": true, "test": true, "pb": true,
}

// goRef normalizes a code span to a Go reference, pkg.Name or
// pkg.Name.Member, or returns ok false when it does not look like one: it
// drops a leading * or & or [], call parentheses, type arguments and
// composite literals' braces (keyed.MapState[K, V].Get becomes
// keyed.MapState.Get), and rejects anything left with spaces, slashes or
// other punctuation, with more than three elements, or naming a file.
func goRef(span string) (parts []string, ok bool) {
	s := strings.TrimSpace(span)
	s = methodExprRE.ReplaceAllString(s, "$1.") // (*keyed.Job).Run
	s = strings.TrimLeft(s, "*&")
	s = strings.TrimPrefix(s, "[]")
	s = strings.TrimLeft(s, "*")
	for {
		t := groupRE.ReplaceAllString(s, "")
		if t == s {
			break
		}
		s = t
	}
	if !refRE.MatchString(s) {
		return nil, false
	}
	parts = strings.Split(s, ".")
	if fileExts[parts[len(parts)-1]] {
		return nil, false
	}
	return parts, true
}

// TestNames: every backticked pkg.Name, pkg.Type.Member (and their
// *pointer, call and generic forms) in README.md, DESIGN.md and docs/
// whose pkg is one of kord's packages names an exported declaration of
// it. DESIGN.md, for contributors, may also name internal packages, and
// any of their declarations.
func TestNames(t *testing.T) {
	l := getLoader(t)
	public := l.byName(func(pk *pkg) bool { return !pk.internal })
	all := l.byName(func(*pkg) bool { return true })
	checked := 0
	files := markdownFiles(t, true)
	defer func() { t.Logf("checked %d names in %d files", checked, len(files)) }()
	for _, f := range files {
		design := f.rel == "DESIGN.md"
		for _, seg := range segments(f.lines) {
			for _, sp := range codeSpans(seg.text) {
				parts, ok := goRef(sp.text)
				if !ok {
					continue
				}
				cands := public[parts[0]]
				if design {
					cands = all[parts[0]]
				}
				if len(cands) == 0 {
					continue // not a kord package: a Kafka setting, a variable, ...
				}
				if !ast.IsExported(parts[1]) && !(design && cands[0].internal) {
					continue // `partitioner.class`, `keyed.keyby`: a setting or a value, not an exported name
				}
				member := ""
				if len(parts) == 3 {
					member = parts[2]
				}
				checked++
				var why []string
				for _, pk := range cands {
					w := l.resolve(pk, parts[1], member, !(design && pk.internal))
					if w == "" {
						why = nil
						break
					}
					why = append(why, w)
				}
				if len(why) > 0 {
					t.Errorf("%s:%d: `%s` names nothing: %s", f.rel, seg.lineOf(sp.start)+1, sp.text, strings.Join(why, "; "))
				}
			}
		}
	}
}

func TestGoRef(t *testing.T) {
	for span, want := range map[string]string{
		"keyed.KeyBy":                  "keyed.KeyBy",
		"*kafkaio.Sink":                "kafkaio.Sink",
		"keyed.MapState[K, V].Get":     "keyed.MapState.Get",
		"keyed.NewJob(name, opts...)":  "keyed.NewJob",
		"job.Run()":                    "job.Run",
		"[]keyed.Record":               "keyed.Record",
		"keyed.Options{Dir: d}":        "keyed.Options",
		"(*keyed.Job).Run":             "keyed.Job.Run",
		"keyed.go":                     "",
		"transaction.timeout.ms":       "transaction.timeout.ms",
		"a.b.c.d":                      "",
		"go test ./...":                "",
		"docs/snippets/readme":         "",
		"kafkaio.Sink's":               "",
		"keyed.ValueState[int64].Set(": "",
	} {
		parts, ok := goRef(span)
		got := strings.Join(parts, ".")
		if !ok {
			got = ""
		}
		if got != want {
			t.Errorf("goRef(%q) = %q, want %q", span, got, want)
		}
	}
}
