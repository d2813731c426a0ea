package kafkatest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Secured is the real broker's secured listeners and what a client needs
// for them, as scripts/kafka.sh writes them at start (its state dir's file
// "security", the client-*.properties files, the tls directory).
type Secured struct {
	// Listener addresses, host:port.
	SASLSSL       string // SASL_SSL, SCRAM-SHA-512 (and -256)
	SSL           string // SSL with client certificates required (mTLS)
	SASLPlaintext string // SASL_PLAINTEXT, SCRAM
	SSLExpired    string // SSL whose server certificate has expired
	SSLBadHost    string // SSL whose server certificate names wrong.invalid only
	// The SCRAM user, and the secrets of this broker's start: its
	// password, the stores' password and the client key's password.
	User, Password, StorePassword, KeyPassword string
	// TLSDir holds ca.pem, other-ca.pem (trusted by nothing), the client's
	// client.pem, client-key.pem, client-cert.pem, client-enc.pem,
	// keystore.p12, keystore.jks, truststore.p12 and truststore.jks.
	TLSDir string
	dir    string
}

// Properties returns the path of the Java client.properties the script
// wrote for listener: "sasl_ssl", "ssl" or "sasl_plaintext".
func (s *Secured) Properties(listener string) string {
	return filepath.Join(s.dir, "client-"+listener+".properties")
}

// TLS returns the path of a file in TLSDir.
func (s *Secured) TLS(name string) string { return filepath.Join(s.TLSDir, name) }

// Secrets are the values no log line or error may show.
func (s *Secured) Secrets() []string { return []string{s.Password, s.StorePassword, s.KeyPassword} }

// Secure returns the real broker's secured listeners. Without them the
// test is skipped, or fails when KORD_REQUIRE_KAFKA=1, as with Broker.
func Secure(t testing.TB) *Secured {
	t.Helper()
	s, why := secured()
	if why != "" {
		if os.Getenv(EnvRequire) == "1" {
			t.Fatalf("%s=1 but the real broker's secured listeners are unknown: %s", EnvRequire, why)
		}
		t.Skipf("needs the real broker's secured listeners: %s", why)
	}
	return s
}

func secured() (*Secured, string) {
	if os.Getenv(EnvBrokers) == "" {
		return nil, fmt.Sprintf("%s is not set", EnvBrokers)
	}
	dir := os.Getenv(EnvDir)
	if dir == "" {
		dir = defaultDir
	}
	b, err := os.ReadFile(filepath.Join(dir, "security"))
	if err != nil {
		return nil, fmt.Sprintf("run scripts/kafka.sh start with %s=%s (%v)", EnvDir, dir, err)
	}
	boot, _ := os.ReadFile(filepath.Join(dir, "bootstrap"))
	if got, want := strings.TrimSpace(string(boot)), os.Getenv(EnvBrokers); got != want {
		return nil, fmt.Sprintf("%s/security belongs to the broker at %q, but %s=%s: set %s to its state dir", dir, got, EnvBrokers, want, EnvDir)
	}
	kv := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), "="); ok {
			kv[k] = v
		}
	}
	s := &Secured{SASLSSL: kv["sasl_ssl"], SSL: kv["ssl"], SASLPlaintext: kv["sasl_plaintext"], SSLExpired: kv["ssl_expired"],
		SSLBadHost: kv["ssl_badhost"], User: kv["user"], Password: kv["password"], StorePassword: kv["store_password"],
		KeyPassword: kv["key_password"], TLSDir: kv["tls_dir"], dir: dir}
	for k, v := range map[string]string{"sasl_ssl": s.SASLSSL, "ssl": s.SSL, "sasl_plaintext": s.SASLPlaintext, "ssl_expired": s.SSLExpired,
		"ssl_badhost": s.SSLBadHost, "user": s.User, "password": s.Password, "store_password": s.StorePassword,
		"key_password": s.KeyPassword, "tls_dir": s.TLSDir} {
		if v == "" {
			return nil, fmt.Sprintf("%s/security has no %s", dir, k)
		}
	}
	return s, ""
}
