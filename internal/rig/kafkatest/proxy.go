package kafkatest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kordproject/kord/internal/rig/faultproxy"
)

// Environment variables for the proxied listener and the broker's state dir.
const (
	// EnvProxy names the real broker's proxied listener as "FRONT BACKEND"
	// (two host:port): the broker advertises FRONT and listens on BACKEND.
	EnvProxy = "KORD_KAFKA_PROXY"
	// EnvDir is scripts/kafka.sh's state dir; its file "proxy" holds the
	// same two addresses while the broker runs.
	EnvDir = "KORD_KAFKA_DIR"
)

// defaultDir is scripts/kafka.sh's state dir when KORD_KAFKA_DIR is unset.
const defaultDir = "/tmp/kord-kafka"

// Proxied returns the real broker's proxied listener: front is the address
// the broker advertises on it, where a faultproxy must listen; backend is
// where the broker really listens, where the proxy forwards. A client that
// bootstraps at front (through the proxy) sends all its traffic through the
// proxy, since every metadata response names front as the broker.
//
// The addresses come from KORD_KAFKA_PROXY ("front backend"), else from the
// file "proxy" in KORD_KAFKA_DIR (or kafka.sh's default state dir) when that
// dir's broker is the one KORD_KAFKA_BROKERS names. Without them the test is
// skipped, or fails when KORD_REQUIRE_KAFKA=1, as with Broker.
//
// Only one proxy at a time can listen on front, so Proxied takes a lock,
// shared by every test process on the machine, that it holds until t ends:
// tests that use the shared proxied listener run one after another, even
// from different packages.
func Proxied(t testing.TB) (front, backend string) {
	t.Helper()
	front, backend, why := proxiedAddrs()
	if why != "" {
		if os.Getenv(EnvRequire) == "1" {
			t.Fatalf("%s=1 but the real broker's proxied listener is unknown: %s", EnvRequire, why)
		}
		t.Skipf("needs the real broker's proxied listener: %s", why)
	}
	lockFront(t, front)
	return front, backend
}

func proxiedAddrs() (front, backend, why string) {
	if v := os.Getenv(EnvProxy); v != "" {
		f := strings.Fields(v)
		if len(f) != 2 {
			return "", "", fmt.Sprintf("%s=%q is not \"FRONT BACKEND\"", EnvProxy, v)
		}
		return f[0], f[1], ""
	}
	dir := os.Getenv(EnvDir)
	if dir == "" {
		dir = defaultDir
	}
	b, err := os.ReadFile(filepath.Join(dir, "proxy"))
	if err != nil {
		return "", "", fmt.Sprintf("set %s, or run scripts/kafka.sh start with %s=%s (no %s/proxy: %v)",
			EnvProxy, EnvDir, dir, dir, errors.Unwrap(err))
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return "", "", fmt.Sprintf("%s/proxy holds %q, not \"FRONT BACKEND\"", dir, b)
	}
	// The file must describe the broker the other tests use.
	if want := os.Getenv(EnvBrokers); want != "" {
		boot, _ := os.ReadFile(filepath.Join(dir, "bootstrap"))
		if got := strings.TrimSpace(string(boot)); got != want {
			return "", "", fmt.Sprintf("%s/proxy belongs to the broker at %q, but %s=%s: set %s to its state dir or %s",
				dir, got, EnvBrokers, want, EnvDir, EnvProxy)
		}
	}
	return f[0], f[1], ""
}

// lockFront takes the machine-wide lock on the proxied listener at front
// until t ends, waiting up to 15 minutes for another test to release it.
func lockFront(t testing.TB, front string) {
	t.Helper()
	release, err := acquireFront(front, 15*time.Minute, func() {
		t.Logf("waiting for another test to release the proxied listener %s", front)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(release)
}

// acquireFront takes the lock for front: an flock on a file in the temp dir,
// so it is shared by every process, and released by closing the file (or
// by the process ending). waiting is called once if the lock is busy.
func acquireFront(front string, timeout time.Duration, waiting func()) (release func(), err error) {
	name := frontLockFile(front)
	f, err := os.OpenFile(name, os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return nil, fmt.Errorf("lock for the proxied listener %s: %w", front, err)
	}
	deadline := time.Now().Add(timeout)
	for first := true; ; first = false {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { _ = f.Close() }, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) || time.Now().After(deadline) {
			_ = f.Close()
			return nil, fmt.Errorf("lock %s for the proxied listener: %w", name, err)
		}
		if first && waiting != nil {
			waiting()
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func frontLockFile(front string) string {
	return filepath.Join(os.TempDir(), "kord-faultproxy-"+strings.NewReplacer(":", "_", "/", "_").Replace(front)+".lock")
}

// StartProxy starts a faultproxy on the real broker's proxied listener
// (Proxied: skipped or failed the same way), logging to t and closed when t
// ends. Clients bootstrap at its Addr().
func StartProxy(t testing.TB) *faultproxy.Proxy {
	t.Helper()
	front, backend := Proxied(t)
	return startProxy(t, front, backend)
}

func startProxy(t testing.TB, front, backend string) *faultproxy.Proxy {
	t.Helper()
	p, err := faultproxy.Start(front, backend)
	if err != nil {
		t.Fatalf("%v (is another proxy, or something else, on the proxied listener's front port?)", err)
	}
	p.SetLogf(t.Logf)
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// OwnedBroker is a real broker of one test's own, started by scripts/kafka.sh
// in a fresh state dir, for tests that stop, kill or restart the broker
// without disturbing the shared one other packages' tests use meanwhile.
type OwnedBroker struct {
	script  string
	dir     string
	brokers string
}

// OwnBroker starts a broker of t's own with scripts/kafka.sh in a fresh
// state dir and stops it when t ends. It takes some seconds and a JVM, so it
// runs only when real-broker tests are asked for (KORD_KAFKA_BROKERS set or
// KORD_REQUIRE_KAFKA=1) and not with -short; it is skipped otherwise, and
// when java (or mvn, if the Kafka jars are not cached yet) is missing it
// fails under KORD_REQUIRE_KAFKA=1 and skips otherwise.
func OwnBroker(t testing.TB) *OwnedBroker {
	t.Helper()
	require := os.Getenv(EnvRequire) == "1"
	if testing.Short() {
		t.Skip("starts a broker of its own: not with -short")
	}
	if !require && os.Getenv(EnvBrokers) == "" {
		t.Skipf("starts a broker of its own: set %s (or %s=1) to run real-broker tests", EnvBrokers, EnvRequire)
	}
	if !haveJava() {
		missing(t, require, "java (Java 17+) is not on PATH nor in JAVA_HOME")
	}
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	b := &OwnedBroker{script: filepath.Join(root, "scripts", "kafka.sh"), dir: t.TempDir()}
	out, err := b.run("start")
	if err != nil {
		if _, lerr := exec.LookPath("mvn"); lerr != nil && strings.Contains(out, "mvn") {
			missing(t, require, "mvn (Maven) is needed to fetch the Kafka jars: "+out)
		}
		// Stop whatever half-started before failing.
		_, _ = b.run("stop")
		t.Fatalf("scripts/kafka.sh start: %v\n%s", err, out)
	}
	b.brokers = lastLine(out)
	t.Cleanup(func() {
		if out, err := b.run("stop"); err != nil {
			t.Errorf("scripts/kafka.sh stop: %v\n%s", err, out)
		}
	})
	t.Logf("own broker at %s (state dir %s)", b.brokers, b.dir)
	return b
}

func missing(t testing.TB, require bool, what string) {
	t.Helper()
	if require {
		t.Fatalf("%s=1 but a broker of the test's own cannot start: %s", EnvRequire, what)
	}
	t.Skipf("cannot start a broker of the test's own: %s", what)
}

func haveJava() bool {
	if h := os.Getenv("JAVA_HOME"); h != "" {
		if st, err := os.Stat(filepath.Join(h, "bin", "java")); err == nil && !st.IsDir() {
			return true
		}
	}
	_, err := exec.LookPath("java")
	return err == nil
}

// repoRoot walks up from the working directory (a test's package dir) to
// the directory holding go.mod.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		up := filepath.Dir(dir)
		if up == dir {
			return "", errors.New("kafkatest: no go.mod above the working directory")
		}
		dir = up
	}
}

// run runs scripts/kafka.sh cmd on b's state dir and returns its stdout and
// stderr together (stdout's last line is the bootstrap address).
func (b *OwnedBroker) run(cmd string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	c := exec.CommandContext(ctx, "bash", b.script, cmd)
	c.Env = append(os.Environ(), EnvDir+"="+b.dir)
	if os.Getenv("KORD_KAFKA_HEAP_OPTS") == "" {
		// Beside the shared broker on a small machine.
		c.Env = append(c.Env, "KORD_KAFKA_HEAP_OPTS=-Xmx512m -Xms128m")
	}
	var stdout, stderr bytes.Buffer
	c.Stdout, c.Stderr = &stdout, &stderr
	c.WaitDelay = 10 * time.Second
	err := c.Run()
	return stderr.String() + stdout.String(), err
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	return s
}

// Brokers is the broker's bootstrap address; it stays the same across
// Restart, Stop and Start.
func (b *OwnedBroker) Brokers() string { return b.brokers }

// Dir is the broker's state dir (config, data, broker.log).
func (b *OwnedBroker) Dir() string { return b.dir }

// Cluster is the broker as a Cluster, for CreateTopic, Client, ReadAll.
func (b *OwnedBroker) Cluster() *Cluster { return &Cluster{Name: "kafka", Brokers: b.brokers} }

// Proxied is this broker's proxied listener (see Proxied); no lock is
// taken: the broker is t's own.
func (b *OwnedBroker) Proxied(t testing.TB) (front, backend string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(b.dir, "proxy"))
	f := strings.Fields(string(data))
	if err != nil || len(f) != 2 {
		t.Fatalf("own broker's proxied listener: %v %q (is it running?)", err, data)
	}
	return f[0], f[1]
}

// StartProxy starts a faultproxy on this broker's proxied listener, logging
// to t and closed when t ends. It stays usable across Restart, Stop and
// Start: while the broker is down it accepts connections and closes them.
func (b *OwnedBroker) StartProxy(t testing.TB) *faultproxy.Proxy {
	t.Helper()
	front, backend := b.Proxied(t)
	return startProxy(t, front, backend)
}

// Restart stops the broker (SIGTERM, as scripts/kafka.sh stop) and starts it
// again with the same config, ports and data; it returns when it answers.
func (b *OwnedBroker) Restart(t testing.TB) {
	t.Helper()
	b.must(t, "restart")
}

// Stop stops the broker (SIGTERM); data and config stay for Start.
func (b *OwnedBroker) Stop(t testing.TB) {
	t.Helper()
	b.must(t, "stop")
}

// Kill kills the broker with SIGKILL, a crash; data stays for Start.
func (b *OwnedBroker) Kill(t testing.TB) {
	t.Helper()
	b.must(t, "kill")
}

// Start starts a stopped or killed broker again from its config and data
// (same ports, nothing wiped) and returns when it answers; it does nothing
// if the broker runs.
func (b *OwnedBroker) Start(t testing.TB) {
	t.Helper()
	b.must(t, "resume")
}

func (b *OwnedBroker) must(t testing.TB, cmd string) {
	t.Helper()
	start := time.Now()
	if out, err := b.run(cmd); err != nil {
		t.Fatalf("scripts/kafka.sh %s: %v\n%s", cmd, err, out)
	}
	t.Logf("own broker: %s took %v", cmd, time.Since(start).Round(time.Millisecond))
}
