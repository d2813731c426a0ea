package doccheck

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/build/constraint"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
)

const modPath = "github.com/kordproject/kord"

// pkg is one parsed package: its non-test files, and what they declare.
type pkg struct {
	path     string // import path
	rel      string // path from the module's root ("" for the root); set for kord's packages only
	name     string // package clause
	dir      string
	main     bool
	internal bool // an internal package (its path has an internal element)

	fset  *token.FileSet
	files map[string]*ast.File // by file name, non-test files only

	decls   map[string]string               // top-level name: "type", "func", "var" or "const"
	types   map[string]typeDecl             // type name: its declaration
	methods map[string]map[string]bool      // type name: its methods' names
	imports map[string]string               // import name (explicit or assumed): path; "" when two files use the name for different paths
	fileImp map[*ast.File]map[string]string // per file, import name: path
}

type typeDecl struct {
	spec *ast.TypeSpec
	file *ast.File
}

// root is the module's root directory: the nearest directory up from the
// test's with a go.mod declaring kord's module.
var root = sync.OnceValues(func() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.HasPrefix(b, []byte("module "+modPath+"\n")) {
			return dir, nil
		}
		up := filepath.Dir(dir)
		if up == dir {
			return "", fmt.Errorf("no go.mod of %s above the test's directory", modPath)
		}
		dir = up
	}
})

func repoRoot(t *testing.T) string {
	t.Helper()
	r, err := root()
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// loader parses packages once: kord's own from the module's tree, the
// standard library's from GOROOT, any other through go list.
type loader struct {
	mu    sync.Mutex
	root  string
	pkgs  map[string]*pkg // by import path; nil for a path that is no package
	kord  []*pkg          // the module's packages, sorted by path
	errs  map[string]error
	goDir map[string]string
}

var theLoader = sync.OnceValues(func() (*loader, error) {
	r, err := root()
	if err != nil {
		return nil, err
	}
	l := &loader{root: r, pkgs: map[string]*pkg{}, errs: map[string]error{}}
	if err := l.loadModule(); err != nil {
		return nil, err
	}
	return l, nil
})

func getLoader(t *testing.T) *loader {
	t.Helper()
	l, err := theLoader()
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// loadModule parses every package of the module: every directory with
// non-test Go files, but not testdata, not hidden or _ directories, and
// not nested modules (a directory with a go.mod of its own).
func (l *loader) loadModule() error {
	err := filepath.WalkDir(l.root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		if p != l.root {
			base := d.Name()
			if base == "testdata" || base == "vendor" || strings.HasPrefix(base, ".") || strings.HasPrefix(base, "_") {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil {
				return filepath.SkipDir
			}
		}
		rel, _ := filepath.Rel(l.root, p)
		rel = filepath.ToSlash(rel)
		if rel == "." {
			rel = ""
		}
		ip := modPath
		if rel != "" {
			ip += "/" + rel
		}
		pk, err := parseDir(p, ip)
		if err != nil {
			return err
		}
		if pk != nil {
			pk.rel = rel
			l.pkgs[ip] = pk
			l.kord = append(l.kord, pk)
		}
		return nil
	})
	slices.SortFunc(l.kord, func(a, b *pkg) int { return strings.Compare(a.path, b.path) })
	return err
}

// get returns the package of import path ip, parsing it on first use; nil
// and an error when there is none.
func (l *loader) get(ip string) (*pkg, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if pk, ok := l.pkgs[ip]; ok {
		return pk, l.errs[ip]
	}
	var pk *pkg
	var err error
	if ip == modPath || strings.HasPrefix(ip, modPath+"/") {
		err = fmt.Errorf("no package %s in the module", ip)
	} else if dir := filepath.Join(runtime.GOROOT(), "src", filepath.FromSlash(ip)); !strings.Contains(strings.Split(ip, "/")[0], ".") && isDir(dir) {
		pk, err = parseDir(dir, ip)
	} else {
		cmd := exec.Command("go", "list", "-find", "-f", "{{.Dir}}", ip)
		cmd.Dir = l.root
		out, lerr := cmd.CombinedOutput()
		if lerr != nil {
			err = fmt.Errorf("go list %s: %v: %s", ip, lerr, bytes.TrimSpace(out))
		} else {
			pk, err = parseDir(strings.TrimSpace(string(out)), ip)
		}
	}
	if err == nil && pk == nil {
		err = fmt.Errorf("no Go files for %s", ip)
	}
	l.pkgs[ip], l.errs[ip] = pk, err
	return pk, err
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}

// isStd reports whether ip is a standard library package (in GOROOT/src,
// a first element without a dot).
func isStd(ip string) bool {
	if ip == "" || strings.Contains(strings.Split(ip, "/")[0], ".") || strings.Contains(ip, "internal") {
		return false
	}
	return isDir(filepath.Join(runtime.GOROOT(), "src", filepath.FromSlash(ip)))
}

// parseDir parses the non-test Go files of dir (all build tags; not the
// files marked //go:build ignore); nil when it has none.
func parseDir(dir, ip string) (*pkg, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	pk := &pkg{
		path: ip, dir: dir, fset: token.NewFileSet(), files: map[string]*ast.File{},
		decls: map[string]string{}, types: map[string]typeDecl{}, methods: map[string]map[string]bool{},
		imports: map[string]string{}, fileImp: map[*ast.File]map[string]string{},
	}
	for _, elem := range strings.Split(ip, "/") {
		if elem == "internal" {
			pk.internal = true
		}
	}
	for _, e := range entries {
		n := e.Name()
		if e.IsDir() || !strings.HasSuffix(n, ".go") || strings.HasSuffix(n, "_test.go") || strings.HasPrefix(n, ".") || strings.HasPrefix(n, "_") {
			continue
		}
		f, err := parser.ParseFile(pk.fset, filepath.Join(dir, n), nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		if ignored(f) {
			continue
		}
		if pk.name == "" {
			pk.name = f.Name.Name
		} else if pk.name != f.Name.Name {
			continue // a stray file of another package (a generator, say)
		}
		pk.files[n] = f
	}
	if len(pk.files) == 0 {
		return nil, nil
	}
	pk.main = pk.name == "main"
	for _, f := range pk.files {
		pk.index(f)
	}
	return pk, nil
}

// ignored reports whether f is built under no configuration
// (//go:build ignore and the like).
func ignored(f *ast.File) bool {
	for _, cg := range f.Comments {
		if cg.Pos() > f.Package {
			break
		}
		for _, c := range cg.List {
			if constraint.IsGoBuild(c.Text) {
				expr, err := constraint.Parse(c.Text)
				if err == nil && !expr.Eval(func(tag string) bool { return tag != "ignore" }) && !expr.Eval(func(string) bool { return false }) {
					// false both with every tag but ignore set and with none set
					return true
				}
			}
		}
	}
	return false
}

func (pk *pkg) index(f *ast.File) {
	imp := map[string]string{}
	for _, is := range f.Imports {
		p, err := strconv.Unquote(is.Path.Value)
		if err != nil {
			continue
		}
		name := assumedName(p)
		if is.Name != nil {
			name = is.Name.Name
		}
		if name == "_" || name == "." {
			continue
		}
		imp[name] = p
		if old, ok := pk.imports[name]; ok && old != p {
			pk.imports[name] = ""
		} else {
			pk.imports[name] = p
		}
	}
	pk.fileImp[f] = imp
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if d.Recv == nil {
				pk.decls[d.Name.Name] = "func"
				continue
			}
			if len(d.Recv.List) == 0 {
				continue
			}
			if tn := recvType(d.Recv.List[0].Type); tn != "" {
				if pk.methods[tn] == nil {
					pk.methods[tn] = map[string]bool{}
				}
				pk.methods[tn][d.Name.Name] = true
			}
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					pk.decls[s.Name.Name] = "type"
					pk.types[s.Name.Name] = typeDecl{s, f}
				case *ast.ValueSpec:
					kind := "var"
					if d.Tok == token.CONST {
						kind = "const"
					}
					for _, n := range s.Names {
						pk.decls[n.Name] = kind
					}
				}
			}
		}
	}
}

// recvType is the name of a method's receiver type: T of T, *T, T[K] or
// *T[K, V].
func recvType(e ast.Expr) string { return typeName(e) }

// typeName is the name of the type e names, past pointers, parentheses
// and type arguments: T of T, *T, (T), T[K], *pkg.T[K, V].
func typeName(e ast.Expr) string {
	for {
		switch x := e.(type) {
		case *ast.StarExpr:
			e = x.X
		case *ast.ParenExpr:
			e = x.X
		case *ast.IndexExpr:
			e = x.X
		case *ast.IndexListExpr:
			e = x.X
		case *ast.SelectorExpr:
			return x.Sel.Name
		case *ast.Ident:
			return x.Name
		default:
			return ""
		}
	}
}

// assumedName is the name go/doc assumes for an import without an
// explicit name: the last element of its path, without a "go-" prefix or
// a ".go" suffix, and the element before a major version suffix.
func assumedName(p string) string {
	elems := strings.Split(p, "/")
	last := elems[len(elems)-1]
	if len(elems) > 1 && len(last) > 1 && last[0] == 'v' && strings.Trim(last[1:], "0123456789") == "" {
		last = elems[len(elems)-2]
	}
	if strings.HasPrefix(p, "gopkg.in/") {
		last, _, _ = strings.Cut(last, ".")
	}
	last = strings.TrimPrefix(last, "go-")
	last = strings.TrimSuffix(last, ".go")
	last = strings.TrimSuffix(last, "-go")
	return last
}

// byName maps a name by which docs refer to kord's packages (the last
// element of the path, and the package clause where it differs) to the
// packages so named; no program (package main). keep selects the packages.
func (l *loader) byName(keep func(*pkg) bool) map[string][]*pkg {
	m := map[string][]*pkg{}
	for _, pk := range l.kord {
		if pk.main || !keep(pk) {
			continue
		}
		m[path.Base(pk.path)] = append(m[path.Base(pk.path)], pk)
		if pk.name != path.Base(pk.path) {
			m[pk.name] = append(m[pk.name], pk)
		}
	}
	return m
}

// member reports whether type tn of pk has a method or field named m: its
// own methods, its struct fields (embedded ones by their type's name), an
// interface's methods, and what it has from embedded fields and
// interfaces, from the type it is defined by, or from the type it aliases.
// exported requires m to be exported.
func (l *loader) member(pk *pkg, tn, m string, exported bool) bool {
	if exported && !ast.IsExported(m) {
		return false
	}
	return l.memberRec(pk, tn, m, map[string]bool{}, 0)
}

func (l *loader) memberRec(pk *pkg, tn, m string, seen map[string]bool, depth int) bool {
	key := pk.path + "." + tn
	if seen[key] || depth > 10 {
		return false
	}
	seen[key] = true
	if pk.methods[tn][m] {
		return true
	}
	td, ok := pk.types[tn]
	if !ok {
		if pk.path == "builtin" || tn == "error" {
			return tn == "error" && m == "Error"
		}
		return false
	}
	// follow resolves a type expression of td's file to a named type, and
	// looks for m there.
	follow := func(e ast.Expr) bool {
		tp, name := l.named(pk, td.file, e)
		return tp != nil && l.memberRec(tp, name, m, seen, depth+1)
	}
	switch t := td.spec.Type.(type) {
	case *ast.StructType:
		for _, f := range t.Fields.List {
			if len(f.Names) == 0 {
				_, name := l.named(pk, td.file, f.Type)
				if name == "" {
					name = embeddedName(f.Type)
				}
				if name == m || follow(f.Type) {
					return true
				}
				continue
			}
			for _, n := range f.Names {
				if n.Name == m {
					return true
				}
			}
		}
	case *ast.InterfaceType:
		for _, f := range t.Methods.List {
			if len(f.Names) == 0 {
				if follow(f.Type) {
					return true
				}
				continue
			}
			for _, n := range f.Names {
				if n.Name == m {
					return true
				}
			}
		}
	default:
		return follow(td.spec.Type)
	}
	return false
}

// named resolves e, a type expression in file f of pk (T, *T, pkg.T,
// T[K]), to the package and name of the named type; nil when it is no
// named type, or one it cannot load.
func (l *loader) named(pk *pkg, f *ast.File, e ast.Expr) (*pkg, string) {
	for {
		switch x := e.(type) {
		case *ast.StarExpr:
			e = x.X
		case *ast.ParenExpr:
			e = x.X
		case *ast.IndexExpr:
			e = x.X
		case *ast.IndexListExpr:
			e = x.X
		case *ast.Ident:
			if _, ok := pk.types[x.Name]; ok {
				return pk, x.Name
			}
			if x.Name == "error" {
				return &pkg{path: "builtin"}, "error"
			}
			return nil, ""
		case *ast.SelectorExpr:
			id, ok := x.X.(*ast.Ident)
			if !ok {
				return nil, ""
			}
			ip, ok := pk.fileImp[f][id.Name]
			if !ok {
				return nil, ""
			}
			tp, err := l.get(ip)
			if err != nil {
				return nil, ""
			}
			return tp, x.Sel.Name
		default:
			return nil, ""
		}
	}
}

// embeddedName is the field name of an embedded field of type e.
func embeddedName(e ast.Expr) string { return typeName(e) }

// resolve checks name (and member, when not "") in pk: "" when they
// resolve, or why not. exported requires both to be exported.
func (l *loader) resolve(pk *pkg, name, member string, exported bool) string {
	kind, ok := pk.decls[name]
	if !ok {
		if pk.path == "builtin" {
			return ""
		}
		return fmt.Sprintf("%s declares no %s", pk.path, name)
	}
	if exported && !ast.IsExported(name) {
		return fmt.Sprintf("%s.%s is not exported", pk.path, name)
	}
	if member == "" {
		return ""
	}
	switch kind {
	case "type":
		if l.member(pk, name, member, exported) {
			return ""
		}
		return fmt.Sprintf("%s.%s has no method or field %s", pk.path, name, member)
	case "func":
		return fmt.Sprintf("%s.%s is a func: it has no member %s", pk.path, name, member)
	}
	return "" // a var or const: its members are its type's, not checked
}
