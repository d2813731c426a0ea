package faultproxy

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"
)

// fakeBroker is a Kafka-framed echo server: it answers each request frame
// with a response frame of the request's correlation id followed by the
// whole request frame, and records what it received and when.
type fakeBroker struct {
	t  *testing.T
	ln net.Listener
	wg sync.WaitGroup

	mu      sync.Mutex
	got     []received
	conns   []net.Conn
	eofs    []time.Time // when a connection's client side (the proxy) closed
	silent  bool        // no answers at all
	arrived chan received
}

type received struct {
	conn  int
	api   int16
	corr  int32
	frame []byte
	at    time.Time
}

func startFakeBroker(t *testing.T) *fakeBroker {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &fakeBroker{t: t, ln: ln, arrived: make(chan received, 1000)}
	b.wg.Add(1)
	go b.accept()
	t.Cleanup(b.close)
	return b
}

func (b *fakeBroker) addr() string { return b.ln.Addr().String() }

func (b *fakeBroker) setSilent(on bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.silent = on
}

func (b *fakeBroker) accept() {
	defer b.wg.Done()
	for n := 1; ; n++ {
		c, err := b.ln.Accept()
		if err != nil {
			return
		}
		b.mu.Lock()
		b.conns = append(b.conns, c)
		b.mu.Unlock()
		b.wg.Add(1)
		go b.serve(n, c)
	}
}

func (b *fakeBroker) serve(n int, c net.Conn) {
	defer b.wg.Done()
	defer c.Close()
	r := bufio.NewReader(c)
	for {
		buf, err := readFrame(r)
		if err != nil {
			b.mu.Lock()
			b.eofs = append(b.eofs, time.Now())
			b.mu.Unlock()
			return
		}
		frame := buf[4:]
		rc := received{conn: n, api: int16(binary.BigEndian.Uint16(frame)),
			corr: int32(binary.BigEndian.Uint32(frame[4:])), frame: frame, at: time.Now()}
		b.mu.Lock()
		b.got = append(b.got, rc)
		silent := b.silent
		b.mu.Unlock()
		b.arrived <- rc
		h, err := ParseHeader(frame)
		if silent || (err == nil && !expectsResponse(h)) {
			continue
		}
		resp := binary.BigEndian.AppendUint32(nil, uint32(4+len(frame)))
		resp = binary.BigEndian.AppendUint32(resp, uint32(rc.corr))
		resp = append(resp, frame...)
		if _, err := c.Write(resp); err != nil {
			return
		}
	}
}

// next waits for the next request the broker receives.
func (b *fakeBroker) next(timeout time.Duration) (received, bool) {
	select {
	case r := <-b.arrived:
		return r, true
	case <-time.After(timeout):
		return received{}, false
	}
}

func (b *fakeBroker) mustNext(timeout time.Duration) received {
	b.t.Helper()
	r, ok := b.next(timeout)
	if !ok {
		b.t.Fatalf("the broker received no request within %v", timeout)
	}
	return r
}

func (b *fakeBroker) eofCount() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.eofs)
}

func (b *fakeBroker) waitEOFs(n int, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if b.eofCount() >= n {
			return true
		}
		time.Sleep(5 * time.Millisecond)
	}
	return false
}

func (b *fakeBroker) close() {
	_ = b.ln.Close()
	b.mu.Lock()
	for _, c := range b.conns {
		_ = c.Close()
	}
	b.mu.Unlock()
	b.wg.Wait()
}

// testClient speaks Kafka framing over one connection.
type testClient struct {
	t    *testing.T
	c    net.Conn
	r    *bufio.Reader
	corr int32
}

func dial(t *testing.T, addr string) *testClient {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return &testClient{t: t, c: c, r: bufio.NewReader(c)}
}

// requestFrame builds a request frame (no size prefix) with header v1 and
// client id "test".
func requestFrame(api, version int16, corr int32, body []byte) []byte {
	f := binary.BigEndian.AppendUint16(nil, uint16(api))
	f = binary.BigEndian.AppendUint16(f, uint16(version))
	f = binary.BigEndian.AppendUint32(f, uint32(corr))
	f = binary.BigEndian.AppendUint16(f, 4)
	f = append(f, "test"...)
	return append(f, body...)
}

// send writes a request with the next correlation id and returns the id.
// Metadata v1 and Fetch v4 requests are non-flexible, so a header v1 fits.
func (c *testClient) send(api int16, body []byte) int32 {
	c.t.Helper()
	c.corr++
	var version int16 = 1
	if api == Fetch {
		version = 4
	}
	c.sendFrame(requestFrame(api, version, c.corr, body))
	return c.corr
}

func (c *testClient) sendFrame(frame []byte) {
	c.t.Helper()
	buf := binary.BigEndian.AppendUint32(nil, uint32(len(frame)))
	if _, err := c.c.Write(append(buf, frame...)); err != nil {
		c.t.Fatalf("send: %v", err)
	}
}

// recv reads one response: its correlation id, or an error (io.EOF when the
// proxy closed the connection, a timeout when nothing came).
func (c *testClient) recv(timeout time.Duration) (int32, error) {
	_ = c.c.SetReadDeadline(time.Now().Add(timeout))
	buf, err := readFrame(c.r)
	if err != nil {
		return 0, err
	}
	return int32(binary.BigEndian.Uint32(buf[4:])), nil
}

func (c *testClient) mustRecv(timeout time.Duration) int32 {
	c.t.Helper()
	corr, err := c.recv(timeout)
	if err != nil {
		c.t.Fatalf("recv: %v", err)
	}
	return corr
}

// expectClosed checks the proxy closed the connection: EOF or reset, not a
// timeout.
func (c *testClient) expectClosed(timeout time.Duration) {
	c.t.Helper()
	corr, err := c.recv(timeout)
	if err == nil {
		c.t.Fatalf("got a response (correlation %d), want the connection closed", corr)
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		c.t.Fatalf("connection still open after %v, want it closed", timeout)
	}
	if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
		var ne *net.OpError
		if !errors.As(err, &ne) {
			c.t.Fatalf("recv: %v, want EOF or a reset", err)
		}
	}
}

// expectSilent checks no response arrives within d.
func (c *testClient) expectSilent(d time.Duration) {
	c.t.Helper()
	corr, err := c.recv(d)
	if err == nil {
		c.t.Fatalf("got a response (correlation %d), want none", corr)
	}
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		c.t.Fatalf("recv: %v, want a timeout (connection open, no answer)", err)
	}
}
