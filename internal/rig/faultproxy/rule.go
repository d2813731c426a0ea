package faultproxy

import (
	"errors"
	"fmt"
	"sync"
	"time"
)

// Rule picks one request and does one thing to it.
type Rule struct {
	// API is the request's API key (Produce, EndTxn, ...; AnyAPI for any).
	// Mind that the zero value is Produce.
	API int16
	// Match, when set, must also accept the request frame (without its size
	// prefix; see IsCommit, ClientID, Decode). It runs on the proxy's
	// goroutines with the proxy's lock held: it must be quick and must not
	// call the Proxy.
	Match func(frame []byte) bool
	// Nth: the rule fires on the Nth request it matches, counted from when
	// it was added (0 or 1: the first). A request consumed by another rule
	// still counts. A rule fires once, then is gone.
	Nth int
	// Action is what happens to the request the rule fires on.
	Action Action
}

// Action is what a Rule does; make one with DelayRequest, DelayResponse,
// DropResponse, CutBeforeRequest or CutAfterRequest.
type Action struct {
	kind actionKind
	d    time.Duration
}

type actionKind int

const (
	actNone actionKind = iota
	actDelayRequest
	actDelayResponse
	actDropResponse
	actCutBefore
	actCutAfter
)

// DelayRequest holds the request, and everything the client sends after it
// on that connection, for d, then forwards it. If the client closes the
// connection meanwhile, the held bytes still reach the broker when d is up
// (a request that "lands late", after its client gave up); the proxy then
// waits for the broker's answers (up to the drain timeout, see SetDrain)
// and closes the broker side.
func DelayRequest(d time.Duration) Action { return Action{kind: actDelayRequest, d: d} }

// DelayResponse forwards the request at once and holds its response, and
// every later response on that connection, for d from when it arrives.
func DelayResponse(d time.Duration) Action { return Action{kind: actDelayResponse, d: d} }

// DropResponse forwards the request and discards its response. The
// connection stays open: the client sees no answer until its own timeout.
func DropResponse() Action { return Action{kind: actDropResponse} }

// CutBeforeRequest closes the connection, both sides, instead of forwarding
// the request: the broker never sees it. Requests before it on the
// connection are forwarded first (after any delay they are under).
func CutBeforeRequest() Action { return Action{kind: actCutBefore} }

// CutAfterRequest forwards the request, then closes the client's side of the
// connection: its response never reaches the client. The broker's side is
// closed once the broker answered every forwarded request (or the drain
// timeout passed), so the request was surely processed: the client sees a
// request in flight whose outcome is unknown.
func CutAfterRequest() Action { return Action{kind: actCutAfter} }

func (a Action) String() string {
	switch a.kind {
	case actDelayRequest:
		return fmt.Sprintf("DelayRequest(%v)", a.d)
	case actDelayResponse:
		return fmt.Sprintf("DelayResponse(%v)", a.d)
	case actDropResponse:
		return "DropResponse"
	case actCutBefore:
		return "CutBeforeRequest"
	case actCutAfter:
		return "CutAfterRequest"
	}
	return "no action"
}

// ErrConnClosed is a Fired's Err when its connection closed (a cut, CutAll,
// Close, either end going away) before the action completed.
var ErrConnClosed = errors.New("faultproxy: connection closed before the action completed")

// ErrClientGone is a DelayResponse's Err when the client had closed its
// connection by the time the held response was due, so it was discarded.
var ErrClientGone = errors.New("faultproxy: client gone, response discarded")

// Fired tells a test about one added Rule: when it fired (matched its
// request) and when its action completed.
type Fired struct {
	rule    Rule
	matched chan struct{}
	done    chan struct{}

	mu        sync.Mutex
	at        time.Time
	doneAt    time.Time
	err       error
	frame     []byte
	conn      int
	completed sync.Once
}

func newFired(r Rule) *Fired {
	return &Fired{rule: r, matched: make(chan struct{}), done: make(chan struct{})}
}

// Rule is the rule this handle reports on.
func (f *Fired) Rule() Rule { return f.rule }

// C is closed when the rule fires: its request arrived at the proxy.
func (f *Fired) C() <-chan struct{} { return f.matched }

// At is when the rule fired; zero before.
func (f *Fired) At() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.at
}

// Request is a copy of the frame the rule fired on (no size prefix); nil
// before it fired.
func (f *Fired) Request() []byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]byte(nil), f.frame...)
}

// Conn is the proxy's number of the connection the rule fired on (1 for
// the first connection accepted); 0 before it fired.
func (f *Fired) Conn() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.conn
}

// Done is closed when the action completed or can no longer complete (then
// Err says why): a delayed request or response was forwarded, a response
// dropped, a connection cut.
func (f *Fired) Done() <-chan struct{} { return f.done }

// DoneAt is when the action completed; zero before.
func (f *Fired) DoneAt() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.doneAt
}

// Err is nil when the action completed as described, ErrConnClosed or
// ErrClientGone when it could not; nil before Done.
func (f *Fired) Err() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

// Wait waits up to timeout for the action to complete and returns its Err,
// or an error saying whether the rule never fired or never completed.
func (f *Fired) Wait(timeout time.Duration) error {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-f.done:
		return f.Err()
	case <-t.C:
	}
	select {
	case <-f.matched:
		return fmt.Errorf("faultproxy: %s on %s fired but did not complete within %v", f.rule.Action, APIName(f.rule.API), timeout)
	default:
		return fmt.Errorf("faultproxy: %s on %s did not fire within %v", f.rule.Action, APIName(f.rule.API), timeout)
	}
}

func (f *Fired) fire(conn int, frame []byte, at time.Time) {
	f.mu.Lock()
	f.at, f.conn = at, conn
	f.frame = append([]byte(nil), frame...)
	f.mu.Unlock()
	close(f.matched)
}

// finish completes the action once; later calls do nothing.
func (f *Fired) finish(err error) {
	f.completed.Do(func() {
		f.mu.Lock()
		f.doneAt, f.err = time.Now(), err
		f.mu.Unlock()
		close(f.done)
	})
}

func finishAll(fs []*Fired, err error) {
	for _, f := range fs {
		f.finish(err)
	}
}

// rule is an added Rule waiting to fire.
type rule struct {
	Rule
	nth   int
	count int
	fired *Fired
}

// decision is what the rules that fired on one request want done to it.
type decision struct {
	reqDelay  time.Duration
	respDelay time.Duration
	drop      bool
	cutBefore bool
	cutAfter  bool
	reqFired  []*Fired // complete when the request is forwarded or cut
	respFired []*Fired // complete when the response is forwarded or dropped
}

func (d *decision) add(f *Fired) {
	a := f.rule.Action
	switch a.kind {
	case actDelayRequest:
		d.reqDelay += a.d
		d.reqFired = append(d.reqFired, f)
	case actDelayResponse:
		d.respDelay += a.d
		d.respFired = append(d.respFired, f)
	case actDropResponse:
		d.drop = true
		d.respFired = append(d.respFired, f)
	case actCutBefore:
		d.cutBefore = true
		d.reqFired = append(d.reqFired, f)
	case actCutAfter:
		d.cutAfter = true
		d.reqFired = append(d.reqFired, f)
	default:
		d.reqFired = append(d.reqFired, f)
	}
}
