// Package faultproxy is a fault-injecting TCP proxy for the Kafka protocol,
// for tests that put real network faults between a client (librdkafka via
// confluent-kafka-go, or franz-go) and a real broker.
//
// The proxy listens on a fixed address and forwards every connection to a
// target. It understands Kafka framing just enough to target requests: every
// request and response is a 4-byte big-endian size followed by that many
// bytes; a request starts with api_key, api_version and correlation_id, a
// response with the correlation_id of the request it answers. Bytes are
// forwarded frame by frame, in order in each direction, and the proxy
// remembers, per connection, which request each outstanding correlation id
// belongs to.
//
// Rules added while running (Proxy.Add) pick one request by API key, an
// optional predicate and a match count, and delay it, delay or drop its
// response, or cut the connection before or after it.
//
// For a client to send ALL its traffic through the proxy, the broker must
// advertise the proxy's address: scripts/kafka.sh gives its broker a PROXIED
// listener bound to a backend port and advertised as a front port, and the
// proxy listens on the front port and forwards to the backend (see
// internal/rig/kafkatest.Proxied and StartProxy).
//
// A test typically does:
//
//	p := kafkatest.StartProxy(t) // the client bootstraps at p.Addr()
//	f := p.Add(faultproxy.Rule{API: faultproxy.EndTxn, Match: faultproxy.IsCommit,
//		Action: faultproxy.CutAfterRequest()})
//	... run the job ...
//	if err := f.Wait(30 * time.Second); err != nil { t.Fatal(err) }
//
// What librdkafka 2.11 (confluent-kafka-go v2.11.1) does against Kafka 4.4,
// as observed through this proxy, matters when picking a rule:
//
//   - Each client opens a bootstrap connection (ApiVersions, Metadata) that it
//     closes once it learned the broker, then one connection per broker
//     (Produce, Fetch, ListOffsets, FindCoordinator, and a transactional
//     producer's TxnOffsetCommit), plus one per coordinator role: a
//     transactional producer's TxnCoordinator connection carries
//     InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn and EndTxn; a
//     consumer's GroupCoordinator connection carries OffsetFetch. So holding
//     EndTxn does not hold Produce. client.id defaults to "rdkafka" for every
//     client: set it to tell clients apart in a Match (ClientID).
//   - It sends EndTxn v1, AddPartitionsToTxn v0, AddOffsetsToTxn v0,
//     InitProducerId v4, TxnOffsetCommit v3, Produce v10, Fetch v16.
//   - An in-flight request unanswered for socket.timeout.ms (default 60 s;
//     must be <= transaction.timeout.ms + 100) times out; librdkafka then
//     closes that connection, opens a new one and retries. For EndTxn it
//     retries by itself and CommitTransaction returns nil if the retry
//     succeeds. So a DropResponse or a long DelayResponse on a commit costs
//     socket.timeout.ms and is otherwise invisible to the application; a
//     CutBeforeRequest or CutAfterRequest is retried at once on a new
//     connection, also invisible; a DelayRequest longer than
//     socket.timeout.ms makes the original EndTxn land after its retry.
//   - It reconnects after a cut or a refused connection on its own, with
//     backoff (reconnect.backoff.ms).
package faultproxy

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// DefaultDrain is how long, by default, the proxy keeps the broker side of
// a connection open after the client side went away (client closed, or
// CutAfterRequest) so the broker can answer what was forwarded to it.
const DefaultDrain = 10 * time.Second

// testHookBeforeCutAfter, set by tests only, runs between forwarding a
// CutAfterRequest's request and cutting the client off.
var testHookBeforeCutAfter func()

// maxFrame bounds one frame (Kafka's own limits are far lower: the broker's
// socket.request.max.bytes is 100 MiB).
const maxFrame = 256 << 20

// Proxy is a running fault-injecting proxy.
type Proxy struct {
	ln     net.Listener
	target string
	ctx    context.Context // canceled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup // every goroutine the proxy started

	mu       sync.Mutex
	closed   bool
	conns    map[*conn]struct{}
	nextConn int
	accepted int
	refuse   bool
	rules    []*rule
	seen     map[int16]int
	drain    time.Duration
	logf     func(format string, args ...any)
}

// Start listens on listen (a fixed host:port, e.g. the front address a broker
// advertises) and forwards every accepted connection to target.
func Start(listen, target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listen on %s: %w", listen, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Proxy{
		ln:     ln,
		target: target,
		ctx:    ctx,
		cancel: cancel,
		conns:  map[*conn]struct{}{},
		seen:   map[int16]int{},
		drain:  DefaultDrain,
	}
	p.wg.Add(1)
	go p.acceptLoop()
	return p, nil
}

// Addr is the address the proxy listens on.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Target is the address the proxy forwards to.
func (p *Proxy) Target() string { return p.target }

// SetLogf makes the proxy report connections, fired rules and cuts through
// logf (nil: quiet, the default). logf is not called after Close returns.
func (p *Proxy) SetLogf(logf func(format string, args ...any)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.logf = logf
}

// SetDrain sets how long the broker side of a connection stays open, after
// its client side went away, for the broker to answer what was forwarded
// (DefaultDrain). It applies to connections whose client goes away later.
func (p *Proxy) SetDrain(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.drain = d
}

func (p *Proxy) log(format string, args ...any) {
	p.mu.Lock()
	logf := p.logf
	p.mu.Unlock()
	if logf != nil {
		logf("faultproxy %s: "+format, append([]any{p.Addr()}, args...)...)
	}
}

// Add adds a rule and returns the handle that reports on it. When several
// rules fire on the same request, all apply: request delays add up, response
// delays add up, a drop or a cut applies whatever else fired.
func (p *Proxy) Add(r Rule) *Fired {
	f := newFired(r)
	nth := r.Nth
	if nth < 1 {
		nth = 1
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rules = append(p.rules, &rule{Rule: r, nth: nth, fired: f})
	return f
}

// Remove removes a rule that has not fired yet and reports whether it did.
func (p *Proxy) Remove(f *Fired) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, r := range p.rules {
		if r.fired == f {
			p.rules = append(p.rules[:i], p.rules[i+1:]...)
			return true
		}
	}
	return false
}

// Seen is how many requests with this API key the proxy received from
// clients since Start (AnyAPI: of any key), whether forwarded or not.
func (p *Proxy) Seen(api int16) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if api == AnyAPI {
		n := 0
		for _, c := range p.seen {
			n += c
		}
		return n
	}
	return p.seen[api]
}

// Accepted is how many connections the proxy accepted since Start,
// refused ones included.
func (p *Proxy) Accepted() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepted
}

// Conns is how many proxied connections are open now.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// CutAll closes every current connection, both sides, now: held requests
// and responses are discarded. New connections are accepted as usual. It
// returns how many connections it cut.
func (p *Proxy) CutAll() int {
	p.mu.Lock()
	cs := make([]*conn, 0, len(p.conns))
	for c := range p.conns {
		cs = append(cs, c)
	}
	p.mu.Unlock()
	for _, c := range cs {
		c.shutdown()
	}
	if len(cs) > 0 {
		p.log("cut all %d connections", len(cs))
	}
	return len(cs)
}

// Refuse, when on, makes the proxy accept new connections and close them at
// once, as a partitioned broker would look; existing connections stay (cut
// them with CutAll).
func (p *Proxy) Refuse(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refuse = on
}

// Close stops listening, closes every connection (held bytes are discarded)
// and returns when every goroutine the proxy started has ended.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	cs := make([]*conn, 0, len(p.conns))
	for c := range p.conns {
		cs = append(cs, c)
	}
	p.mu.Unlock()
	p.cancel()
	err := p.ln.Close()
	for _, c := range cs {
		c.shutdown()
	}
	p.wg.Wait()
	return err
}

func (p *Proxy) acceptLoop() {
	defer p.wg.Done()
	for {
		cl, err := p.ln.Accept()
		if err != nil {
			if p.ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			// A transient accept error (out of fds, say): retry shortly.
			select {
			case <-p.ctx.Done():
				return
			case <-time.After(10 * time.Millisecond):
			}
			continue
		}
		p.mu.Lock()
		p.accepted++
		refuse := p.refuse
		p.mu.Unlock()
		if refuse {
			p.log("refused a connection from %s", cl.RemoteAddr())
			_ = cl.Close()
			continue
		}
		p.wg.Add(1)
		go p.serve(cl)
	}
}

// serve connects one client to the target and runs the connection's four
// pumps until both sides are closed.
func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	var d net.Dialer
	dctx, cancel := context.WithTimeout(p.ctx, 10*time.Second)
	server, err := d.DialContext(dctx, "tcp", p.target)
	cancel()
	if err != nil {
		p.log("dial %s: %v; closing the client's connection", p.target, err)
		_ = client.Close()
		return
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		_ = client.Close()
		_ = server.Close()
		return
	}
	p.nextConn++
	c := &conn{
		p:       p,
		id:      p.nextConn,
		client:  client,
		server:  server,
		abort:   make(chan struct{}),
		reqs:    make(chan *item, 64),
		resps:   make(chan *item, 64),
		pending: map[int32]*pending{},
		changed: make(chan struct{}, 1),
	}
	p.conns[c] = struct{}{}
	p.mu.Unlock()
	p.log("conn %d: %s -> %s", c.id, client.RemoteAddr(), p.target)

	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); c.readRequests() }()
	go func() { defer wg.Done(); c.writeRequests() }()
	go func() { defer wg.Done(); c.readResponses() }()
	c.writeResponses()
	wg.Wait()

	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	c.mu.Lock()
	hs := c.handles
	c.mu.Unlock()
	finishAll(hs, ErrConnClosed)
	p.log("conn %d closed", c.id)
}

// match counts a request and applies the rules to it.
func (p *Proxy) match(c *conn, h Header, frame []byte, now time.Time) decision {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.seen[h.API]++
	var d decision
	keep := p.rules[:0]
	var fired []*Fired
	for _, r := range p.rules {
		if (r.API == AnyAPI || r.API == h.API) && (r.Match == nil || r.Match(frame)) {
			r.count++
			if r.count == r.nth {
				fired = append(fired, r.fired)
				continue
			}
		}
		keep = append(keep, r)
	}
	for i := len(keep); i < len(p.rules); i++ {
		p.rules[i] = nil
	}
	p.rules = keep
	for _, f := range fired {
		f.fire(c.id, frame, now)
		d.add(f)
		if p.logf != nil {
			p.logf("faultproxy %s: conn %d: %s fired on %s v%d (correlation %d)",
				p.ln.Addr(), c.id, f.rule.Action, APIName(h.API), h.Version, h.Correlation)
		}
	}
	return d
}

// conn is one proxied connection: client <-> proxy <-> server (the target).
//
// Four goroutines: readRequests reads the client's frames, applies the rules
// and queues them; writeRequests forwards them to the server when due;
// readResponses reads the server's frames and queues them with what the
// rules decided for their request; writeResponses forwards them to the
// client when due. Queues keep each direction in order, so a held frame
// holds everything behind it.
type conn struct {
	p              *Proxy
	id             int
	client, server net.Conn
	reqs, resps    chan *item

	abort     chan struct{} // closed when both sides are closed for good
	abortOnce sync.Once

	mu         sync.Mutex
	pending    map[int32]*pending // correlation id -> what to do with the response
	changed    chan struct{}      // signalled when pending shrinks
	clientGone bool
	handles    []*Fired // every handle that fired here, finished at the end
}

// item is one queued frame (or the end of a direction).
type item struct {
	buf       []byte // size prefix + frame
	release   time.Time
	eof       bool
	drop      bool
	cutBefore bool
	cutAfter  bool
	fired     []*Fired
	corr      int32    // a request's correlation id, when pend is set
	pend      *pending // a request the server will answer
	api       int16    // a response's request's API key (for logs)
}

// pending is a forwarded request waiting for its response.
type pending struct {
	api   int16
	drop  bool
	delay time.Duration
	fired []*Fired
}

// shutdown closes both sides now; every pump then ends.
func (c *conn) shutdown() {
	c.abortOnce.Do(func() {
		close(c.abort)
		_ = c.client.Close()
		_ = c.server.Close()
	})
}

// closeClient closes the client side only; the server side stays, for
// requests still to land and answers still to come.
func (c *conn) closeClient() {
	c.mu.Lock()
	gone := c.clientGone
	c.clientGone = true
	c.mu.Unlock()
	if !gone {
		_ = c.client.Close()
	}
}

func (c *conn) isClientGone() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.clientGone
}

// queue puts it on q unless the connection was shut down.
func (c *conn) queue(q chan *item, it *item) bool {
	select {
	case q <- it:
		return true
	case <-c.abort:
		return false
	}
}

// waitUntil sleeps until t; false when the connection was shut down first.
func (c *conn) waitUntil(t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		select {
		case <-c.abort:
			return false
		default:
			return true
		}
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-c.abort:
		return false
	}
}

func readFrame(r *bufio.Reader) ([]byte, error) {
	var size [4]byte
	if _, err := io.ReadFull(r, size[:]); err != nil {
		return nil, err
	}
	n := int32(binary.BigEndian.Uint32(size[:]))
	if n < 0 || n > maxFrame {
		return nil, fmt.Errorf("faultproxy: bad frame size %d", n)
	}
	buf := make([]byte, 4+int(n))
	copy(buf, size[:])
	if _, err := io.ReadFull(r, buf[4:]); err != nil {
		return nil, err
	}
	return buf, nil
}

func (c *conn) readRequests() {
	r := bufio.NewReaderSize(c.client, 64<<10)
	for {
		buf, err := readFrame(r)
		if err != nil {
			// The client is gone (or we closed it): forward what is queued,
			// then drain.
			c.closeClient()
			c.queue(c.reqs, &item{eof: true})
			return
		}
		now := time.Now()
		it := &item{buf: buf, release: now}
		frame := buf[4:]
		if h, err := ParseHeader(frame); err == nil {
			d := c.p.match(c, h, frame, now)
			it.release = now.Add(d.reqDelay)
			it.cutBefore, it.cutAfter, it.fired = d.cutBefore, d.cutAfter, d.reqFired
			if !d.cutBefore && expectsResponse(h) {
				it.corr = h.Correlation
				it.pend = &pending{
					api:   h.API,
					drop:  d.drop || d.cutAfter, // a cut-after's answer must never slip through
					delay: d.respDelay, fired: d.respFired,
				}
			}
			c.mu.Lock()
			c.handles = append(c.handles, d.reqFired...)
			c.handles = append(c.handles, d.respFired...)
			c.mu.Unlock()
		} else if len(frame) >= 2 {
			// Too short for a request header: forwarded untracked.
			c.p.mu.Lock()
			c.p.seen[int16(binary.BigEndian.Uint16(frame))]++
			c.p.mu.Unlock()
		}
		if !c.queue(c.reqs, it) || it.cutBefore {
			return
		}
	}
}

func (c *conn) writeRequests() {
	for {
		var it *item
		select {
		case it = <-c.reqs:
		case <-c.abort:
			return
		}
		if it.eof {
			c.drainAndShutdown()
			return
		}
		if !c.waitUntil(it.release) {
			return
		}
		if it.cutBefore {
			c.shutdown()
			c.p.log("conn %d: cut before a request", c.id)
			finishAll(it.fired, nil)
			return
		}
		if it.pend != nil {
			// Registered before the write: the answer cannot come sooner.
			c.mu.Lock()
			c.pending[it.corr] = it.pend
			c.mu.Unlock()
		}
		if _, err := c.server.Write(it.buf); err != nil {
			c.shutdown()
			return
		}
		if c.isClientGone() {
			c.p.log("conn %d: forwarded a request after its client had gone", c.id)
		}
		if it.cutAfter {
			if testHookBeforeCutAfter != nil {
				testHookBeforeCutAfter()
			}
			c.closeClient()
			c.p.log("conn %d: cut after a request", c.id)
			finishAll(it.fired, nil)
			c.drainAndShutdown()
			return
		}
		finishAll(it.fired, nil)
	}
}

// drainAndShutdown waits, up to the drain timeout, for the server to answer
// every request forwarded on this connection, then shuts it down.
func (c *conn) drainAndShutdown() {
	defer c.shutdown()
	c.p.mu.Lock()
	drain := c.p.drain
	c.p.mu.Unlock()
	timer := time.NewTimer(drain)
	defer timer.Stop()
	for {
		c.mu.Lock()
		n := len(c.pending)
		c.mu.Unlock()
		if n == 0 {
			return
		}
		select {
		case <-c.changed:
		case <-timer.C:
			c.p.log("conn %d: %d requests still unanswered after %v, closing", c.id, n, drain)
			return
		case <-c.abort:
			return
		}
	}
}

func (c *conn) readResponses() {
	r := bufio.NewReaderSize(c.server, 64<<10)
	for {
		buf, err := readFrame(r)
		if err != nil {
			c.queue(c.resps, &item{eof: true})
			return
		}
		it := &item{buf: buf, release: time.Now()}
		if len(buf) >= 8 {
			corr := int32(binary.BigEndian.Uint32(buf[4:]))
			c.mu.Lock()
			if pd := c.pending[corr]; pd != nil {
				delete(c.pending, corr)
				it.release = it.release.Add(pd.delay)
				it.drop, it.fired, it.api = pd.drop, pd.fired, pd.api
			}
			c.mu.Unlock()
			select {
			case c.changed <- struct{}{}:
			default:
			}
		}
		if !c.queue(c.resps, it) {
			return
		}
	}
}

func (c *conn) writeResponses() {
	for {
		var it *item
		select {
		case it = <-c.resps:
		case <-c.abort:
			return
		}
		if it.eof { // the server closed: nothing more will come
			c.shutdown()
			return
		}
		if !c.waitUntil(it.release) {
			return
		}
		if it.drop {
			c.p.log("conn %d: dropped a %s response", c.id, APIName(it.api))
			finishAll(it.fired, nil)
			continue
		}
		if c.isClientGone() {
			finishAll(it.fired, ErrClientGone)
			continue
		}
		if _, err := c.client.Write(it.buf); err != nil {
			c.closeClient()
			finishAll(it.fired, ErrClientGone)
			continue
		}
		finishAll(it.fired, nil)
	}
}
