package kafkatest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The three-broker cluster's environment (scripts/kafka-cluster.sh).
const (
	// EnvCluster is the cluster's bootstrap list, as kafka-cluster.sh
	// start prints it.
	EnvCluster = "KORD_KAFKA_CLUSTER"
	// EnvClusterDir is the script's state directory (its default,
	// /tmp/kord-kafka-cluster, when unset).
	EnvClusterDir = "KORD_KAFKA_CLUSTER_DIR"
	// EnvRequireCluster=1 makes a missing cluster fail a test instead of
	// skipping it.
	EnvRequireCluster = "KORD_REQUIRE_KAFKA_CLUSTER"
)

// Three is the cluster of three brokers that scripts/kafka-cluster.sh runs
// (KRaft, each node broker and controller, replication factor 3,
// min.insync.replicas=2), for tests that take brokers down. Its Cluster is
// named "kafka-cluster"; topics made with CreateTopic get the brokers'
// default replication factor, 3. Node ids are 1, 2 and 3.
//
// Its methods run the script and fail the test when it fails; call them
// from the test's goroutine.
type Three struct {
	*Cluster
	t      testing.TB
	script string
	dir    string

	mu      sync.Mutex
	touched map[int]bool // nodes this test stopped, killed or froze, not resumed since
}

// ThreeBrokers returns the cluster named by KORD_KAFKA_CLUSTER, skipping t
// when it is unset (failing it when KORD_REQUIRE_KAFKA_CLUSTER=1). When t
// ends, every node t took down (Kill, Stop, Freeze) and did not Resume is
// resumed, and waited for until it is back in sync, so the next test starts
// on three live brokers.
func ThreeBrokers(t testing.TB) *Three {
	t.Helper()
	brokers := os.Getenv(EnvCluster)
	if brokers == "" {
		if os.Getenv(EnvRequireCluster) == "1" {
			t.Fatalf("%s=1 but %s is not set: the three-broker tests could not run", EnvRequireCluster, EnvCluster)
		}
		t.Skipf("needs three brokers: start them with scripts/kafka-cluster.sh start and set %s", EnvCluster)
	}
	dir := os.Getenv(EnvClusterDir)
	if dir == "" {
		dir = "/tmp/kord-kafka-cluster"
	}
	script, err := findScript()
	if err != nil {
		t.Fatal(err)
	}
	// The script acts on the cluster of its state directory: refuse to
	// take down brokers of another one than the test writes to.
	b, err := os.ReadFile(filepath.Join(dir, "bootstrap"))
	if err != nil {
		t.Fatalf("%s=%s: %v (is the cluster of %s=%s running?)", EnvCluster, brokers, err, EnvClusterDir, dir)
	}
	if got := strings.TrimSpace(string(b)); got != brokers {
		t.Fatalf("%s=%s, but the cluster in %s (%s) is %s", EnvCluster, brokers, EnvClusterDir, dir, got)
	}
	th := &Three{Cluster: &Cluster{Name: "kafka-cluster", Brokers: brokers}, t: t, script: script, dir: dir, touched: map[int]bool{}}
	t.Cleanup(th.restore)
	return th
}

// findScript returns scripts/kafka-cluster.sh of the module the test runs
// in, looked for upwards from the working directory (a test runs in its
// package's directory).
func findScript() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; ; d = filepath.Dir(d) {
		p := filepath.Join(d, "scripts", "kafka-cluster.sh")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("kafkatest: scripts/kafka-cluster.sh not found above %s", wd)
		}
	}
}

// run runs the script with args and returns its last line of stdout.
func (th *Three) run(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, th.script, args...)
	cmd.Env = append(os.Environ(), EnvClusterDir+"="+th.dir)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("kafka-cluster.sh %s: %v\n%s", strings.Join(args, " "), err, stderr.Bytes())
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	return lines[len(lines)-1], nil
}

func (th *Three) must(args ...string) string {
	th.t.Helper()
	out, err := th.run(args...)
	if err != nil {
		th.t.Fatal(err)
	}
	return out
}

func (th *Three) node(id int, touched bool, verb string) {
	th.t.Helper()
	th.mu.Lock()
	th.touched[id] = touched
	th.mu.Unlock()
	th.must(verb, strconv.Itoa(id))
}

// Kill SIGKILLs node id (a crash); its data stays for Resume.
func (th *Three) Kill(id int) { th.t.Helper(); th.node(id, true, "kill") }

// Stop stops node id with SIGTERM: a controlled shutdown, which hands its
// leaderships over first.
func (th *Three) Stop(id int) { th.t.Helper(); th.node(id, true, "stop") }

// Freeze SIGSTOPs node id: its connections stay open and it answers
// nothing.
func (th *Three) Freeze(id int) { th.t.Helper(); th.node(id, true, "freeze") }

// Thaw SIGCONTs node id. It is back in sync only later: Resume waits for
// that.
func (th *Three) Thaw(id int) {
	th.t.Helper()
	th.must("thaw", strconv.Itoa(id))
}

// Resume starts node id again on its data and ports (or thaws it) and
// returns once it has rejoined: registered, answering, and in the ISR of
// every partition it replicates.
func (th *Three) Resume(id int) { th.t.Helper(); th.node(id, false, "resume") }

// Leader returns the node id of the leader of topic's partition p.
func (th *Three) Leader(topic string, p int32) int {
	th.t.Helper()
	return th.id(th.must("leader", topic, strconv.Itoa(int(p))))
}

// TxnCoordinator returns the node id of transactional id tid's
// coordinator (the leader of its __transaction_state partition).
func (th *Three) TxnCoordinator(tid string) int {
	th.t.Helper()
	return th.id(th.must("txn-coordinator", tid))
}

// GroupCoordinator returns the node id of group's coordinator (the leader
// of its __consumer_offsets partition).
func (th *Three) GroupCoordinator(group string) int {
	th.t.Helper()
	return th.id(th.must("group-coordinator", group))
}

// Status returns the script's status lines: "N running|frozen|stopped
// ADDRESS" for each node.
func (th *Three) Status() []string {
	th.t.Helper()
	cmd := exec.Command(th.script, "status")
	cmd.Env = append(os.Environ(), EnvClusterDir+"="+th.dir)
	out, _ := cmd.Output() // exit 1 when a node is down: the lines say which
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return slices.DeleteFunc(lines, func(l string) bool { return strings.Contains(l, ",") })
}

func (th *Three) id(s string) int {
	th.t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > 3 {
		th.t.Fatalf("kafka-cluster.sh answered %q, not a node id", s)
	}
	return n
}

// restore resumes every node the test took down and did not resume.
func (th *Three) restore() {
	th.mu.Lock()
	var ids []int
	for id, down := range th.touched {
		if down {
			ids = append(ids, id)
		}
	}
	th.mu.Unlock()
	slices.Sort(ids)
	for _, id := range ids {
		if _, err := th.run("resume", strconv.Itoa(id)); err != nil {
			th.t.Errorf("resuming node %d after the test: %v", id, err)
			continue
		}
		th.t.Logf("resumed node %d, which the test left down", id)
	}
}
