package connfail_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kordproject/kord/admin"
	"github.com/kordproject/kord/consumer"
	"github.com/kordproject/kord/internal/kafkaconf"
	"github.com/kordproject/kord/internal/rig/kafkatest"
	"github.com/kordproject/kord/internal/rig/syncbuf"
	"github.com/kordproject/kord/kafkaio"
	"github.com/kordproject/kord/keyed"
	"github.com/kordproject/kord/keyed/connector"
	"github.com/kordproject/kord/kordtest"
	"github.com/kordproject/kord/producer"
	"github.com/kordproject/kord/serde"
)

// bound is the most a failure may take: the clients' request timeout
// (kafkaconf.DefaultTimeout, 10 s) and some slack for a loaded machine.
// It is a bound on behaviour (no 70 s waits, no endless retry), not a
// performance figure.
const bound = 15 * time.Second

// env is what a path gets: the case's client.properties (a Java client's
// file, as a user has it), its bootstrap servers, a topic and a group
// that do not exist, and a logger.
type env struct {
	props   string
	brokers string
	topic   string
	group   string
	log     *slog.Logger
}

func (e env) client(t *testing.T) *kafkaio.Client {
	c, err := kafkaio.NewClient(kafkaio.Properties(e.props), kafkaio.Logger(e.log))
	require.NoError(t, err)
	return c
}

type event struct{ V string }

// paths are the ways kord reaches for a cluster. missing: the class a
// missing topic or group fails with on this path, nil where the path does
// not fail on one (creating a topic).
var paths = []struct {
	name    string
	missing error
	plain   bool // the path takes bootstrap servers only (no security settings)
	run     func(t *testing.T, ctx context.Context, e env) error
}{
	{name: "admin create topic", run: func(t *testing.T, ctx context.Context, e env) error {
		a, err := admin.New(admin.Properties(e.props), admin.Logger(e.log))
		require.NoError(t, err)
		defer a.Close()
		_, err = a.CreateTopic(ctx, e.topic+".created", 1, nil)
		return err
	}},
	{name: "admin delete topics", missing: admin.ErrUnknownTopic, run: func(t *testing.T, ctx context.Context, e env) error {
		a, err := admin.New(admin.Properties(e.props), admin.Logger(e.log))
		require.NoError(t, err)
		defer a.Close()
		return a.DeleteTopics(ctx, e.topic)
	}},
	{name: "admin delete group", missing: admin.ErrUnknownGroup, run: func(t *testing.T, ctx context.Context, e env) error {
		a, err := admin.New(admin.Properties(e.props), admin.Logger(e.log))
		require.NoError(t, err)
		defer a.Close()
		return a.DeleteGroup(ctx, e.group)
	}},
	{name: "admin list offsets", missing: admin.ErrUnknownTopic, run: func(t *testing.T, ctx context.Context, e env) error {
		a, err := admin.New(admin.Properties(e.props), admin.Logger(e.log))
		require.NoError(t, err)
		defer a.Close()
		_, err = a.ListOffsets(ctx, e.topic)
		return err
	}},
	{name: "consumer partitions", missing: consumer.ErrUnknownTopic, run: func(t *testing.T, ctx context.Context, e env) error {
		src, err := consumer.New(consumer.Properties(e.props), consumer.Logger(e.log))
		require.NoError(t, err)
		defer src.Close()
		_, err = src.Partitions(ctx, e.topic)
		return err
	}},
	{name: "admin topic config", missing: admin.ErrUnknownTopic, run: func(t *testing.T, ctx context.Context, e env) error {
		a, err := admin.New(admin.Properties(e.props), admin.Logger(e.log))
		require.NoError(t, err)
		defer a.Close()
		_, err = a.TopicConfig(ctx, e.topic, "max.message.bytes")
		return err
	}},
	{name: "admin group offsets", run: func(t *testing.T, ctx context.Context, e env) error {
		a, err := admin.New(admin.Properties(e.props), admin.Logger(e.log))
		require.NoError(t, err)
		defer a.Close()
		_, err = a.GroupOffsets(ctx, e.group, []admin.TopicPartition{{Topic: e.topic, Partition: 0}})
		return err
	}},
	{name: "admin commit group offsets", run: func(t *testing.T, ctx context.Context, e env) error {
		a, err := admin.New(admin.Properties(e.props), admin.Logger(e.log))
		require.NoError(t, err)
		defer a.Close()
		return a.CommitGroupOffsets(ctx, e.group, []admin.Committed{{Topic: e.topic, Partition: 0, Offset: 0}})
	}},
	{name: "admin identity", missing: admin.ErrUnknownTopic, run: func(t *testing.T, ctx context.Context, e env) error {
		a, err := admin.New(admin.Properties(e.props), admin.Logger(e.log))
		require.NoError(t, err)
		defer a.Close()
		_, _, err = a.Identity(ctx, e.topic)
		return err
	}},
	{name: "producer", missing: producer.ErrUnknownTopic, run: func(t *testing.T, ctx context.Context, e env) error {
		p, err := producer.New(serde.String(), serde.String(), producer.Properties(e.props), producer.Logger(e.log))
		require.NoError(t, err)
		defer p.Close()
		_, err = p.ProduceSync(ctx, producer.Record[string, string]{Topic: e.topic, Key: "k", Value: "v"})
		return err
	}},
	{name: "producer init transactions", run: func(t *testing.T, ctx context.Context, e env) error {
		// The one call not sliced (DESIGN.md, "Errors"): bounded by its
		// context's deadline, here the clients' request timeout.
		p, err := producer.New(serde.String(), serde.String(), producer.Properties(e.props), producer.Logger(e.log),
			producer.TransactionalID(e.group))
		require.NoError(t, err)
		defer p.Close()
		ictx, cancel := context.WithTimeout(ctx, kafkaconf.DefaultTimeout)
		defer cancel()
		return p.InitTransactions(ictx)
	}},
	{name: "kafkaio source (job)", missing: consumer.ErrUnknownTopic, run: func(t *testing.T, ctx context.Context, e env) error {
		j := keyed.NewJob("connfail-source", keyed.Dir(t.TempDir()), keyed.Logger(e.log))
		src := kafkaio.NewSource(e.client(t), e.topic, serde.JSON[event](), kafkaio.Bounded())
		keyed.ToSink(keyed.ProcessValue(keyed.ByPartition(keyed.FromSource[event](j, "in", 1, src)), "id", 1, serde.Int64(),
			func(_ []byte, v event, _ *keyed.ValueState[int64], out *keyed.Collector[event]) error {
				out.Emit(v)
				return nil
			}), "out", connector.Sink[event](keyed.NewMemorySink[event]()))
		return j.Run(ctx)
	}},
	{name: "kafkaio sink (job)", missing: producer.ErrUnknownTopic, run: func(t *testing.T, ctx context.Context, e env) error {
		j := keyed.NewJob("connfail-sink", keyed.Dir(t.TempDir()), keyed.Logger(e.log))
		in := keyed.NewMemorySource[event]("in", 1, true)
		in.Append(0, []byte("k"), event{"v"})
		keyed.ToSink(keyed.ProcessValue(keyed.ByPartition(keyed.FromSource[event](j, "in", 1, in)), "id", 1, serde.Int64(),
			func(_ []byte, v event, _ *keyed.ValueState[int64], out *keyed.Collector[event]) error {
				out.Emit(v)
				return nil
			}), "out", connector.Sink[event](kafkaio.NewSink(e.client(t), e.topic, serde.JSON[event]())))
		return j.Run(ctx)
	}},
	{name: "kordtest read committed", missing: consumer.ErrUnknownTopic, run: func(t *testing.T, ctx context.Context, e env) error {
		_, err := kordtest.ReadCommitted(ctx, e.client(t), e.topic)
		return err
	}},
	{name: "kordtest create topic", plain: true, run: func(t *testing.T, ctx context.Context, e env) error {
		return kordtest.CreateTopic(ctx, strings.Split(e.brokers, ","), e.topic+".created", 1, nil)
	}},
}

// example builds examples/userbehavior once.
var example = sync.OnceValues(func() (string, error) {
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..", "..")
	dir, err := os.MkdirTemp("", "kord-connfail-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "userbehavior")
	cmd := exec.Command("go", "build", "-o", bin, "./examples/userbehavior")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", errors.New(string(out))
	}
	return bin, nil
})

// TestFailFast: every path, on every way a cluster can refuse or fail a
// client, fails within the bound with the class and the words that name
// the cause, and shows no secret in its error or its log (librdkafka's
// lines included, at debug level). The main example does the same in one
// line on stderr.
func TestFailFast(t *testing.T) {
	s := kafkatest.Secure(t)
	plain := kafkatest.Broker(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closed := l.Addr().String() // nothing listens there once closed
	l.Close()
	wrong := "wrong-" + s.Password
	scram := func(password string) string {
		return "bootstrap.servers=" + s.SASLSSL + "\nsecurity.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n" +
			`sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="` + s.User + `" password="` + password + "\";\n" +
			"ssl.truststore.location=" + s.TLS("ca.pem") + "\nssl.truststore.type=PEM\n"
	}
	tls := func(addr string) string {
		return "bootstrap.servers=" + addr + "\nsecurity.protocol=SSL\nssl.truststore.location=" + s.TLS("ca.pem") + "\nssl.truststore.type=PEM\n" +
			"ssl.keystore.location=" + s.TLS("client.pem") + "\nssl.keystore.type=PEM\n"
	}
	// Most paths wait out a timeout (10 s on an unreachable port), not
	// the CPU: every case and path runs at once, up to 16 paths at a
	// time, whatever go test's -parallel (t.Run may be called from
	// several goroutines; each returns before its parent does).
	var cases sync.WaitGroup
	defer cases.Wait()
	slots := make(chan struct{}, 16)
	for _, c := range []struct {
		name    string
		props   string
		brokers string
		class   error    // nil: the path's own missing class
		words   []string // the error names each
	}{
		{name: "SASL_SSL, wrong password", props: scram(wrong), brokers: s.SASLSSL, class: kafkaconf.ErrAuth,
			words: []string{"Authentication failed", "SCRAM-SHA-512", `user "` + s.User + `"`, s.SASLSSL}},
		{name: "mTLS, expired server certificate", props: tls(s.SSLExpired), brokers: s.SSLExpired, class: kafkaconf.ErrAuth,
			words: []string{"SSL handshake failed", `"CN=kord test broker (expired)"`, "certificate has expired", "2020", s.SSLExpired}},
		{name: "mTLS, wrong host", props: tls(s.SSLBadHost), brokers: s.SSLBadHost, class: kafkaconf.ErrAuth,
			words: []string{"SSL handshake failed", `"CN=wrong.invalid"`, "cannot validate certificate for 127.0.0.1", s.SSLBadHost}},
		{name: "unreachable port", props: "bootstrap.servers=" + closed + "\n", brokers: closed, class: kafkaconf.ErrUnreachable,
			words: []string{"cannot reach the cluster at " + closed, "connection refused"}},
		{name: "missing topic", props: "bootstrap.servers=" + plain.Brokers + "\n", brokers: plain.Brokers},
	} {
		cases.Add(1)
		go t.Run(c.name, func(t *testing.T) {
			defer cases.Done()
			var leaves sync.WaitGroup
			defer leaves.Wait() // before the case returns: t.Run's rule
			leaf := func(name string, f func(t *testing.T)) {
				leaves.Add(1)
				go func() {
					defer leaves.Done()
					slots <- struct{}{}
					defer func() { <-slots }()
					t.Run(name, f)
				}()
			}
			props := filepath.Join(t.TempDir(), "client.properties")
			require.NoError(t, os.WriteFile(props, []byte(c.props), 0o600))
			for _, p := range paths {
				class := c.class
				if class == nil {
					class = p.missing
				}
				if class == nil || (p.plain && c.class != kafkaconf.ErrUnreachable && c.class != nil) {
					continue // the path does not meet this failure
				}
				leaf(p.name, func(t *testing.T) {
					var logs syncbuf.Buffer
					e := env{props: props, brokers: c.brokers, topic: kafkatest.TopicName(t), group: "kord.connfail." + kafkatest.TopicName(t),
						log: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))}
					ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
					defer cancel()
					start := time.Now()
					err := p.run(t, ctx, e)
					took := time.Since(start)
					require.Error(t, err)
					t.Logf("after %v: %v", took.Round(time.Millisecond), err)
					require.Less(t, took, bound)
					require.ErrorIs(t, err, class)
					words := c.words
					if c.class == nil {
						words = []string{e.topic}
						if class == admin.ErrUnknownGroup {
							words = []string{e.group}
						}
					}
					for _, w := range words {
						require.ErrorContains(t, err, w)
					}
					require.Empty(t, secretsIn(s, err.Error(), wrong), "the error shows a secret")
					require.Empty(t, secretsIn(s, logs.String(), wrong), "the log shows a secret")
				})
			}
			if c.class == nil {
				return // the example creates its topics
			}
			leaf("example userbehavior", func(t *testing.T) {
				bin, err := example()
				require.NoError(t, err)
				var stdout, stderr bytes.Buffer
				cmd := exec.Command(bin, "-properties", props, "-events", "10", "-users", "2")
				cmd.Stdout, cmd.Stderr = &stdout, &stderr
				start := time.Now()
				err = cmd.Run()
				took := time.Since(start)
				t.Logf("after %v, stderr:\n%s", took.Round(time.Millisecond), stderr.String())
				var exit *exec.ExitError
				require.ErrorAs(t, err, &exit)
				require.Equal(t, 1, exit.ExitCode())
				require.Less(t, took, bound)
				lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
				require.LessOrEqual(t, len(lines), 2, "the error, and a summary of the clients' log")
				require.True(t, strings.HasPrefix(lines[0], "userbehavior: admin: "), lines[0])
				require.Contains(t, lines[0], c.class.Error())
				for _, w := range c.words {
					require.Contains(t, lines[0], w)
				}
				require.Empty(t, secretsIn(s, stdout.String()+stderr.String(), wrong), "the output shows a secret")
			})
		})
	}
}

// secretsIn returns the secrets of s (and extra) that text shows.
func secretsIn(s *kafkatest.Secured, text string, extra ...string) []string {
	var found []string
	for _, sec := range append(s.Secrets(), extra...) {
		if sec != "" && strings.Contains(text, sec) {
			found = append(found, sec)
		}
	}
	return found
}
