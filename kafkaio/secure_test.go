package kafkaio_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kordproject/kord/consumer"
	"github.com/kordproject/kord/internal/rig/kafkatest"
	"github.com/kordproject/kord/internal/rig/syncbuf"
	"github.com/kordproject/kord/kafkaio"
	"github.com/kordproject/kord/keyed"
	"github.com/kordproject/kord/keyed/connector"
	"github.com/kordproject/kord/producer"
	"github.com/kordproject/kord/serde"
)

// secretsIn returns the secrets of s (and the client's private key) that
// text shows.
func secretsIn(t *testing.T, s *kafkatest.Secured, text string, extra ...string) []string {
	t.Helper()
	secrets := append(s.Secrets(), extra...)
	key, err := os.ReadFile(s.TLS("client-key.pem"))
	require.NoError(t, err)
	for _, line := range strings.Split(string(key), "\n") {
		if len(line) > 20 && !strings.HasPrefix(line, "-----") {
			secrets = append(secrets, line)
		}
	}
	var found []string
	for _, sec := range secrets {
		if sec != "" && strings.Contains(text, sec) {
			found = append(found, sec)
		}
	}
	return found
}

// TestSecuredFailures: each way a client can be refused by a secured
// cluster fails within a bounded time with an error that names the cause,
// in the producer, the consumer and a job (whose Kafka clients are the
// edge's): no hang, no endless retry. A refusal the cluster will repeat
// (credentials, certificates) is ErrAuth and stops a job for good. No
// secret shows in any log line (librdkafka's included, at debug level) or
// error.
func TestSecuredFailures(t *testing.T) {
	s := kafkatest.Secure(t)
	dir := t.TempDir()
	keytab := filepath.Join(dir, "client.keytab")
	require.NoError(t, os.WriteFile(keytab, []byte("a keytab kord never reads"), 0o600))
	scram := func(addr, user, password string) string {
		return "bootstrap.servers=" + addr + "\nsecurity.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n" +
			`sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="` + user + `" password="` + password + "\";\n" +
			"ssl.truststore.location=" + s.TLS("ca.pem") + "\nssl.truststore.type=PEM\n"
	}
	wrongPassword := "wrong-" + s.Password
	for _, c := range []struct {
		name  string
		props string            // a Java client.properties
		set   map[string]string // librdkafka settings after it
		want  []string          // the error names each
		auth  bool              // ErrAuth: refused for good
		bound time.Duration     // the most the failure may take
		early bool              // refused before any client exists
	}{
		{name: "wrong password", props: scram(s.SASLSSL, s.User, wrongPassword), auth: true, bound: 5 * time.Second,
			want: []string{"Authentication failed", "SCRAM-SHA-512"}},
		{name: "unknown user", props: scram(s.SASLSSL, "nobody", s.Password), auth: true, bound: 5 * time.Second,
			want: []string{"Authentication failed", "SCRAM-SHA-512"}},
		{name: "untrusted server certificate", props: strings.Replace(scram(s.SASLSSL, s.User, s.Password), s.TLS("ca.pem"), s.TLS("other-ca.pem"), 1),
			auth: true, bound: 5 * time.Second, want: []string{"SSL handshake failed", "certificate signed by unknown authority"}},
		{name: "expired server certificate", props: "bootstrap.servers=" + s.SSLExpired + "\nsecurity.protocol=SSL\nssl.truststore.location=" + s.TLS("ca.pem") + "\nssl.truststore.type=PEM\n",
			auth: true, bound: 5 * time.Second, want: []string{"SSL handshake failed", "certificate has expired", "2020"}},
		{name: "hostname mismatch", props: "bootstrap.servers=" + s.SSLBadHost + "\nsecurity.protocol=SSL\nssl.truststore.location=" + s.TLS("ca.pem") + "\nssl.truststore.type=PEM\n",
			auth: true, bound: 5 * time.Second, want: []string{"SSL handshake failed", "cannot validate certificate for 127.0.0.1"}},
		{name: "missing CA file", props: strings.Replace(scram(s.SASLSSL, s.User, s.Password), s.TLS("ca.pem"), filepath.Join(dir, "no-such-ca.pem"), 1),
			early: true, bound: time.Second, want: []string{"ssl.truststore.location", "no-such-ca.pem", "no such file"}},
		{name: "missing CA file, librdkafka setting", props: scram(s.SASLSSL, s.User, s.Password), set: map[string]string{"ssl.ca.location": filepath.Join(dir, "no-such-ca.pem")},
			early: true, bound: time.Second, want: []string{"ssl.ca.location", "no-such-ca.pem"}},
		{name: "mechanism not enabled", props: strings.NewReplacer("SCRAM-SHA-512", "PLAIN", "scram.ScramLoginModule", "plain.PlainLoginModule").Replace(scram(s.SASLSSL, s.User, s.Password)),
			auth: true, bound: 5 * time.Second, want: []string{"PLAIN", "SCRAM-SHA-512"}},
		{name: "PLAINTEXT to an SSL port", props: "bootstrap.servers=" + s.SSL + "\n", bound: 20 * time.Second,
			want: []string{"speaks TLS, but security.protocol is plaintext: set security.protocol to SSL or SASL_SSL"}},
		{name: "GSSAPI without Kerberos in librdkafka", early: true, bound: time.Second, want: []string{"GSSAPI", "-tags dynamic", "builtin.features"},
			props: "bootstrap.servers=" + s.SASLPlaintext + "\nsecurity.protocol=SASL_PLAINTEXT\nsasl.mechanism=GSSAPI\nsasl.kerberos.service.name=kafka\n" +
				`sasl.jaas.config=com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true keyTab="` + keytab + `" principal="kord@EXAMPLE.COM";` + "\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "client.properties")
			require.NoError(t, os.WriteFile(path, []byte(c.props), 0o600))
			var logs syncbuf.Buffer
			log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
			check := func(who string, err error, took time.Duration) {
				t.Helper()
				require.Error(t, err, who)
				t.Logf("%s, after %v: %v", who, took.Round(time.Millisecond), err)
				require.Less(t, took, c.bound, "%s: %v", who, err)
				for _, w := range c.want {
					require.ErrorContains(t, err, w, who)
				}
				if c.auth {
					require.ErrorIs(t, err, producer.ErrAuth, who)
				}
				require.Empty(t, secretsIn(t, s, err.Error(), wrongPassword), "%s: the error shows a secret", who)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()

			t.Run("producer", func(t *testing.T) {
				opts := []producer.Opt{producer.Properties(path), producer.Logger(log)}
				for k, v := range c.set {
					opts = append(opts, producer.Set(k, v))
				}
				start := time.Now()
				p, err := producer.New(serde.String(), serde.String(), opts...)
				if err == nil {
					defer p.Close()
					require.False(t, c.early, "New accepted it")
					_, err = p.ProduceSync(ctx, producer.Record[string, string]{Topic: "kord.secured", Key: "k", Value: "v"})
				}
				check("producer", err, time.Since(start))
			})
			t.Run("consumer", func(t *testing.T) {
				opts := []consumer.Opt{consumer.Properties(path), consumer.Logger(log)}
				for k, v := range c.set {
					opts = append(opts, consumer.Set(k, v))
				}
				start := time.Now()
				src, err := consumer.New(opts...)
				if err == nil {
					defer src.Close()
					require.False(t, c.early, "New accepted it")
					_, err = src.Partitions(ctx, "kord.secured")
				}
				check("consumer", err, time.Since(start))
			})
			t.Run("job", func(t *testing.T) {
				opts := []kafkaio.Opt{kafkaio.Properties(path), kafkaio.Logger(log)}
				for k, v := range c.set {
					opts = append(opts, kafkaio.Set(k, v))
				}
				start := time.Now()
				client, err := kafkaio.NewClient(opts...)
				if err == nil {
					// A restart strategy: an ErrAuth must stop the job
					// at once all the same.
					jopts := []keyed.Opt{keyed.Dir(t.TempDir()), keyed.Logger(log)}
					if c.auth {
						jopts = append(jopts, keyed.RestartStrategy(keyed.FixedDelay(3, time.Second)))
					}
					j := keyed.NewJob("secured", jopts...)
					src := kafkaio.NewSource(client, "kord.secured", serde.JSON[event]())
					out := keyed.ProcessValue(keyed.ByPartition(keyed.FromSource[event](j, "in", 1, src)), "count", 1, serde.Int64(),
						func(_ []byte, e event, _ *keyed.ValueState[int64], out *keyed.Collector[event]) error {
							out.Emit(e)
							return nil
						})
					keyed.ToSink(out, "out", connector.Sink[event](kafkaio.NewSink(client, "kord.secured.out", serde.JSON[event]())))
					err = j.Run(ctx)
					if c.auth {
						require.ErrorIs(t, err, keyed.ErrPermanent)
					}
				} else {
					require.True(t, c.early, "NewClient refused it: %v", err)
				}
				check("job", err, time.Since(start))
			})
			if found := secretsIn(t, s, logs.String(), wrongPassword); len(found) > 0 {
				t.Fatalf("the log shows %d secrets", len(found))
			}
			if c.auth {
				require.NotEmpty(t, logs.String(), "nothing was logged: the secret check saw nothing")
			}
		})
	}
}

// TestSecuredProduceConsume: records go through the producer and come
// back through the consumer over mTLS, with the client's certificate and
// key in each form a Java user has them (PKCS12, JKS, a PEM file, an
// encrypted PEM key), and over SASL_PLAINTEXT with SCRAM, each from a Java
// client.properties.
func TestSecuredProduceConsume(t *testing.T) {
	s := kafkatest.Secure(t)
	c := kafkatest.Broker(t)
	mtls := "bootstrap.servers=" + s.SSL + "\nsecurity.protocol=SSL\n"
	for _, tc := range []struct{ name, props string }{
		{"mTLS, PKCS12 stores (the script's file)", ""},
		{"mTLS, JKS stores", mtls + "ssl.truststore.location=" + s.TLS("truststore.jks") + "\nssl.truststore.password=" + s.StorePassword + "\n" +
			"ssl.keystore.location=" + s.TLS("keystore.jks") + "\nssl.keystore.password=" + s.StorePassword + "\nssl.key.password=" + s.KeyPassword + "\n"},
		{"mTLS, PEM files", mtls + "ssl.truststore.type=PEM\nssl.truststore.location=" + s.TLS("ca.pem") + "\n" +
			"ssl.keystore.type=PEM\nssl.keystore.location=" + s.TLS("client.pem") + "\n"},
		{"mTLS, encrypted PEM key", mtls + "ssl.truststore.type=PEM\nssl.truststore.location=" + s.TLS("ca.pem") + "\n" +
			"ssl.keystore.type=PEM\nssl.keystore.location=" + s.TLS("client-enc.pem") + "\nssl.key.password=" + s.KeyPassword + "\n"},
		{"SASL_PLAINTEXT, SCRAM (the script's file)", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := s.Properties("ssl")
			if strings.HasPrefix(tc.name, "SASL_PLAINTEXT") {
				path = s.Properties("sasl_plaintext")
			}
			if tc.props != "" {
				path = filepath.Join(t.TempDir(), "client.properties")
				require.NoError(t, os.WriteFile(path, []byte(tc.props), 0o600))
			}
			topic := c.CreateTopic(t, 3, nil)
			var logs syncbuf.Buffer
			log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			p, err := producer.New(serde.String(), serde.String(), producer.Properties(path), producer.Logger(log))
			require.NoError(t, err)
			const n = 200
			for i := 0; i < n; i++ {
				require.NoError(t, p.Produce(ctx, producer.Record[string, string]{Topic: topic, Key: strconv.Itoa(i % 7), Value: strconv.Itoa(i)}, nil))
			}
			require.NoError(t, p.Flush(ctx))
			require.NoError(t, p.Close())

			src, err := consumer.New(consumer.Properties(path), consumer.Logger(log))
			require.NoError(t, err)
			defer src.Close()
			start, err := src.Resolve(ctx, topic, consumer.Earliest)
			require.NoError(t, err)
			require.NoError(t, src.Assign(ctx, start))
			seen := map[string]bool{}
			for len(seen) < n {
				recs, err := src.Poll(ctx, 1000, 200*time.Millisecond)
				require.NoError(t, err)
				for _, r := range recs {
					seen[string(r.Value)] = true
				}
			}
			require.Len(t, seen, n)
			require.Empty(t, secretsIn(t, s, logs.String()), "the log shows a secret")
		})
	}
}
