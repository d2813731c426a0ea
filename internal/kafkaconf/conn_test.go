package kafkaconf

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// tlsListener serves TLS handshakes with a certificate for names, valid
// from notBefore to notAfter, signed by a fresh CA whose PEM it returns.
func tlsListener(t *testing.T, names []string, ips []net.IP, notBefore, notAfter time.Time) (addr, caPEM string) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	caT := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "CA"}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caT, caT, &caKey.PublicKey, caKey)
	require.NoError(t, err)
	ca, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	der, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{SerialNumber: big.NewInt(2), DNSNames: names, IPAddresses: ips,
		NotBefore: notBefore, NotAfter: notAfter, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}, ca, &key.PublicKey, caKey)
	require.NoError(t, err)
	l, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { _ = c.(*tls.Conn).Handshake(); c.Close() }()
		}
	}()
	return l.Addr().String(), string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}))
}

func TestConnDiagnosis(t *testing.T) {
	local := []net.IP{net.ParseIP("127.0.0.1")}
	good, goodCA := tlsListener(t, []string{"localhost"}, local, time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	expired, expiredCA := tlsListener(t, nil, local, time.Now().Add(-48*time.Hour), time.Now().Add(-24*time.Hour))
	wrongHost, wrongCA := tlsListener(t, []string{"wrong.invalid"}, nil, time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	plain, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer plain.Close()
	go func() {
		for {
			c, err := plain.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	timeout := errors.New("timed out")
	for _, c := range []struct {
		name     string
		settings map[string]string
		want     string
	}{
		{"plaintext to a TLS listener", map[string]string{"bootstrap.servers": good}, "the listener at " + good + " speaks TLS, but security.protocol is plaintext"},
		{"SASL_PLAINTEXT to a TLS listener", map[string]string{"bootstrap.servers": good, "security.protocol": "sasl_plaintext"}, "security.protocol is sasl_plaintext"},
		{"plaintext to a plaintext listener", map[string]string{"bootstrap.servers": plain.Addr().String()}, ""},
		{"a certificate that verifies", map[string]string{"bootstrap.servers": good, "security.protocol": "ssl", "ssl.ca.pem": goodCA}, ""},
		{"an unknown authority", map[string]string{"bootstrap.servers": good, "security.protocol": "ssl", "ssl.ca.pem": wrongCA}, "certificate signed by unknown authority"},
		{"an expired certificate", map[string]string{"bootstrap.servers": expired, "security.protocol": "sasl_ssl", "ssl.ca.pem": expiredCA}, "certificate has expired"},
		{"another host", map[string]string{"bootstrap.servers": wrongHost, "security.protocol": "ssl", "ssl.ca.pem": wrongCA}, "cannot validate certificate for 127.0.0.1"},
		{"another host, hostname check off", map[string]string{"bootstrap.servers": wrongHost, "security.protocol": "ssl", "ssl.ca.pem": wrongCA,
			"ssl.endpoint.identification.algorithm": "none"}, ""},
	} {
		conn := NewConn(c.settings)
		require.Equal(t, timeout, conn.Explain(timeout), "%s: no symptom, no look", c.name)
		// What librdkafka logs when a TLS listener drops a plaintext
		// client, or a handshake fails.
		conn.Log("FAIL", "[thrd:x]: 127.0.0.1:1/bootstrap: Disconnected (after 1ms in state APIVERSION_QUERY)")
		if c.settings["security.protocol"] == "ssl" || c.settings["security.protocol"] == "sasl_ssl" {
			conn.Log("FAIL", "[thrd:x]: ssl://127.0.0.1:1/bootstrap: SSL handshake failed (after 1ms in state SSL_HANDSHAKE)")
		}
		err := conn.Explain(timeout)
		require.ErrorIs(t, err, timeout)
		if c.want == "" {
			require.NotContains(t, err.Error(), "kord checked", c.name)
			require.NotContains(t, err.Error(), "speaks TLS", c.name)
		} else {
			require.ErrorContains(t, err, c.want, c.name)
		}
		// Once served, the look is not taken: the cluster was reachable.
		served := NewConn(c.settings)
		served.Served()
		require.Equal(t, timeout, served.Explain(timeout), c.name)
	}
}

func TestFoldAliases(t *testing.T) {
	s := map[string]string{"sasl.mechanism": "PLAIN", "x": "y"}
	require.NoError(t, FoldAliases(s))
	require.Equal(t, map[string]string{"sasl.mechanisms": "PLAIN", "x": "y"}, s)
	s = map[string]string{"sasl.mechanism": "PLAIN", "sasl.mechanisms": "PLAIN"}
	require.NoError(t, FoldAliases(s))
	require.Equal(t, map[string]string{"sasl.mechanisms": "PLAIN"}, s)
	require.EqualError(t, FoldAliases(map[string]string{"sasl.mechanism": "PLAIN", "sasl.mechanisms": "SCRAM-SHA-512"}),
		"sasl.mechanism=PLAIN and sasl.mechanisms=SCRAM-SHA-512 set one librdkafka setting to different values")
}

func TestConnLastError(t *testing.T) {
	c := NewConn(map[string]string{})
	require.Equal(t, "127.0.0.1:9093", brokerOf("sasl_ssl://127.0.0.1:9093/bootstrap: SSL handshake failed"))
	require.Equal(t, "127.0.0.1:9093", brokerOf("127.0.0.1:9093/1: Disconnected"))
	c.Log("CONNECT", "[thrd:x]: connecting")
	c.Log("FAIL", "[thrd:127.0.0.1:9092/bootstrap]: 127.0.0.1:9092/bootstrap: Disconnected while requesting ApiVersion")
	c.Served()
	require.EqualError(t, c.Explain(errors.New("timed out")),
		"timed out (the client's last error from the cluster: 127.0.0.1:9092/bootstrap: Disconnected while requesting ApiVersion)")
	require.NoError(t, c.Failed())
}
