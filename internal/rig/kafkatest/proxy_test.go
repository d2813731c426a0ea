package kafkatest

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kordproject/kord/internal/rig/faultproxy"
)

// A record written before a restart is still there after it, the same
// client produces again once the broker is back, and Stop then Start keeps
// the data too. The producer goes through a faultproxy on the broker's
// proxied listener, which outlives the restarts.
func TestOwnBrokerRestartKeepsData(t *testing.T) {
	b := OwnBroker(t)
	c := b.Cluster()
	topic := c.CreateTopic(t, 1, nil)
	p := b.StartProxy(t)
	viaProxy := &Cluster{Name: "kafka", Brokers: p.Addr()}
	cl := viaProxy.Client(t, kgo.DefaultProduceTopic(topic), kgo.RecordRetries(20))
	produce := func(v string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		require.NoError(t, cl.ProduceSync(ctx, kgo.StringRecord(v)).FirstErr(), "produce %s", v)
	}
	values := func(n int) []string {
		t.Helper()
		var out []string
		for _, r := range c.ReadAll(t, topic, n, true, 60*time.Second) {
			out = append(out, string(r.Value))
		}
		return out
	}

	produce("before restart")
	b.Restart(t)
	boot, err := os.ReadFile(filepath.Join(b.Dir(), "bootstrap"))
	require.NoError(t, err)
	require.Equal(t, b.Brokers(), strings.TrimSpace(string(boot)), "restart moved the broker")
	require.Equal(t, []string{"before restart"}, values(1))
	produce("after restart")

	b.Stop(t)
	_, err = os.Stat(filepath.Join(b.Dir(), "bootstrap"))
	require.True(t, os.IsNotExist(err), "bootstrap file left after Stop")
	b.Start(t)
	require.Equal(t, []string{"before restart", "after restart"}, values(2))
	produce("after stop and start")
	require.Equal(t, []string{"before restart", "after restart", "after stop and start"}, values(3))
	require.GreaterOrEqual(t, p.Seen(faultproxy.Produce), 3, "the producer bypassed the proxy")
	require.Greater(t, p.Accepted(), 2, "the producer did not reconnect through the proxy")
}

// Proxied reads KORD_KAFKA_PROXY first, then the state dir's file, and
// refuses a file that belongs to another broker than KORD_KAFKA_BROKERS.
func TestProxiedAddrs(t *testing.T) {
	t.Setenv(EnvProxy, "127.0.0.1:1 127.0.0.1:2")
	f, b, why := proxiedAddrs()
	require.Equal(t, []string{"127.0.0.1:1", "127.0.0.1:2", ""}, []string{f, b, why})

	dir := t.TempDir()
	t.Setenv(EnvProxy, "")
	t.Setenv(EnvDir, dir)
	_, _, why = proxiedAddrs()
	require.Contains(t, why, "no "+dir+"/proxy")

	require.NoError(t, os.WriteFile(filepath.Join(dir, "proxy"), []byte("127.0.0.1:3 127.0.0.1:4\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "bootstrap"), []byte("127.0.0.1:5\n"), 0o644))
	t.Setenv(EnvBrokers, "127.0.0.1:5")
	f, b, why = proxiedAddrs()
	require.Equal(t, []string{"127.0.0.1:3", "127.0.0.1:4", ""}, []string{f, b, why})

	t.Setenv(EnvBrokers, "127.0.0.1:6")
	_, _, why = proxiedAddrs()
	require.Contains(t, why, "belongs to the broker at \"127.0.0.1:5\"")
}

// Two holders of the proxied listener's lock take turns, and a holder that
// waits too long gets an error.
func TestProxiedLockSerialises(t *testing.T) {
	front := "test-" + time.Now().Format("150405.000000000")
	t.Cleanup(func() { _ = os.Remove(frontLockFile(front)) })
	release, err := acquireFront(front, time.Second, nil)
	require.NoError(t, err)

	_, err = acquireFront(front, 200*time.Millisecond, nil)
	require.Error(t, err, "took a held lock")

	got := make(chan time.Time, 1)
	waited := make(chan struct{})
	go func() {
		release2, err := acquireFront(front, 10*time.Second, func() { close(waited) })
		if err == nil {
			release2()
		}
		got <- time.Now()
	}()
	<-waited
	time.Sleep(100 * time.Millisecond)
	released := time.Now()
	release()
	require.True(t, (<-got).After(released), "the second holder did not wait for the first")
}
