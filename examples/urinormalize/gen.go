package main

import (
	"encoding/json"
	"fmt"
	"iter"
	"math"
	"math/rand/v2"
	"time"
)

// The simulated event time: the input starts at base and advances evenly
// over -minutes; each event is stamped up to maxDisorder before its turn
// but not before base (out of order, within the default -lateness of
// 5 s), and the events
// meant to be late up to lateMax before it, at least lateMin: with the
// default -allowed-lateness of 30 s some of those still update a window
// that fired (and fire it again), most come after their window is gone.
var base = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

const (
	maxDisorder = 3 * time.Second
	lateMin     = 30 * time.Second
	lateMax     = 5 * time.Minute
)

// genConfig is what the input depends on: the same config gives the same
// records, which is how the check knows the input without reading it.
type genConfig struct {
	events       int
	span         time.Duration // of event time
	seed         uint64
	lateFraction float64
	badFraction  float64
}

// input is one generated record.
type input struct {
	key   string
	value []byte
	// event is the record's value, decoded; nil for a malformed record.
	event *Access
	// farBehind says the event is stamped far in the past: usually, not
	// always, late (see process).
	farBehind bool
}

// template makes URIs of one endpoint, and the pattern the default
// Normalizer (no rules) gives them.
type template struct {
	weight int
	make   func(r *rand.Rand) (uri, pattern string)
}

var users = []string{"alice", "bob", "carol", "dave", "erin"}

var templates = []template{
	{35, func(r *rand.Rand) (string, string) {
		return fmt.Sprintf("yiyang/user/getById/%d", 1+r.IntN(100_000)), "yiyang/user/getById/{}"
	}},
	{20, func(r *rand.Rand) (string, string) {
		return "/api/orders/" + uuid(r) + "/items", "/api/orders/{}/items"
	}},
	{15, func(r *rand.Rand) (string, string) {
		return fmt.Sprintf("static/%016x%016x/bundle.js", r.Uint64(), r.Uint64()), "static/{}/bundle.js"
	}},
	{10, func(r *rand.Rand) (string, string) { return "health", "health" }},
	// A user name is no identifier to the default rules: one pattern per
	// user, unless a rule (-rules) folds them.
	{15, func(r *rand.Rand) (string, string) {
		u := "users/" + users[r.IntN(len(users))] + "/profile"
		return u, u
	}},
	{5, func(r *rand.Rand) (string, string) {
		return fmt.Sprintf("search?q=term%d&page=%d", r.IntN(50), 1+r.IntN(9)), "search"
	}},
}

// generate yields the input records, in the order they are produced.
func generate(g genConfig) iter.Seq[input] {
	return func(yield func(input) bool) {
		r := rand.New(rand.NewPCG(g.seed, g.seed^0x9e3779b97f4a7c15))
		total := 0
		for _, t := range templates {
			total += t.weight
		}
		for i := 0; i < g.events; i++ {
			id := fmt.Sprintf("req-%08d", i)
			kind := r.Float64()
			at := base.Add(time.Duration(int64(g.span) * int64(i) / int64(g.events)))
			farBehind := kind >= g.badFraction && kind < g.badFraction+g.lateFraction
			if farBehind {
				at = at.Add(-lateMin - time.Duration(r.Int64N(int64(lateMax-lateMin))))
			} else {
				// Not before base, so that the on-time events span
				// exactly the windows of -minutes.
				at = maxTime(at.Add(-time.Duration(r.Int64N(int64(maxDisorder)))), base)
			}
			// Kafka's record times and the windows are in milliseconds.
			at = at.Truncate(time.Millisecond)
			w := r.IntN(total)
			var uri string
			for _, t := range templates {
				if w < t.weight {
					uri, _ = t.make(r)
					break
				}
				w -= t.weight
			}
			a := Access{ID: id, IdentityURI: uri, Status: status(r), Time: at}
			a.LatencyMs = latency(r, a.Status)
			if kind < g.badFraction {
				if !yield(input{key: id, value: malformed(r, a)}) {
					return
				}
				continue
			}
			b, err := json.Marshal(a)
			if err != nil {
				panic(err) // an Access always marshals
			}
			if !yield(input{key: id, value: b, event: &a, farBehind: farBehind}) {
				return
			}
		}
	}
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// status is mostly 200, some 404, a few 500 and 503.
func status(r *rand.Rand) int {
	switch n := r.IntN(100); {
	case n < 88:
		return 200
	case n < 94:
		return 404
	case n < 97:
		return 500
	default:
		return 503
	}
}

// latency is log-normal around 20 ms, with a long tail (server errors
// three times slower), to 0.1 ms.
func latency(r *rand.Rand, status int) float64 {
	ms := math.Exp(math.Log(20) + 0.9*r.NormFloat64())
	if status >= 500 {
		ms *= 3
	}
	return math.Round(min(ms, 60_000)*10) / 10
}

// malformed returns a value the job cannot take as an access event, one
// of four kinds: not JSON (a raw log line), JSON cut short, JSON with a
// field of the wrong type, and an event without a time. Each holds a's ID,
// so that every one differs.
func malformed(r *rand.Rand, a Access) []byte {
	switch r.IntN(4) {
	case 0:
		return fmt.Appendf(nil, "GET %s %d %.1fms id=%s", a.IdentityURI, a.Status, a.LatencyMs, a.ID)
	case 1:
		b, _ := json.Marshal(a)
		return b[:len(b)/2]
	case 2:
		return fmt.Appendf(nil, `{"id":%q,"identityUri":%q,"status":"OK","latencyMs":%v,"time":%q}`,
			a.ID, a.IdentityURI, a.LatencyMs, a.Time.Format(time.RFC3339Nano))
	default:
		return fmt.Appendf(nil, `{"id":%q,"identityUri":%q,"status":%d,"latencyMs":%v}`, a.ID, a.IdentityURI, a.Status, a.LatencyMs)
	}
}

// uuid returns a random version 4 UUID in canonical form, in upper case
// one time in four (RFC 9562 section 4 allows either on input).
func uuid(r *rand.Rand) string {
	var b [16]byte
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	format := "%x-%x-%x-%x-%x"
	if r.IntN(4) == 0 {
		format = "%X-%X-%X-%X-%X"
	}
	return fmt.Sprintf(format, b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}
