package faultproxy_test

import (
	"context"
	"errors"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kordproject/kord/internal/rig/faultproxy"
	"github.com/kordproject/kord/internal/rig/kafkatest"
)

// dialHook records the address of every broker connection a kgo client
// makes.
type dialHook struct {
	mu    sync.Mutex
	addrs []string
}

func (h *dialHook) OnBrokerConnect(meta kgo.BrokerMetadata, _ time.Duration, _ net.Conn, _ error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.addrs = append(h.addrs, net.JoinHostPort(meta.Host, strconv.Itoa(int(meta.Port))))
}

// The proxy in front of the real broker's proxied listener: a client that
// bootstraps at the proxy learns only the proxy's address, so all its
// traffic goes through it; a dropped Metadata response times one request
// out and the next one works.
func TestRealBrokerThroughProxy(t *testing.T) {
	kafkatest.Broker(t) // skipped without KORD_KAFKA_BROKERS
	p := kafkatest.StartProxy(t)
	dials := &dialHook{}
	cl, err := kgo.NewClient(kgo.SeedBrokers(p.Addr()), kgo.WithHooks(dials))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	defer func() {
		// Every connection the client made went to the proxy.
		dials.mu.Lock()
		defer dials.mu.Unlock()
		if len(dials.addrs) < 2 {
			t.Errorf("the client dialled %v: want the seed and the broker it learned", dials.addrs)
		}
		for _, a := range dials.addrs {
			if a != p.Addr() {
				t.Errorf("the client dialled %s, not the proxy %s (all: %v)", a, p.Addr(), dials.addrs)
			}
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	meta, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl)
	if err != nil {
		t.Fatalf("metadata through the proxy: %v", err)
	}
	if len(meta.Brokers) == 0 {
		t.Fatal("metadata names no broker")
	}
	for _, b := range meta.Brokers {
		if addr := net.JoinHostPort(b.Host, strconv.Itoa(int(b.Port))); addr != p.Addr() {
			t.Errorf("metadata names broker %d at %s, not the proxy %s", b.NodeID, addr, p.Addr())
		}
	}
	// Coordinators are named by the listener the request came in on, too.
	fc := kmsg.NewPtrFindCoordinatorRequest()
	fc.CoordinatorKey = kafkatest.TopicName(t)
	fc.CoordinatorKeys = []string{fc.CoordinatorKey}
	fresp, err := fc.RequestWith(ctx, cl)
	if err != nil {
		t.Fatalf("find coordinator: %v", err)
	}
	for _, c := range fresp.Coordinators {
		if c.ErrorCode == 0 && net.JoinHostPort(c.Host, strconv.Itoa(int(c.Port))) != p.Addr() {
			t.Errorf("coordinator at %s:%d, not the proxy %s", c.Host, c.Port, p.Addr())
		}
	}
	if p.Seen(faultproxy.Metadata) == 0 || p.Seen(faultproxy.FindCoordinator) == 0 {
		t.Fatalf("the proxy saw %d Metadata and %d FindCoordinator requests", p.Seen(faultproxy.Metadata), p.Seen(faultproxy.FindCoordinator))
	}

	// A dropped response: the request reached the broker, no answer came.
	f := p.Add(faultproxy.Rule{API: faultproxy.Metadata, Action: faultproxy.DropResponse()})
	start := time.Now()
	dctx, dcancel := context.WithTimeout(ctx, 2*time.Second)
	_, err = cl.Broker(int(meta.Brokers[0].NodeID)).Request(dctx, kmsg.NewPtrMetadataRequest())
	dcancel()
	if err == nil {
		t.Fatal("a metadata request whose response was dropped succeeded")
	}
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) < 2*time.Second-50*time.Millisecond {
		t.Fatalf("after %v: %v, want the request's own deadline", time.Since(start), err)
	}
	if err := f.Wait(time.Second); err != nil {
		t.Fatal(err)
	}
	// It fired once: the next request is answered.
	if _, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl); err != nil {
		t.Fatalf("metadata after the dropped one: %v", err)
	}
}
