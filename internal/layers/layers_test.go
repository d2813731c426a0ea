package layers

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const mod = "github.com/kordproject/kord"

// Kafka clients: the one kord builds on and the one its tests use.
var kafkaClients = []string{"github.com/confluentinc/confluent-kafka-go", "github.com/twmb/franz-go"}

// rules: for each package, the import paths (prefixes) none of its
// dependencies, direct or not, may have.
var rules = []struct {
	pkg    string
	banned []string
	why    string
}{
	{"checkpoint", append([]string{mod + "/producer", mod + "/consumer", mod + "/kafkaio", mod + "/keyed", mod + "/kordtest"}, kafkaClients...),
		"the core imports no Kafka client and nothing above it"},
	{"keyed", append([]string{mod + "/producer", mod + "/consumer", mod + "/kafkaio", mod + "/kordtest"}, kafkaClients...),
		"the engine imports no Kafka client and not the Kafka edge"},
	{"keyed/connector", append([]string{mod + "/keyed", mod + "/producer", mod + "/consumer", mod + "/kafkaio", mod + "/kordtest", "gocloud.dev"}, kafkaClients...),
		"what sources and sinks implement lies under the engine: it imports nothing of keyed and no Kafka client"},
	{"producer", []string{mod + "/keyed", mod + "/checkpoint", mod + "/kafkaio", mod + "/kordtest"},
		"the standalone clients know nothing of the engine"},
	{"consumer", []string{mod + "/keyed", mod + "/checkpoint", mod + "/kafkaio", mod + "/kordtest"},
		"the standalone clients know nothing of the engine"},
	{"admin", []string{mod + "/keyed", mod + "/checkpoint", mod + "/kafkaio", mod + "/kordtest", mod + "/producer", mod + "/consumer", "github.com/twmb/franz-go"},
		"the admin client is a standalone client on confluent-kafka-go and internal/kafkaconf: nothing of the engine, no other client"},
	{"kafkaio", []string{mod + "/kordtest", mod + "/internal/rig", "github.com/twmb/franz-go"},
		"the Kafka edge runs on kord's clients only; the test cluster is for tests"},
	{"checkpoint", []string{"gocloud.dev"},
		"object storage is checkpoint/blobstore's: a program that keeps its checkpoints on disk links no cloud SDK"},
	{"keyed", []string{"gocloud.dev"},
		"object storage is checkpoint/blobstore's: a program that keeps its checkpoints on disk links no cloud SDK"},
	{"checkpoint/blobstore", append([]string{mod + "/keyed", mod + "/producer", mod + "/consumer", mod + "/kafkaio"}, kafkaClients...),
		"checkpoint storage is part of the core: no Kafka, nothing above it"},
	{"cluster", []string{mod + "/producer", mod + "/consumer", mod + "/admin", mod + "/kafkaio", mod + "/keyed", mod + "/checkpoint", mod + "/kordtest", "github.com/twmb/franz-go"},
		"a cluster's configuration is below every client that takes it"},
	{"serde", append([]string{mod + "/producer", mod + "/consumer", mod + "/admin", mod + "/kafkaio", mod + "/keyed", mod + "/checkpoint", mod + "/kordtest"}, kafkaClients...),
		"records' one description is ground: the clients, the engine and the file sinks all use it, and it knows none of them"},
	{"serde/registry", []string{mod + "/producer", mod + "/consumer", mod + "/admin", mod + "/kafkaio", mod + "/keyed", mod + "/checkpoint", "github.com/confluentinc/confluent-kafka-go/v2/kafka", "github.com/twmb/franz-go"},
		"the Schema Registry serdes use the registry's client only: no Kafka client (librdkafka is not linked for them), nothing above serde"},
	{"filesink", append([]string{mod + "/producer", mod + "/consumer", mod + "/admin", mod + "/kafkaio", mod + "/kordtest"}, kafkaClients...),
		"the file sink is a connector beside the Kafka edge, not on it: a job that lands files from any source links no Kafka client through it"},
	{"partitioner", []string{mod + "/"},
		"partitioner is pure: it imports nothing of kord"},
	{"metrics", []string{mod + "/"},
		"the metrics interface is pure: it imports nothing of kord"},
	{"keyed", []string{"github.com/prometheus", "go.opentelemetry.io"},
		"the engine imports no metrics SDK: exporters sit at the edge (kordhttp)"},
	{"checkpoint", []string{"github.com/prometheus", "go.opentelemetry.io"},
		"the core imports no metrics SDK"},
	{"kordhttp", append([]string{mod + "/producer", mod + "/consumer", mod + "/admin", mod + "/kafkaio", "go.opentelemetry.io"}, kafkaClients...),
		"the HTTP exporter knows jobs and the metrics interface, not Kafka, and not the other exporter"},
	{"kordotel", append([]string{mod + "/keyed", mod + "/checkpoint", mod + "/kafkaio", "github.com/prometheus"}, kafkaClients...),
		"the OpenTelemetry exporter reads metrics.Collectors only"},
	{"internal/rdkbatch", []string{"github.com/twmb/franz-go"},
		"the batch read path calls the librdkafka confluent-kafka-go links, and no other client"},
	{"internal/rdkproduce", []string{"github.com/twmb/franz-go"},
		"the batch produce path calls the librdkafka confluent-kafka-go links, and no other client"},
	{"internal/layout", []string{mod + "/"},
		"the file-name grammar is at the bottom: checkpoint and everything over it parse names with it"},
}

// core are the engine's internal packages under checkpoint's rules: the
// state machines, the state-file format, the recovery decision and
// retention.
var core = []string{"internal/align", "internal/lifecycle", "internal/recovery", "internal/retain", "internal/statefile"}

func init() {
	for _, pkg := range core {
		rules = append(rules, struct {
			pkg    string
			banned []string
			why    string
		}{pkg, append([]string{mod + "/producer", mod + "/consumer", mod + "/kafkaio", mod + "/keyed", mod + "/kordtest", "gocloud.dev"}, kafkaClients...),
			"the core imports no Kafka client, no cloud SDK and nothing above checkpoint"})
	}
}

// deps lists the packages pkg depends on, itself excluded; with tests, the
// dependencies of its tests too.
func deps(t *testing.T, pkg string, tests bool) []string {
	t.Helper()
	args := []string{"list", "-deps", "-f", "{{.ImportPath}}"}
	if tests {
		args = append(args, "-test")
	}
	out, err := exec.Command("go", append(args, mod+"/"+pkg)...).CombinedOutput()
	if err != nil {
		t.Fatalf("go list %s: %v\n%s", pkg, err, out)
	}
	var ds []string
	for _, d := range strings.Fields(string(out)) {
		if d != mod+"/"+pkg && !strings.HasPrefix(d, mod+"/"+pkg+" ") && !strings.HasPrefix(d, mod+"/"+pkg+".test") {
			ds = append(ds, d)
		}
	}
	return ds
}

// violations returns the dependencies of ds that a rule bans.
func violations(ds, banned []string) []string {
	var bad []string
	for _, d := range ds {
		for _, b := range banned {
			if d == strings.TrimSuffix(b, "/") || strings.HasPrefix(d, strings.TrimSuffix(b, "/")+"/") {
				bad = append(bad, d)
			}
		}
	}
	return bad
}

// TestLayers: every package's dependencies keep to its layer.
func TestLayers(t *testing.T) {
	for _, r := range rules {
		if bad := violations(deps(t, r.pkg, false), r.banned); len(bad) > 0 {
			t.Errorf("%s imports %v: %s", r.pkg, bad, r.why)
		}
	}
}

// TestEngineTestsKnowNoKafka: the engine's and the core's own tests run
// without Kafka too (the Kafka tests are kafkaio's): their test
// dependencies hold no Kafka client and not the edge.
func TestEngineTestsKnowNoKafka(t *testing.T) {
	for _, pkg := range append([]string{"checkpoint", "keyed"}, core...) {
		banned := append([]string{mod + "/producer", mod + "/consumer", mod + "/kafkaio"}, kafkaClients...)
		if bad := violations(deps(t, pkg, true), banned); len(bad) > 0 {
			t.Errorf("the tests of %s import %v", pkg, bad)
		}
	}
}

func TestViolations(t *testing.T) {
	got := violations([]string{mod + "/keyed", mod + "/keyedx", mod + "/producer/internal", "fmt"}, []string{mod + "/keyed", mod + "/producer"})
	want := []string{mod + "/keyed", mod + "/producer/internal"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("violations = %v, want %v", got, want)
	}
}

// listDeps is go list -deps of pkg (a path under the module) with build
// tags tags ("" for none).
func listDeps(t *testing.T, pkg, tags string) []string {
	t.Helper()
	args := []string{"list", "-deps", "-f", "{{.ImportPath}}"}
	if tags != "" {
		args = append(args, "-tags", tags)
	}
	out, err := exec.Command("go", append(args, mod+"/"+pkg)...).CombinedOutput()
	if err != nil {
		t.Fatalf("go list %s: %v\n%s", pkg, err, out)
	}
	return strings.Fields(string(out))
}

// programs are the example binaries users copy.
var programs = []string{"examples/userbehavior", "examples/urinormalize"}

// TestFailpointsOnlyInTestBuilds: a plain build of the engine, the edge,
// the test cluster and the examples links no failure point (nothing that
// reads KORD_FAILPOINTS and can SIGKILL the process); a build with the
// kordfailpoints tag does, so this test cannot pass because the package
// moved.
func TestFailpointsOnlyInTestBuilds(t *testing.T) {
	fp := []string{mod + "/internal/failpoint"}
	for _, pkg := range append([]string{"checkpoint", "keyed", "kafkaio", "kordtest", "producer", "consumer"}, programs...) {
		if bad := violations(listDeps(t, pkg, ""), fp); len(bad) > 0 {
			t.Errorf("a plain build of %s links %v", pkg, bad)
		}
	}
	for _, pkg := range []string{"keyed", "kafkaio"} {
		if len(violations(listDeps(t, pkg, "kordfailpoints"), fp)) == 0 {
			t.Errorf("a kordfailpoints build of %s links no failure point: the tagged files are gone or renamed", pkg)
		}
	}
}

// TestExamplesImportNoInternal: an example imports only public packages,
// so that a user can copy it out of the module.
func TestExamplesImportNoInternal(t *testing.T) {
	for _, pkg := range programs {
		out, err := exec.Command("go", "list", "-f", `{{join .Imports "\n"}}`, mod+"/"+pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list %s: %v\n%s", pkg, err, out)
		}
		if bad := violations(strings.Fields(string(out)), []string{mod + "/internal"}); len(bad) > 0 {
			t.Errorf("%s imports %v", pkg, bad)
		}
	}
}

// TestExamplesBuildOutside copies each example's sources into a module of
// its own outside kord's, requiring kord (replaced by this checkout), and
// builds it: what a user who copies an example does.
func TestExamplesBuildOutside(t *testing.T) {
	if testing.Short() {
		t.Skip("builds every example in a module of its own")
	}
	repo := repoRoot(t)
	for _, pkg := range programs {
		t.Run(pkg, func(t *testing.T) {
			dir := t.TempDir()
			files, err := filepath.Glob(filepath.Join(repo, pkg, "*.go"))
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range files {
				if strings.HasSuffix(f, "_test.go") {
					continue
				}
				b, err := os.ReadFile(f)
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, filepath.Base(f)), b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			gomod := "module example.com/copied\n\ngo 1.26.0\n\nrequire " + mod + " v0.0.0\n\nreplace " + mod + " => " + repo + "\n"
			if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(gomod), 0o644); err != nil {
				t.Fatal(err)
			}
			for _, args := range [][]string{{"mod", "tidy"}, {"build", "-o", filepath.Join(dir, "bin"), "."}} {
				cmd := exec.Command("go", args...)
				cmd.Dir = dir
				cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
				if out, err := cmd.CombinedOutput(); err != nil {
					t.Fatalf("go %s in a copy of %s: %v\n%s", strings.Join(args, " "), pkg, err, out)
				}
			}
		})
	}
}

// only: for each package, the packages of kord its dependencies, direct or
// not, may include; any other package of kord is a violation. (checkpoint
// may import vfs: its Store is a directory on a vfs.FS.)
var only = []struct {
	pkg     string
	allowed []string
	why     string
}{
	{"vfs", nil, "vfs is the file systems under checkpoint: it imports nothing of kord"},
	{"vfs/errorfs", []string{mod + "/vfs"}, "errorfs wraps a vfs.FS: it imports nothing of kord but vfs"},
	{"internal/rdkbatch", nil, "the batch read path is a thin cgo layer over confluent-kafka-go's consumer: it imports nothing of kord (consumer may import it)"},
	{"internal/rdkproduce", nil, "the batch produce path is a thin cgo layer over confluent-kafka-go's producer: it imports nothing of kord (producer may import it)"},
}

// TestOnly: the packages that may import only the few of kord they list.
func TestOnly(t *testing.T) {
	for _, r := range only {
		var bad []string
		for _, d := range deps(t, r.pkg, false) {
			if (d == mod || strings.HasPrefix(d, mod+"/")) && !slices.Contains(r.allowed, d) {
				bad = append(bad, d)
			}
		}
		if len(bad) > 0 {
			t.Errorf("%s imports %v: %s", r.pkg, bad, r.why)
		}
	}
}

// internalPackages lists kord's internal packages, split into ground
// helpers and test rigs (internal/rig/); internal/layers itself is
// neither.
func internalPackages(t *testing.T) (ground, rigs []string) {
	t.Helper()
	out, err := exec.Command("go", "list", mod+"/internal/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, p := range strings.Fields(string(out)) {
		rel := strings.TrimPrefix(p, mod+"/")
		switch {
		case rel == "internal/layers":
		case strings.HasPrefix(rel, "internal/rig/"):
			rigs = append(rigs, rel)
		default:
			ground = append(ground, rel)
		}
	}
	return ground, rigs
}

// TestGroundBelowRigs: an internal package that is no test rig (a ground
// helper like kafkaconf, or the engine's core: align, lifecycle, ...) runs
// no arrow upwards: it depends on no test rig and on nothing at or above
// the clients and the engine. No package a program links depends on a
// test rig.
func TestGroundBelowRigs(t *testing.T) {
	ground, rigs := internalPackages(t)
	if len(ground) == 0 || len(rigs) == 0 {
		t.Fatalf("internal packages %v, rigs %v: the layout moved", ground, rigs)
	}
	above := []string{mod + "/internal/rig", mod + "/keyed", mod + "/kafkaio", mod + "/kordtest", mod + "/producer", mod + "/consumer", mod + "/admin", mod + "/runlog"}
	for _, g := range ground {
		for _, tags := range []string{"", "kordfailpoints"} {
			if bad := violations(listDeps(t, g, tags), above); len(bad) > 0 {
				t.Errorf("internal package %s (tags %q) depends on %v: an arrow upwards", g, tags, bad)
			}
		}
	}
	programs := append(publicPackages(t), programs...)
	for _, pkg := range programs {
		for _, tags := range []string{"", "kordfailpoints"} {
			if bad := violations(listDeps(t, pkg, tags), []string{mod + "/internal/rig"}); len(bad) > 0 {
				t.Errorf("%s (tags %q) links test rigs %v", pkg, tags, bad)
			}
		}
	}
}

// TestKeyedInternal: the runtime's and keyed state's packages under
// keyed/internal/ keep keyed's rules (no Kafka client, not the edge, no
// cloud SDK), depend on no test rig, and import nothing of keyed but each
// other: keyed imports them, not the other way round.
func TestKeyedInternal(t *testing.T) {
	out, err := exec.Command("go", "list", mod+"/keyed/internal/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	pkgs := strings.Fields(string(out))
	if len(pkgs) == 0 {
		t.Fatal("no package under keyed/internal: the layout moved")
	}
	banned := append([]string{mod + "/producer", mod + "/consumer", mod + "/kafkaio", mod + "/kordtest", mod + "/internal/rig", "gocloud.dev"}, kafkaClients...)
	for _, p := range pkgs {
		pkg := strings.TrimPrefix(p, mod+"/")
		for _, tags := range []string{"", "kordfailpoints"} {
			ds := listDeps(t, pkg, tags)
			bad := violations(ds, banned)
			for _, d := range ds {
				if (d == mod+"/keyed" || strings.HasPrefix(d, mod+"/keyed/")) && !strings.HasPrefix(d, mod+"/keyed/internal/") {
					bad = append(bad, d)
				}
			}
			if len(bad) > 0 {
				t.Errorf("%s (tags %q) imports %v: keyed's internals keep keyed's rules and import nothing of keyed but each other", pkg, tags, bad)
			}
		}
	}
}
