package layers

import (
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

var updateAPI = flag.Bool("update-api", false, "rewrite api/*.txt from the code")

// publicPackages lists kord's public packages: everything a user can
// import (nothing internal, no program, not the docs' snippets under
// docs/).
func publicPackages(t *testing.T) []string {
	t.Helper()
	out, err := exec.Command("go", "list", mod+"/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	var pkgs []string
	for _, p := range strings.Fields(string(out)) {
		rel := strings.TrimPrefix(strings.TrimPrefix(p, mod), "/")
		if rel == "" || strings.Contains("/"+rel+"/", "/internal/") || strings.HasPrefix(rel, "examples/") || strings.HasPrefix(rel, "bench/") || strings.HasPrefix(rel, "cmd/") || strings.HasPrefix(rel, "docs/") {
			continue
		}
		pkgs = append(pkgs, rel)
	}
	return pkgs
}

// TestAPI compares each public package's surface (go doc -all) with its
// golden file, api/<package>.txt, so that every change to what users see
// is deliberate: after one, run
//
//	go test ./internal/layers/ -run TestAPI -update-api
//
// and review the diff.
func TestAPI(t *testing.T) {
	root := repoRoot(t)
	seen := map[string]bool{}
	for _, pkg := range publicPackages(t) {
		out, err := exec.Command("go", "doc", "-all", mod+"/"+pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go doc %s: %v\n%s", pkg, err, out)
		}
		name := strings.ReplaceAll(pkg, "/", "_") + ".txt"
		seen[name] = true
		path := filepath.Join(root, "api", name)
		if *updateAPI {
			if err := os.WriteFile(path, out, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Errorf("%s has no golden file api/%s (go test ./internal/layers/ -run TestAPI -update-api): %v", pkg, name, err)
			continue
		}
		if string(want) != string(out) {
			t.Errorf("the public surface of %s changed: %s differs from go doc -all (review, then go test ./internal/layers/ -run TestAPI -update-api)\n%s",
				pkg, path, firstDiff(string(want), string(out)))
		}
	}
	files, _ := filepath.Glob(filepath.Join(root, "api", "*.txt"))
	for _, f := range files {
		if !seen[filepath.Base(f)] {
			if *updateAPI {
				_ = os.Remove(f)
			} else {
				t.Errorf("api/%s belongs to no public package", filepath.Base(f))
			}
		}
	}
}

// firstDiff shows the first line where want and got differ, with a little
// context.
func firstDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < max(len(w), len(g)); i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			return "line " + strconv.Itoa(i+1) + ":\n  golden: " + wl + "\n  code:   " + gl
		}
	}
	return ""
}

func repoRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}
