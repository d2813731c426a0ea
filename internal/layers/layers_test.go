package layers

import (
	"os/exec"
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
	{"producer", []string{mod + "/keyed", mod + "/checkpoint", mod + "/kafkaio", mod + "/kordtest"},
		"the standalone clients know nothing of the engine"},
	{"consumer", []string{mod + "/keyed", mod + "/checkpoint", mod + "/kafkaio", mod + "/kordtest"},
		"the standalone clients know nothing of the engine"},
	{"admin", []string{mod + "/keyed", mod + "/checkpoint", mod + "/kafkaio", mod + "/kordtest", mod + "/producer", mod + "/consumer", "github.com/twmb/franz-go"},
		"the admin client is a standalone client on confluent-kafka-go and internal/kafkaconf: nothing of the engine, no other client"},
	{"kafkaio", []string{mod + "/kordtest", mod + "/internal/faultproxy", mod + "/internal/kafkatest", "github.com/twmb/franz-go"},
		"the Kafka edge runs on kord's clients only; the test cluster is for tests"},
	{"checkpoint", []string{"gocloud.dev"},
		"object storage is checkpoint/blobstore's: a program that keeps its checkpoints on disk links no cloud SDK"},
	{"keyed", []string{"gocloud.dev"},
		"object storage is checkpoint/blobstore's: a program that keeps its checkpoints on disk links no cloud SDK"},
	{"checkpoint/blobstore", append([]string{mod + "/keyed", mod + "/producer", mod + "/consumer", mod + "/kafkaio"}, kafkaClients...),
		"checkpoint storage is part of the core: no Kafka, nothing above it"},
	{"partitioner", []string{mod + "/"},
		"partitioner is pure: it imports nothing of kord"},
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
	for _, pkg := range []string{"checkpoint", "keyed"} {
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
