package faultproxy

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// startProxy starts a proxy on a free port in front of b, closed when t ends.
func startProxy(t *testing.T, b *fakeBroker) *Proxy {
	t.Helper()
	p, err := Start("127.0.0.1:0", b.addr())
	if err != nil {
		t.Fatal(err)
	}
	p.SetLogf(t.Logf)
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// slack absorbs scheduling noise under -race on a loaded machine.
const slack = 30 * time.Millisecond

func TestForwardsInOrderOnEveryConnection(t *testing.T) {
	b := startFakeBroker(t)
	p := startProxy(t, b)
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	for i := 0; i < 3; i++ {
		c := dial(t, p.Addr())
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 20; j++ {
				c.corr++
				frame := requestFrame(Metadata, 1, c.corr, []byte{byte(j)})
				buf := binary.BigEndian.AppendUint32(nil, uint32(len(frame)))
				if _, err := c.c.Write(append(buf, frame...)); err != nil {
					errs <- err
					return
				}
			}
			for j := int32(1); j <= 20; j++ {
				corr, err := c.recv(5 * time.Second)
				if err != nil || corr != j {
					errs <- fmt.Errorf("response %d: correlation %d, %v", j, corr, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got := p.Seen(Metadata); got != 60 {
		t.Errorf("Seen(Metadata) = %d, want 60", got)
	}
	if got := p.Seen(AnyAPI); got != 60 {
		t.Errorf("Seen(AnyAPI) = %d, want 60", got)
	}
	if got := p.Conns(); got != 3 {
		t.Errorf("Conns() = %d, want 3", got)
	}
}

func TestDelayRequestHoldsItAndWhatFollows(t *testing.T) {
	const d = 300 * time.Millisecond
	b := startFakeBroker(t)
	p := startProxy(t, b)
	f := p.Add(Rule{API: Fetch, Action: DelayRequest(d)})
	c := dial(t, p.Addr())
	other := dial(t, p.Addr())

	c.send(Metadata, nil)
	if r := b.mustNext(time.Second); r.api != Metadata {
		t.Fatalf("first request at the broker: api %d", r.api)
	}
	start := time.Now()
	c.send(Fetch, nil)
	c.send(Metadata, nil) // behind the held Fetch
	select {
	case <-f.C():
	case <-time.After(time.Second):
		t.Fatal("the rule did not fire")
	}
	// Another connection is not held.
	other.send(Metadata, nil)
	r := b.mustNext(time.Second)
	if r.api != Metadata {
		t.Fatalf("the broker got api %d after %v, want the other connection's Metadata first: the Fetch is held", r.api, r.at.Sub(start))
	}
	if r.at.Sub(start) >= d {
		t.Fatalf("the other connection's request came after %v, want at once", r.at.Sub(start))
	}
	r1, r2 := b.mustNext(2*time.Second), b.mustNext(2*time.Second)
	if r1.api != Fetch || r2.api != Metadata {
		t.Fatalf("order at the broker: %d then %d, want Fetch then Metadata", r1.api, r2.api)
	}
	if r1.at.Sub(start) < d-slack || r2.at.Sub(start) < d-slack {
		t.Fatalf("held requests arrived after %v and %v, want >= %v", r1.at.Sub(start), r2.at.Sub(start), d)
	}
	if err := f.Wait(time.Second); err != nil {
		t.Fatal(err)
	}
	if held := f.DoneAt().Sub(f.At()); held < d {
		t.Fatalf("Fired says held for %v, want >= %v", held, d)
	}
	for _, want := range []int32{1, 2, 3} {
		if got := c.mustRecv(time.Second); got != want {
			t.Fatalf("response correlation %d, want %d", got, want)
		}
	}
}

// The Jepsen / KIP-890 shape: the client gives up on a request (closes its
// connection) while the proxy holds it; the request still reaches the broker
// later, and only then is the broker side closed.
func TestDelayedRequestLandsAfterTheClientClosed(t *testing.T) {
	const d = 300 * time.Millisecond
	b := startFakeBroker(t)
	p := startProxy(t, b)
	f := p.Add(Rule{API: EndTxn, Match: IsCommit, Action: DelayRequest(d)})
	c := dial(t, p.Addr())
	frame := endTxnFrame(t, 3, true)
	c.sendFrame(frame)
	<-f.C()
	if err := c.c.Close(); err != nil {
		t.Fatal(err)
	}
	closedAt := time.Now()
	r := b.mustNext(2 * time.Second)
	if !bytes.Equal(r.frame, frame) {
		t.Fatalf("the broker got %x, want the held EndTxn %x", r.frame, frame)
	}
	if r.at.Sub(f.At()) < d-slack {
		t.Fatalf("arrived %v after the rule fired, want >= %v", r.at.Sub(f.At()), d)
	}
	if !r.at.After(closedAt) {
		t.Fatal("the request reached the broker before the client closed")
	}
	if err := f.Wait(time.Second); err != nil {
		t.Fatal(err)
	}
	// The broker answered, so the proxy closes its side.
	if !b.waitEOFs(1, 2*time.Second) {
		t.Fatal("the broker side was not closed after the late request was answered")
	}
}

// A late request the broker never answers: the broker side is closed when
// the drain timeout passes.
func TestDrainTimeoutClosesTheBrokerSide(t *testing.T) {
	b := startFakeBroker(t)
	b.setSilent(true)
	p := startProxy(t, b)
	p.SetDrain(200 * time.Millisecond)
	c := dial(t, p.Addr())
	c.send(Metadata, nil)
	b.mustNext(time.Second)
	_ = c.c.Close()
	start := time.Now()
	if !b.waitEOFs(1, 2*time.Second) {
		t.Fatal("the broker side was not closed after the drain timeout")
	}
	if el := time.Since(start); el < 200*time.Millisecond-slack {
		t.Fatalf("the broker side closed after %v, before the drain timeout", el)
	}
}

func TestDelayResponse(t *testing.T) {
	const d = 300 * time.Millisecond
	b := startFakeBroker(t)
	p := startProxy(t, b)
	f := p.Add(Rule{API: Metadata, Action: DelayResponse(d)})
	c := dial(t, p.Addr())
	start := time.Now()
	c.send(Metadata, nil)
	c.send(Fetch, nil)
	for i := 0; i < 2; i++ {
		if r := b.mustNext(time.Second); r.at.Sub(start) >= d {
			t.Fatalf("request %d reached the broker after %v, want at once", i, r.at.Sub(start))
		}
	}
	for _, want := range []int32{1, 2} {
		if got := c.mustRecv(2 * time.Second); got != want {
			t.Fatalf("response correlation %d, want %d", got, want)
		}
		if el := time.Since(start); el < d {
			t.Fatalf("response %d after %v, want >= %v (held, or behind the held one)", want, el, d)
		}
	}
	if err := f.Wait(time.Second); err != nil {
		t.Fatal(err)
	}
	// Later responses flow at once again.
	c.send(Metadata, nil)
	start = time.Now()
	c.mustRecv(time.Second)
	if el := time.Since(start); el >= d {
		t.Fatalf("response after the rule fired took %v", el)
	}
}

func TestDropResponse(t *testing.T) {
	b := startFakeBroker(t)
	p := startProxy(t, b)
	f := p.Add(Rule{API: Fetch, Action: DropResponse()})
	c := dial(t, p.Addr())
	c.send(Fetch, nil)    // 1: dropped
	c.send(Metadata, nil) // 2
	if r := b.mustNext(time.Second); r.api != Fetch {
		t.Fatalf("the broker did not get the Fetch (got api %d)", r.api)
	}
	if got := c.mustRecv(time.Second); got != 2 {
		t.Fatalf("first response: correlation %d, want 2 (1 dropped)", got)
	}
	if err := f.Wait(time.Second); err != nil {
		t.Fatal(err)
	}
	c.expectSilent(300 * time.Millisecond)
	// The connection is still open and serves later requests.
	c.send(Fetch, nil)
	if got := c.mustRecv(time.Second); got != 3 {
		t.Fatalf("after the drop: correlation %d, want 3", got)
	}
}

func TestCutBeforeRequest(t *testing.T) {
	b := startFakeBroker(t)
	p := startProxy(t, b)
	f := p.Add(Rule{API: EndTxn, Action: CutBeforeRequest()})
	c := dial(t, p.Addr())
	c.send(Metadata, nil)
	if got := c.mustRecv(time.Second); got != 1 {
		t.Fatalf("correlation %d, want 1", got)
	}
	frame := endTxnFrame(t, 1, true)
	binary.BigEndian.PutUint32(frame[4:], 2)
	c.sendFrame(frame)
	c.corr = 2
	c.send(Metadata, nil)
	c.expectClosed(time.Second)
	if err := f.Wait(time.Second); err != nil {
		t.Fatal(err)
	}
	if r := b.mustNext(time.Second); r.api != Metadata {
		t.Fatalf("api %d", r.api)
	}
	if r, ok := b.next(200 * time.Millisecond); ok {
		t.Fatalf("the broker got api %d after the cut", r.api)
	}
	if !b.waitEOFs(1, time.Second) {
		t.Fatal("the broker side stayed open")
	}
	if got := p.Seen(EndTxn); got != 1 {
		t.Fatalf("Seen(EndTxn) = %d, want 1", got)
	}
	// New connections are forwarded as before.
	c2 := dial(t, p.Addr())
	c2.sendFrame(endTxnFrame(t, 1, true))
	if got := c2.mustRecv(time.Second); got != 1 {
		t.Fatalf("new connection: correlation %d", got)
	}
}

func TestCutAfterRequest(t *testing.T) {
	b := startFakeBroker(t)
	p := startProxy(t, b)
	f := p.Add(Rule{API: EndTxn, Match: IsCommit, Action: CutAfterRequest()})
	c := dial(t, p.Addr())
	c.sendFrame(endTxnFrame(t, 4, false)) // an abort: not matched
	if got := c.mustRecv(time.Second); got != 1 {
		t.Fatalf("correlation %d", got)
	}
	frame := endTxnFrame(t, 4, true)
	binary.BigEndian.PutUint32(frame[4:], 2)
	c.sendFrame(frame)
	c.expectClosed(time.Second)
	if err := f.Wait(time.Second); err != nil {
		t.Fatal(err)
	}
	b.mustNext(time.Second)
	if r := b.mustNext(time.Second); !bytes.Equal(r.frame, frame) {
		t.Fatal("the broker did not get the commit")
	}
	if !b.waitEOFs(1, time.Second) {
		t.Fatal("the broker side stayed open after answering")
	}
	// Forwarding goes on for new connections.
	c2 := dial(t, p.Addr())
	c2.send(Metadata, nil)
	c2.mustRecv(time.Second)
}

// Even when the broker answers before the cut (here it has 200 ms to), the
// answer never reaches the client.
func TestCutAfterRequestNeverLeaksTheAnswer(t *testing.T) {
	testHookBeforeCutAfter = func() { time.Sleep(200 * time.Millisecond) }
	t.Cleanup(func() { testHookBeforeCutAfter = nil }) // runs after the proxy's Close
	b := startFakeBroker(t)
	p := startProxy(t, b)
	f := p.Add(Rule{API: EndTxn, Action: CutAfterRequest()})
	c := dial(t, p.Addr())
	c.sendFrame(endTxnFrame(t, 1, true))
	c.expectClosed(2 * time.Second)
	if err := f.Wait(time.Second); err != nil {
		t.Fatal(err)
	}
}

func TestNthMatchAndFiresOnce(t *testing.T) {
	b := startFakeBroker(t)
	p := startProxy(t, b)
	c := dial(t, p.Addr())
	c.send(Metadata, nil) // before the rule: not counted
	c.mustRecv(time.Second)
	f := p.Add(Rule{API: Metadata, Nth: 3, Action: DropResponse()})
	var got []int32
	for i := 0; i < 6; i++ {
		c.send(Fetch, nil) // other API: not counted
		c.send(Metadata, nil)
	}
	for i := 0; i < 11; i++ {
		got = append(got, c.mustRecv(time.Second))
	}
	c.expectSilent(100 * time.Millisecond)
	// Metadata requests after the rule: correlations 3, 5, 7, 9, 11, 13;
	// the third (7) is dropped, the rest answered: it fired once.
	for _, corr := range got {
		if corr == 7 {
			t.Fatalf("correlation 7 was answered; responses: %v", got)
		}
	}
	if err := f.Wait(time.Second); err != nil {
		t.Fatal(err)
	}
	if req := f.Request(); int32(binary.BigEndian.Uint32(req[4:])) != 7 {
		t.Fatalf("fired on correlation %d", binary.BigEndian.Uint32(req[4:]))
	}

	// A predicate narrows what counts: the second commit, aborts between.
	g := p.Add(Rule{API: EndTxn, Match: IsCommit, Nth: 2, Action: DropResponse()})
	commits := map[int32]bool{}
	for i, commit := range []bool{false, true, false, true, true} {
		frame := endTxnFrame(t, int16(i+1), commit) // versions 1..5
		c.corr++
		binary.BigEndian.PutUint32(frame[4:], uint32(c.corr))
		commits[c.corr] = commit
		c.sendFrame(frame)
	}
	answered := map[int32]bool{}
	for i := 0; i < 4; i++ {
		answered[c.mustRecv(time.Second)] = true
	}
	c.expectSilent(100 * time.Millisecond)
	if err := g.Wait(time.Second); err != nil {
		t.Fatal(err)
	}
	// Correlations 14..18: commit at 15, 17, 18; the second commit is 17.
	if answered[17] || len(answered) != 4 {
		t.Fatalf("answered %v, want all but 17", answered)
	}
	if p.Seen(EndTxn) != 5 || p.Seen(Metadata) != 7 || p.Seen(Fetch) != 6 {
		t.Fatalf("Seen: EndTxn %d, Metadata %d, Fetch %d", p.Seen(EndTxn), p.Seen(Metadata), p.Seen(Fetch))
	}
}

func TestRemoveAndWaitWhenNotFired(t *testing.T) {
	b := startFakeBroker(t)
	p := startProxy(t, b)
	f := p.Add(Rule{API: Metadata, Action: CutBeforeRequest()})
	if err := f.Wait(50 * time.Millisecond); err == nil || !strings.Contains(err.Error(), "did not fire") {
		t.Fatalf("Wait = %v", err)
	}
	if !p.Remove(f) || p.Remove(f) {
		t.Fatal("Remove: want true once")
	}
	c := dial(t, p.Addr())
	c.send(Metadata, nil)
	c.mustRecv(time.Second)
}

func TestCutAllAndRefuse(t *testing.T) {
	b := startFakeBroker(t)
	p := startProxy(t, b)
	c1, c2 := dial(t, p.Addr()), dial(t, p.Addr())
	c1.send(Metadata, nil)
	c2.send(Metadata, nil)
	c1.mustRecv(time.Second)
	c2.mustRecv(time.Second)
	if n := p.CutAll(); n != 2 {
		t.Fatalf("CutAll cut %d, want 2", n)
	}
	c1.expectClosed(time.Second)
	c2.expectClosed(time.Second)
	if !b.waitEOFs(2, time.Second) {
		t.Fatal("broker sides stayed open")
	}

	p.Refuse(true)
	c3 := dial(t, p.Addr()) // accepted, then closed
	c3.expectClosed(time.Second)
	p.Refuse(false)
	c4 := dial(t, p.Addr())
	c4.send(Metadata, nil)
	c4.mustRecv(time.Second)
	if got := p.Accepted(); got != 4 {
		t.Fatalf("Accepted() = %d, want 4", got)
	}
}

func TestTargetDownClosesTheClient(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	_ = ln.Close()
	p, err := Start("127.0.0.1:0", dead)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c := dial(t, p.Addr())
	c.expectClosed(2 * time.Second)
}

// proxyGoroutines lists the stacks of goroutines running the proxy's code.
// A goroutine that has just called WaitGroup.Done may still be on its way
// out, so it looks again for up to wait before reporting any.
func proxyGoroutines(wait time.Duration) []string {
	deadline := time.Now().Add(wait)
	for {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		var out []string
		for _, g := range strings.Split(string(buf), "\n\n") {
			if strings.Contains(g, "faultproxy.(*Proxy)") || strings.Contains(g, "faultproxy.(*conn)") {
				out = append(out, g)
			}
		}
		if len(out) == 0 || time.Now().After(deadline) {
			return out
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestCloseLeavesNoGoroutine(t *testing.T) {
	before := runtime.NumGoroutine()
	b := startFakeBroker(t)
	b.setSilent(true) // the dropped response never comes: the drop is pending
	p, err := Start("127.0.0.1:0", b.addr())
	if err != nil {
		t.Fatal(err)
	}
	held := p.Add(Rule{API: Fetch, Action: DelayRequest(time.Hour)})
	heldResp := p.Add(Rule{API: Metadata, Action: DelayResponse(time.Hour)})
	dropped := p.Add(Rule{API: EndTxn, Action: DropResponse()})
	c1, c2, c3 := dial(t, p.Addr()), dial(t, p.Addr()), dial(t, p.Addr())
	c1.send(Fetch, nil)
	c2.send(Metadata, nil)
	c3.sendFrame(endTxnFrame(t, 1, true))
	for _, f := range []*Fired{held, heldResp, dropped} {
		<-f.C()
	}
	b.mustNext(time.Second)
	b.mustNext(time.Second)
	// A client that closed while its request is held: the proxy is draining.
	_ = c1.c.Close()
	if len(proxyGoroutines(0)) == 0 {
		t.Fatal("no proxy goroutine found before Close: the leak check sees nothing")
	}

	closed := make(chan error, 1)
	go func() { closed <- p.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("Close did not return within 2s (held bytes must not hold it)")
	}
	// Close waited for the connections to end: their handles are finished
	// the moment it returns, and no proxy goroutine is blocked anywhere.
	for _, f := range []*Fired{held, heldResp, dropped} {
		select {
		case <-f.Done():
			if f.Err() != ErrConnClosed {
				t.Errorf("%s: Err %v, want ErrConnClosed", f.Rule().Action, f.Err())
			}
		default:
			t.Errorf("%s: not Done when Close returned", f.Rule().Action)
		}
	}
	if gs := proxyGoroutines(time.Second); len(gs) > 0 {
		t.Fatalf("after Close, %d proxy goroutines remain:\n%s", len(gs), strings.Join(gs, "\n\n"))
	}
	c2.expectClosed(time.Second)
	c3.expectClosed(time.Second)
	_ = c2.c.Close()
	_ = c3.c.Close()
	b.close()
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		t.Fatalf("%d goroutines after Close, %d before", n, before)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}
