// Package failpoint kills the process at named points, for crash tests.
//
// Failpoints are enabled by the environment variable KORD_FAILPOINTS, a
// comma-separated list of name or name@N (fire on the Nth hit, default the
// first). When a failpoint fires, the process sends itself SIGKILL: no
// deferred function, no Close, no flush runs, as in a real crash. With the
// variable unset, Hit costs one atomic load.
package failpoint

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
)

// Env is the environment variable read at start.
const Env = "KORD_FAILPOINTS"

var (
	enabled atomic.Bool
	mu      sync.Mutex
	armed   map[string]int // name -> hits left before firing
	kill    = func() { _ = syscall.Kill(os.Getpid(), syscall.SIGKILL); select {} }
)

func init() {
	if err := Set(os.Getenv(Env)); err != nil {
		fmt.Fprintln(os.Stderr, "kord:", err)
		os.Exit(2)
	}
}

// Set arms the failpoints of spec (the syntax of KORD_FAILPOINTS),
// replacing any armed before. An empty spec disarms all.
func Set(spec string) error {
	m := map[string]int{}
	for _, f := range strings.Split(spec, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		name, nth, ok := strings.Cut(f, "@")
		n := 1
		if ok {
			var err error
			n, err = strconv.Atoi(nth)
			if err != nil || n < 1 {
				return fmt.Errorf("failpoint: bad hit count in %q (%s)", f, Env)
			}
		}
		m[name] = n
	}
	mu.Lock()
	armed = m
	mu.Unlock()
	enabled.Store(len(m) > 0)
	return nil
}

// Hit passes the named failpoint, killing the process if it is armed and
// this is the hit it waits for.
func Hit(name string) {
	if !enabled.Load() {
		return
	}
	mu.Lock()
	n, ok := armed[name]
	if ok {
		n--
		armed[name] = n
	}
	mu.Unlock()
	if ok && n == 0 {
		fmt.Fprintf(os.Stderr, "kord: failpoint %s: SIGKILL\n", name)
		kill()
	}
}

// Active passes the named failpoint like Hit but, instead of killing the
// process, reports whether it fires now. It simulates faults that are not
// crashes (a transactional request whose outcome is unknown, say).
func Active(name string) bool {
	if !enabled.Load() {
		return false
	}
	mu.Lock()
	defer mu.Unlock()
	n, ok := armed[name]
	if !ok {
		return false
	}
	n--
	armed[name] = n
	return n == 0
}
