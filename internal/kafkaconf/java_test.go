package kafkaconf

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/pavlo-v-chernykh/keystore-go/v4"
	"github.com/stretchr/testify/require"
	"software.sslmate.com/src/go-pkcs12"
)

// Secrets every case below uses, so that an error that quotes one shows.
const (
	password = "sekret-password-7781"
	storePw  = "sekret-store-5512"
	keyPw    = "sekret-key-3390"
)

func fromJava(t *testing.T, text string) (map[string]string, error) {
	t.Helper()
	props, err := ParseProperties([]byte(text), "client.properties")
	require.NoError(t, err)
	out, err := FromJava(props, "client.properties")
	if err != nil {
		for _, s := range []string{password, storePw, keyPw, "BEGIN"} {
			require.NotContains(t, err.Error(), s, "an error quotes a secret")
		}
	}
	return out, err
}

func TestJavaSCRAMOverTLS(t *testing.T) {
	s := newStores(t)
	out, err := fromJava(t, `
bootstrap.servers=127.0.0.1:9093
security.protocol=SASL_SSL
sasl.mechanism=SCRAM-SHA-512
sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \
    username="kord" \
    password="`+password+`";
ssl.truststore.location=`+s.trustP12+`
ssl.truststore.password=`+storePw+`
ssl.truststore.type=PKCS12
ssl.endpoint.identification.algorithm=
client.id=my-app
fetch.max.wait.ms=50
ssl.enabled.protocols=TLSv1.3, TLSv1.2
auto.offset.reset=none
`)
	require.NoError(t, err)
	require.Equal(t, map[string]string{
		"bootstrap.servers": "127.0.0.1:9093", "security.protocol": "sasl_ssl", "sasl.mechanisms": "SCRAM-SHA-512",
		"sasl.username": "kord", "sasl.password": password, "ssl.ca.pem": s.caPEM,
		"ssl.endpoint.identification.algorithm": "none", "client.id": "my-app", "fetch.wait.max.ms": "50",
		"auto.offset.reset": "error",
	}, out)
}

func TestJavaTruststores(t *testing.T) {
	s := newStores(t)
	for _, c := range []struct{ name, props, key, want string }{
		{"pkcs12", "ssl.truststore.location=" + s.trustP12 + "\nssl.truststore.password=" + storePw + "\nssl.truststore.type=PKCS12", "ssl.ca.pem", s.caPEM},
		{"jks", "ssl.truststore.location=" + s.trustJKS + "\nssl.truststore.password=" + storePw, "ssl.ca.pem", s.caPEM},
		// keystore.type.compat: a store of type JKS (Java's default) that
		// is a PKCS12 file is read as one.
		{"pkcs12 named JKS", "ssl.truststore.location=" + s.trustP12 + "\nssl.truststore.password=" + storePw + "\nssl.truststore.type=JKS", "ssl.ca.pem", s.caPEM},
		{"pem file", "ssl.truststore.location=" + s.caFile + "\nssl.truststore.type=PEM", "ssl.ca.location", s.caFile},
		{"pem inline", "ssl.truststore.certificates=" + strings.ReplaceAll(s.caPEM, "\n", "\\n\\\n") + "\nssl.truststore.type=PEM", "ssl.ca.pem", s.caPEM},
	} {
		out, err := fromJava(t, "security.protocol=SSL\n"+c.props)
		require.NoError(t, err, c.name)
		require.Equal(t, c.want, out[c.key], c.name)
	}
}

func TestJavaKeystores(t *testing.T) {
	s := newStores(t)
	out, err := fromJava(t, "security.protocol=SSL\nssl.keystore.location="+s.keyP12+"\nssl.keystore.password="+storePw+"\nssl.keystore.type=PKCS12\nssl.key.password="+storePw)
	require.NoError(t, err)
	require.Equal(t, map[string]string{"security.protocol": "ssl", "ssl.keystore.location": s.keyP12, "ssl.keystore.password": storePw}, out)

	out, err = fromJava(t, "ssl.keystore.location="+s.keyJKS+"\nssl.keystore.password="+storePw+"\nssl.key.password="+keyPw)
	require.NoError(t, err)
	require.Equal(t, s.certPEM, out["ssl.certificate.pem"])
	blk, _ := pem.Decode([]byte(out["ssl.key.pem"]))
	require.NotNil(t, blk)
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	require.NoError(t, err)
	require.True(t, k.(*ecdsa.PrivateKey).Equal(s.key), "the JKS key, decrypted")

	out, err = fromJava(t, "ssl.keystore.location="+s.keyPEM+"\nssl.keystore.type=PEM\nssl.key.password="+keyPw)
	require.NoError(t, err)
	require.Equal(t, map[string]string{"ssl.key.location": s.keyPEM, "ssl.certificate.location": s.keyPEM, "ssl.key.password": keyPw}, out)
}

func TestJavaKerberos(t *testing.T) {
	keytab := filepath.Join(t.TempDir(), "client.keytab")
	require.NoError(t, os.WriteFile(keytab, []byte("not read by kord"), 0o600))
	out, err := fromJava(t, `security.protocol=SASL_SSL
sasl.mechanism=GSSAPI
sasl.kerberos.service.name=kafka
sasl.kerberos.kinit.cmd=/opt/krb5/bin/kinit
sasl.jaas.config=com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true storeKey=true \
  keyTab="`+keytab+`" principal="kord-client@EXAMPLE.COM" serviceName="kafka";`)
	require.NoError(t, err)
	require.Equal(t, map[string]string{
		"security.protocol": "sasl_ssl", "sasl.mechanisms": "GSSAPI", "sasl.kerberos.keytab": keytab,
		"sasl.kerberos.principal": "kord-client@EXAMPLE.COM", "sasl.kerberos.service.name": "kafka",
		"sasl.kerberos.kinit.cmd": `/opt/krb5/bin/kinit -R -t "%{sasl.kerberos.keytab}" -k %{sasl.kerberos.principal} || /opt/krb5/bin/kinit -t "%{sasl.kerberos.keytab}" -k %{sasl.kerberos.principal}`,
	}, out)

	// No sasl.mechanism: Java's default, GSSAPI. The ticket cache alone:
	// librdkafka must not run kinit.
	out, err = fromJava(t, `security.protocol=SASL_PLAINTEXT
sasl.jaas.config=com.sun.security.auth.module.Krb5LoginModule required useTicketCache=true serviceName="kafka";`)
	require.NoError(t, err)
	require.Equal(t, map[string]string{
		"security.protocol": "sasl_plaintext", "sasl.mechanisms": "GSSAPI",
		"sasl.kerberos.min.time.before.relogin": "0", "sasl.kerberos.service.name": "kafka",
	}, out)
}

func TestJavaRefused(t *testing.T) {
	s := newStores(t)
	jaas := func(mod, opts string) string { return "sasl.jaas.config=" + mod + " required " + opts + ";\n" }
	scram := "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
	for _, c := range []struct{ props, want string }{
		{"a=1\nvalue.serializer=org.apache.kafka.common.serialization.StringSerializer", "client.properties:2: value.serializer: no librdkafka equivalent: kord's producer takes a Go Serializer"},
		{"max.block.ms=1000", "max.block.ms: no librdkafka equivalent: kord's calls wait as long as their context allows"},
		{"ssl.protocol=TLSv1.2", "ssl.protocol: only Java's default (TLSv1.3) can be honoured"},
		{"ssl.cipher.suites=TLS_AES_128_GCM_SHA256", "OpenSSL cipher names"},
		{"no.such.thing=1", "client.properties:1: no.such.thing: no librdkafka equivalent (librdkafka has no setting no.such.thing)"},
		{"acks=most", "acks: librdkafka's acks: Invalid value"},
		{"security.protocol=TLS", "security.protocol: want PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL"},
		{"ssl.endpoint.identification.algorithm=ldaps", "want https or empty"},
		{"partition.assignment.strategy=org.apache.kafka.clients.consumer.StickyAssignor", "StickyAssignor has no librdkafka equivalent"},
		{"security.protocol=SASL_SSL\nsasl.mechanism=PLAIN", "SASL needs sasl.jaas.config"},
		{scram + jaas(scramModule, `username="kord" password="`+password+`" tokenauth="true"`), "option tokenauth has no librdkafka equivalent"},
		{scram + jaas(scramModule, `username="kord"`), "needs the option password"},
		{scram + jaas(plainModule, `username="kord" password="`+password+`"`), "PlainLoginModule does not fit sasl.mechanism SCRAM-SHA-512"},
		{"security.protocol=SASL_SSL\n" + jaas(scramModule, `username="kord" password="`+password+`"`), "does not fit sasl.mechanism GSSAPI (Java's default when unset is GSSAPI)"},
		{scram + jaas("com.ibm.security.auth.module.Krb5LoginModule", `x="1"`), "has no librdkafka equivalent"},
		{scram + "sasl.jaas.config=" + scramModule + ` required username="kord" password="` + password + `"`, "sasl.jaas.config: login module " + scramModule + ": missing ';'"},
		{"sasl.mechanism=GSSAPI\n" + jaas(krb5Module, `useKeyTab=true principal="p@R"`), "useKeyTab=true needs keyTab"},
		{"sasl.mechanism=GSSAPI\n" + jaas(krb5Module, `useKeyTab=true keyTab="/no/such.keytab" principal="p@R"`), "/no/such.keytab: no such file"},
		{"sasl.mechanism=GSSAPI\n" + jaas(krb5Module, `principal="p@R"`), "needs useKeyTab=true with keyTab, or useTicketCache=true"},
		{"sasl.mechanism=GSSAPI\nsasl.kerberos.service.name=kafka\n" + jaas(krb5Module, `useTicketCache=true serviceName="other"`), "sasl.kerberos.service.name: differs from the serviceName"},
		{"sasl.mechanism=OAUTHBEARER\n" + jaas(oauthModule, `unsecuredLoginStringClaim_sub="x"`), "kord maps Java's OIDC login"},
		{"ssl.truststore.location=/no/such/trust.p12\nssl.truststore.password=" + storePw, "client.properties:1: ssl.truststore.location: open /no/such/trust.p12: no such file or directory"},
		{"ssl.truststore.location=" + s.trustP12 + "\nssl.truststore.password=wrong-" + storePw, "reading " + s.trustP12 + " as a PKCS12 truststore"},
		{"ssl.truststore.location=" + s.trustJKS + "\nssl.truststore.password=wrong-" + storePw, "reading " + s.trustJKS + " as a JKS store"},
		{"ssl.truststore.location=" + s.trustP12, "needs ssl.truststore.password"},
		{"ssl.truststore.location=" + s.caFile + "\nssl.truststore.type=PEM\nssl.truststore.password=" + storePw, "a PEM truststore has no password"},
		{"ssl.truststore.location=" + s.caFile + "\nssl.truststore.password=" + storePw, "is neither a JKS nor a PKCS12 store (for PEM set ssl.truststore.type=PEM)"},
		{"ssl.truststore.location=" + s.trustP12 + "\nssl.truststore.password=" + storePw + "\nssl.truststore.type=BCFKS", "store type BCFKS"},
		{"ssl.keystore.location=" + s.keyJKS + "\nssl.keystore.password=" + storePw + "\nssl.key.password=wrong-" + keyPw, "the key of entry kord-client"},
		{"ssl.keystore.location=" + s.keyP12 + "\nssl.keystore.password=" + storePw + "\nssl.key.password=" + keyPw, "ssl.key.password: differs from ssl.keystore.password"},
		{"ssl.keystore.location=" + s.keyPEM + "\nssl.keystore.type=PEM\nssl.keystore.password=" + storePw, "a PEM keystore has no store password"},
		{"ssl.key.password=" + keyPw, "ssl.key.password: set without ssl.keystore.location"},
		{"sasl.kerberos.kinit.cmd=/usr/bin/kinit", "set without sasl.jaas.config"},
		{scram + jaas(scramModule, `username="kord" password="`+password+`"`) + "sasl.kerberos.kinit.cmd=/usr/bin/kinit", "sasl.kerberos.kinit.cmd: does not apply to the " + scramModule + " login"},
		{scram + jaas(scramModule, `username="kord" password="`+password+`"`) + "sasl.login.callback.handler.class=com.example.Handler", "sasl.login.callback.handler.class: does not apply"},
	} {
		_, err := fromJava(t, c.props)
		require.ErrorIs(t, err, ErrProperty, c.props)
		require.ErrorContains(t, err, c.want, c.props)
	}
}

// TestMinLibrdkafka keeps minLibrdkafka in step with the confluent-kafka-go
// in go.mod (its kafka/00version.go).
func TestMinLibrdkafka(t *testing.T) {
	dir, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/confluentinc/confluent-kafka-go/v2").Output()
	require.NoError(t, err)
	src, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(dir)), "kafka", "00version.go"))
	require.NoError(t, err)
	m := regexp.MustCompile(`requires librdkafka v(\d+\.\d+\.\d+) or later`).FindSubmatch(src)
	require.NotNil(t, m)
	require.Equal(t, string(m[1]), minLibrdkafka)
}

func TestCheckFeatures(t *testing.T) {
	have := Features()
	require.Contains(t, have, "ssl")
	require.Contains(t, have, "sasl_scram")
	gssapi := map[string]string{"security.protocol": "sasl_ssl", "sasl.mechanisms": "GSSAPI"}
	if strings.Contains(strings.Join(have, ","), "sasl_gssapi") {
		t.Log("this librdkafka has GSSAPI (built with -tags dynamic?)")
		require.NoError(t, CheckFeatures(gssapi))
	} else {
		err := CheckFeatures(gssapi)
		require.ErrorIs(t, err, ErrUnsupported)
		for _, want := range []string{"sasl.mechanism GSSAPI (Kerberos)", "builtin.features: " + strings.Join(have, ", "), "-tags dynamic", "librdkafka " + minLibrdkafka + " or later built with SASL/GSSAPI"} {
			require.ErrorContains(t, err, want)
		}
		// No mechanism named: librdkafka's default is GSSAPI.
		require.ErrorIs(t, CheckFeatures(map[string]string{"security.protocol": "SASL_PLAINTEXT"}), ErrUnsupported)
	}
	require.NoError(t, CheckFeatures(map[string]string{"security.protocol": "sasl_ssl", "sasl.mechanisms": "SCRAM-SHA-512"}))
	require.NoError(t, CheckFeatures(map[string]string{"sasl.mechanisms": "GSSAPI"}), "no SASL protocol: the mechanism is unused")
	require.NoError(t, checkFeatures(gssapi, []string{"ssl", "sasl", "sasl_gssapi"}))
	require.ErrorContains(t, checkFeatures(map[string]string{"security.protocol": "ssl"}, []string{"sasl"}), "built without ssl")
}

// stores are a CA, a client key and certificate, and the stores a Java
// user would have made of them.
type stores struct {
	caPEM, certPEM             string
	key                        *ecdsa.PrivateKey
	caFile, trustP12, trustJKS string
	keyP12, keyJKS, keyPEM     string
}

func newStores(t *testing.T) *stores {
	t.Helper()
	dir := t.TempDir()
	cert := func(tmpl, parent *x509.Certificate, pub, signer any) *x509.Certificate {
		der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, signer)
		require.NoError(t, err)
		c, err := x509.ParseCertificate(der)
		require.NoError(t, err)
		return c
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	caT := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	ca := cert(caT, caT, &caKey.PublicKey, caKey)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	leaf := cert(&x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "kord-client"}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour)}, ca, &key.PublicKey, caKey)
	s := &stores{key: key,
		caPEM:   string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Raw})),
		certPEM: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leaf.Raw}))}
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, b, 0o600))
		return p
	}
	s.caFile = write("ca.pem", []byte(s.caPEM))
	p12, err := pkcs12.Modern.EncodeTrustStore([]*x509.Certificate{ca}, storePw)
	require.NoError(t, err)
	s.trustP12 = write("truststore.p12", p12)
	p12, err = pkcs12.Modern.Encode(key, leaf, nil, storePw)
	require.NoError(t, err)
	s.keyP12 = write("keystore.p12", p12)

	pkcs8, err := x509.MarshalPKCS8PrivateKey(key)
	require.NoError(t, err)
	jks := func(name string, fill func(keystore.KeyStore)) string {
		ks := keystore.New()
		fill(ks)
		f, err := os.Create(filepath.Join(dir, name))
		require.NoError(t, err)
		require.NoError(t, ks.Store(f, []byte(storePw)))
		require.NoError(t, f.Close())
		return f.Name()
	}
	s.trustJKS = jks("truststore.jks", func(ks keystore.KeyStore) {
		require.NoError(t, ks.SetTrustedCertificateEntry("ca", keystore.TrustedCertificateEntry{CreationTime: time.Now(), Certificate: keystore.Certificate{Type: "X509", Content: ca.Raw}}))
	})
	s.keyJKS = jks("keystore.jks", func(ks keystore.KeyStore) {
		require.NoError(t, ks.SetPrivateKeyEntry("kord-client", keystore.PrivateKeyEntry{CreationTime: time.Now(), PrivateKey: pkcs8,
			CertificateChain: []keystore.Certificate{{Type: "X509", Content: leaf.Raw}}}, []byte(keyPw)))
	})
	s.keyPEM = write("client.pem", append(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8}), s.certPEM...))
	return s
}
