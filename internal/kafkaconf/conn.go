package kafkaconf

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// ErrAuth is a client the cluster will not let in: its credentials were
// refused, or the TLS handshake failed (an untrusted or expired
// certificate, a host name the certificate does not name). Waiting does
// not cure it, so kord's clients fail with it at once, as Java's clients
// do with an AuthenticationException.
var ErrAuth = errors.New("the cluster refused the client (authentication or TLS handshake failed)")

// Conn follows one client's connection to the cluster: it sorts the
// client-level errors librdkafka reports into ErrAuth and the passing
// kind, keeps the last one, and explains a failure that would otherwise
// say only "timed out". Safe for concurrent use.
type Conn struct {
	settings map[string]string

	connected atomic.Bool // cheap: Served is called on every record

	mu      sync.Mutex
	failed  error
	refused chan struct{} // closed when failed is set
	last    string
	diag    *string
}

// NewConn follows a client of these librdkafka settings.
func NewConn(settings map[string]string) *Conn {
	return &Conn{settings: settings, refused: make(chan struct{})}
}

// Served records that the cluster answered the client.
func (c *Conn) Served() {
	if !c.connected.Load() {
		c.connected.Store(true)
	}
}

// Failed returns the client's ErrAuth, once it has one.
func (c *Conn) Failed() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.failed
}

// Event takes in a client-level error and returns the client's ErrAuth
// when it is one: the credentials were refused, or, while the client has
// never been served, the TLS handshake failed (once it has, a failed
// handshake may be a broker going down mid-handshake, which passes). A
// certificate librdkafka could not verify is checked again with Go's TLS
// to name why (expired, another host, an unknown authority), which
// librdkafka's message does not say.
func (c *Conn) Event(e kafka.Error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.failed != nil {
		return c.failed
	}
	refused := false
	switch e.Code() {
	case kafka.ErrAuthentication, kafka.ErrSaslAuthenticationFailed, kafka.ErrUnsupportedSaslMechanism, kafka.ErrIllegalSaslState:
		refused = true
	case kafka.ErrSsl:
		refused = !c.connected.Load()
	}
	if !refused {
		if e.Code() != kafka.ErrAllBrokersDown || c.last == "" {
			c.last = e.Error()
		}
		return nil
	}
	c.failed = fmt.Errorf("%w: %w (%s)", ErrAuth, e, c.who())
	if strings.Contains(e.Error(), "certificate verify failed") {
		if why := verifyTLS(c.settings, brokerOf(e.Error())); why != "" {
			c.failed = fmt.Errorf("%w: %w (%s; kord checked the broker's certificate: %s)", ErrAuth, e, c.who(), why)
		}
	}
	close(c.refused)
	return c.failed
}

// Log takes in a librdkafka log line: a broker connection's failure
// (tag FAIL) is the most precise last error there is.
func (c *Conn) Log(tag, msg string) {
	if tag != "FAIL" {
		return
	}
	if i := strings.Index(msg, "]: "); i >= 0 && strings.HasPrefix(msg, "[thrd:") {
		msg = msg[i+3:]
	}
	c.mu.Lock()
	c.last = msg
	c.mu.Unlock()
}

// Explain adds to err the client's last error from the cluster and, while
// the client has never been served, what a look at the first bootstrap
// server finds (a TLS listener reached without TLS, a certificate that
// does not verify).
func (c *Conn) Explain(err error) error {
	if err == nil {
		return nil
	}
	c.mu.Lock()
	last, connected := c.last, c.connected.Load()
	c.mu.Unlock()
	var notes []string
	if last != "" {
		notes = append(notes, "the client's last error from the cluster: "+last)
	}
	if !connected && symptom(c.settings, last) {
		if d := c.diagnose(); d != "" {
			notes = append(notes, d)
		}
	}
	if len(notes) == 0 {
		return err
	}
	return fmt.Errorf("%w (%s)", err, strings.Join(notes, "; "))
}

// symptom reports whether the last error looks like a security mismatch
// worth a look at the broker: a plaintext client disconnected while it
// asked for the broker's API versions (what a TLS listener does to it), or
// a TLS client whose handshake failed. A look is never taken otherwise: it
// sends a TLS handshake, which a plaintext listener (or a proxy before
// one) reads as the size of a request of some 370 MB.
func symptom(settings map[string]string, last string) bool {
	switch strings.ToLower(settings["security.protocol"]) {
	case "", "plaintext", "sasl_plaintext":
		return strings.Contains(last, "APIVERSION_QUERY")
	}
	return strings.Contains(last, "SSL")
}

// diagnose looks at the first bootstrap server once.
func (c *Conn) diagnose() string {
	c.mu.Lock()
	if c.diag != nil {
		defer c.mu.Unlock()
		return *c.diag
	}
	c.mu.Unlock()
	addr, _, _ := strings.Cut(c.settings["bootstrap.servers"], ",")
	addr = strings.TrimSpace(addr)
	d := ""
	switch proto := strings.ToLower(c.settings["security.protocol"]); proto {
	case "", "plaintext", "sasl_plaintext":
		if addr != "" && speaksTLS(addr) {
			if proto == "" {
				proto = "plaintext"
			}
			d = fmt.Sprintf("the listener at %s speaks TLS, but security.protocol is %s: set security.protocol to SSL or SASL_SSL", addr, proto)
		}
	default:
		if why := verifyTLS(c.settings, addr); why != "" {
			d = "kord checked the broker's certificate: " + why
		}
	}
	c.mu.Lock()
	c.diag = &d
	c.mu.Unlock()
	return d
}

var brokerRe = regexp.MustCompile(`^(?:[a-z_]+://)?([^/\s]+:\d+)/`)

// brokerOf returns the host:port a librdkafka broker error names.
func brokerOf(msg string) string {
	if m := brokerRe.FindStringSubmatch(msg); m != nil {
		return m[1]
	}
	return ""
}

const probeTimeout = 2 * time.Second

// speaksTLS reports whether addr completes a TLS handshake (certificates
// unchecked: only the protocol is in question).
func speaksTLS(addr string) bool {
	d := &net.Dialer{Timeout: probeTimeout}
	conn, err := tls.DialWithDialer(d, "tcp", addr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // a protocol probe, no data is sent
	if err != nil {
		return false
	}
	conn.Close()
	return true
}

// verifyTLS checks addr's certificate with Go's TLS against the CA the
// settings name (ssl.ca.pem, ssl.ca.location, else the system's) and, as
// librdkafka does unless ssl.endpoint.identification.algorithm is none,
// the host name. It returns why verification fails, or "".
func verifyTLS(settings map[string]string, addr string) string {
	if addr == "" {
		return ""
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return ""
	}
	roots, err := caPool(settings)
	if err != nil {
		return ""
	}
	var why string
	cfg := &tls.Config{
		InsecureSkipVerify: true, //nolint:gosec // verified below, to keep the reason
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			certs := make([]*x509.Certificate, 0, len(raw))
			for _, r := range raw {
				c, err := x509.ParseCertificate(r)
				if err != nil {
					why = err.Error()
					return err
				}
				certs = append(certs, c)
			}
			if len(certs) == 0 {
				why = "the broker sent no certificate"
				return errors.New(why)
			}
			opts := x509.VerifyOptions{Roots: roots, Intermediates: x509.NewCertPool()}
			for _, c := range certs[1:] {
				opts.Intermediates.AddCert(c)
			}
			if !strings.EqualFold(settings["ssl.endpoint.identification.algorithm"], "none") {
				opts.DNSName = host
			}
			if _, err := certs[0].Verify(opts); err != nil {
				why = fmt.Sprintf("the certificate of %q, issued by %q: %v", certs[0].Subject, certs[0].Issuer, err)
				return err
			}
			return nil
		},
	}
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: probeTimeout}, "tcp", addr, cfg)
	if err == nil {
		conn.Close()
	}
	return why
}

// caPool is the CA librdkafka verifies brokers with.
func caPool(settings map[string]string) (*x509.CertPool, error) {
	if p := settings["ssl.ca.pem"]; p != "" {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM([]byte(p)) {
			return nil, errors.New("no certificate in ssl.ca.pem")
		}
		return pool, nil
	}
	loc := settings["ssl.ca.location"]
	if loc == "" || loc == "probe" {
		return x509.SystemCertPool()
	}
	files := []string{loc}
	if fi, err := os.Stat(loc); err == nil && fi.IsDir() {
		files, _ = filepath.Glob(filepath.Join(loc, "*"))
	}
	pool := x509.NewCertPool()
	for _, f := range files {
		if b, err := os.ReadFile(f); err == nil {
			pool.AppendCertsFromPEM(b)
		}
	}
	return pool, nil
}

// fileSettings are librdkafka settings that name a file librdkafka reads
// when the client is created; its own error then names neither the file
// nor why ("ssl.ca.location failed: ... system lib").
var fileSettings = []string{"ssl.ca.location", "ssl.key.location", "ssl.certificate.location", "ssl.keystore.location", "ssl.crl.location", "sasl.kerberos.keytab"}

// Check checks settings before a client is made of them: each file they
// name can be read, and the linked librdkafka has the features they ask
// for (CheckFeatures).
func Check(settings map[string]string) error {
	for _, k := range fileSettings {
		v := settings[k]
		if v == "" || (k == "ssl.ca.location" && v == "probe") {
			continue
		}
		f, err := os.Open(v)
		if err != nil {
			return fmt.Errorf("%s: %w", k, err)
		}
		f.Close()
	}
	return CheckFeatures(settings)
}

// secretWords mark a setting's name as holding a secret.
var secretWords = []string{"password", "secret", "sasl.oauthbearer.config", "ssl.key.pem", "ssl_key", "sasl.jaas.config",
	"ssl.keystore.key", "token", "credential", "private.key"}

// Secret reports whether the setting of this name (librdkafka's or Java's)
// holds a secret, whose value never appears in a log line or an error.
func Secret(name string) bool {
	k := strings.ToLower(name)
	for _, s := range secretWords {
		if strings.Contains(k, s) {
			return true
		}
	}
	return false
}

// Redacted lists settings as name=value, sorted, secrets replaced by
// [redacted]: for logs.
func Redacted(s map[string]string) []string {
	out := make([]string, 0, len(s))
	for k, v := range s {
		if Secret(k) {
			v = "[redacted]"
		}
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

// aliases are librdkafka's second names (CONFIGURATION.md, "Alias for")
// that kord's own settings meet: Properties writes the first name, a user
// may Set the second.
var aliases = map[string]string{"sasl.mechanism": "sasl.mechanisms"}

// FoldAliases moves a setting given under an alias to librdkafka's own
// name, in place: librdkafka applies whichever of two names it is handed
// last, and a Go map has no order. Two names with different values are
// refused, naming both.
func FoldAliases(settings map[string]string) error {
	for alias, name := range aliases {
		v, ok := settings[alias]
		if !ok {
			continue
		}
		if w, both := settings[name]; both && w != v {
			return fmt.Errorf("%s=%s and %s=%s set one librdkafka setting to different values", alias, v, name, w)
		}
		settings[name] = v
		delete(settings, alias)
	}
	return nil
}

// CheckBeyond checks, as Check does, the settings that are not already in
// checked with the same value: those a client adds to a cluster's checked
// configuration (cluster.Config).
func CheckBeyond(settings, checked map[string]string) error {
	own := map[string]string{}
	for k, v := range settings {
		if cv, ok := checked[k]; !ok || cv != v {
			own[k] = v
		}
	}
	return Check(own)
}

// Adopt adds a cluster's checked settings (cluster.Config) to a client's
// own, where the client has none of its own, and returns them, for
// CheckBeyond: the merge every client's Cluster option does.
func Adopt(own, checked map[string]string) map[string]string {
	for k, v := range checked {
		if _, set := own[k]; !set {
			own[k] = v
		}
	}
	return checked
}
