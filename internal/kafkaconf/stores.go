package kafkaconf

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"os"
	"strings"

	"github.com/pavlo-v-chernykh/keystore-go/v4"
	"software.sslmate.com/src/go-pkcs12"
)

// Java's store types. Java's default for both stores is JKS, and with
// keystore.type.compat (on by default since JDK 9) a JKS store can be read
// as PKCS12 and the other way round: the file's own format decides, as
// here.
const (
	typeJKS    = "JKS"
	typePKCS12 = "PKCS12"
	typePEM    = "PEM"
)

func (m *mapper) storeType(k string) (string, error) {
	t := strings.ToUpper(strings.TrimSpace(m.get(k)))
	switch t {
	case "":
		return typeJKS, nil
	case typeJKS, typePKCS12, typePEM:
		return t, nil
	}
	return "", m.errf(k, "store type %s: kord reads JKS, PKCS12 and PEM", t)
}

// sniff returns the format of a JKS or PKCS12 store file from its first
// bytes: JKS starts with its magic number 0xFEEDFEED, PKCS12 is DER.
func sniff(b []byte) string {
	if len(b) >= 4 && b[0] == 0xFE && b[1] == 0xED && b[2] == 0xFE && b[3] == 0xED {
		return typeJKS
	}
	if len(b) > 0 && b[0] == 0x30 {
		return typePKCS12
	}
	return ""
}

// truststore maps ssl.truststore.* to what librdkafka reads: a PEM file to
// ssl.ca.location; the trusted certificates of a JKS or PKCS12 store, read
// here, to ssl.ca.pem; inline PEM certificates to ssl.ca.pem.
func (m *mapper) truststore() error {
	const loc, pw, typ, inline = "ssl.truststore.location", "ssl.truststore.password", "ssl.truststore.type", "ssl.truststore.certificates"
	t, err := m.storeType(typ)
	if err != nil {
		return err
	}
	if m.has(inline) {
		if m.has(loc) {
			return m.errf(inline, "set together with %s: name one", loc)
		}
		if t != typePEM {
			return m.errf(inline, "needs ssl.truststore.type=PEM, as in Java")
		}
		return m.set("ssl.ca.pem", m.get(inline), inline)
	}
	if !m.has(loc) {
		if m.has(pw) {
			return m.errf(pw, "set without %s", loc)
		}
		return nil
	}
	path := m.get(loc)
	if t == typePEM {
		// Java: "SSL trust store password cannot be specified for PEM format".
		if m.has(pw) {
			return m.errf(pw, "a PEM truststore has no password (Java refuses one too)")
		}
		if err := m.readable(loc, path); err != nil {
			return err
		}
		return m.set("ssl.ca.location", path, loc)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return m.errf(loc, "%v", err)
	}
	if !m.has(pw) {
		return m.errf(loc, "a %s truststore needs ssl.truststore.password: kord checks the store's integrity with it", t)
	}
	var certs []*x509.Certificate
	switch sniff(b) {
	case typeJKS:
		ks := keystore.New()
		if err := ks.Load(bytes.NewReader(b), []byte(m.get(pw))); err != nil {
			return m.errf(loc, "reading %s as a JKS store: %v", path, err)
		}
		for _, a := range ks.Aliases() {
			if !ks.IsTrustedCertificateEntry(a) {
				continue
			}
			e, err := ks.GetTrustedCertificateEntry(a)
			if err != nil {
				return m.errf(loc, "%s: entry %s: %v", path, a, err)
			}
			c, err := x509.ParseCertificate(e.Certificate.Content)
			if err != nil {
				return m.errf(loc, "%s: entry %s: %v", path, a, err)
			}
			certs = append(certs, c)
		}
	case typePKCS12:
		certs, err = pkcs12.DecodeTrustStore(b, m.get(pw))
		if err != nil {
			return m.errf(loc, "reading %s as a PKCS12 truststore: %v", path, err)
		}
	default:
		return m.errf(loc, "%s is neither a JKS nor a PKCS12 store (for PEM set ssl.truststore.type=PEM)", path)
	}
	if len(certs) == 0 {
		return m.errf(loc, "%s holds no trusted certificate", path)
	}
	var out bytes.Buffer
	for _, c := range certs {
		_ = pem.Encode(&out, &pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
	}
	return m.set("ssl.ca.pem", out.String(), loc)
}

// keystore maps ssl.keystore.* (the client's certificate and key, for
// mTLS) to what librdkafka reads: a PKCS12 store to ssl.keystore.location
// (librdkafka reads it with OpenSSL); a PEM file to ssl.key.location and
// ssl.certificate.location (the same file holds both, as Java's PEM
// keystore does); a JKS store, read here, to ssl.key.pem and
// ssl.certificate.pem; inline PEM to ssl.key.pem and ssl.certificate.pem.
// ssl.key.password decrypts the key; Java falls back to the store's
// password for it (Kafka, DefaultSslEngineFactory), and so does kord.
func (m *mapper) keystore() error {
	const loc, pw, typ, keyPw = "ssl.keystore.location", "ssl.keystore.password", "ssl.keystore.type", "ssl.key.password"
	const inKey, inChain = "ssl.keystore.key", "ssl.keystore.certificate.chain"
	t, err := m.storeType(typ)
	if err != nil {
		return err
	}
	if m.has(inKey) || m.has(inChain) {
		if !m.has(inKey) || !m.has(inChain) {
			return m.errf(inKey, "%s and %s go together", inKey, inChain)
		}
		if m.has(loc) || t != typePEM {
			return m.errf(inKey, "needs ssl.keystore.type=PEM and no %s, as in Java", loc)
		}
		if err := m.set("ssl.key.pem", m.get(inKey), inKey); err != nil {
			return err
		}
		if m.has(keyPw) {
			if err := m.set("ssl.key.password", m.get(keyPw), keyPw); err != nil {
				return err
			}
		}
		return m.set("ssl.certificate.pem", m.get(inChain), inChain)
	}
	if !m.has(loc) {
		for _, k := range []string{pw, keyPw} {
			if m.has(k) {
				return m.errf(k, "set without %s", loc)
			}
		}
		return nil
	}
	path := m.get(loc)
	if t == typePEM {
		// Java: "SSL key store password cannot be specified with PEM format, only key password may be specified".
		if m.has(pw) {
			return m.errf(pw, "a PEM keystore has no store password; an encrypted key takes ssl.key.password (Java refuses it too)")
		}
		if err := m.readable(loc, path); err != nil {
			return err
		}
		if err := m.set("ssl.key.location", path, loc); err != nil {
			return err
		}
		if err := m.set("ssl.certificate.location", path, loc); err != nil {
			return err
		}
		if m.has(keyPw) {
			return m.set("ssl.key.password", m.get(keyPw), keyPw)
		}
		return nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return m.errf(loc, "%v", err)
	}
	if !m.has(pw) {
		return m.errf(loc, "a %s keystore needs ssl.keystore.password", t)
	}
	switch sniff(b) {
	case typePKCS12:
		// One password for the store and its key: keytool makes PKCS12
		// stores so, and OpenSSL (librdkafka) reads them with it.
		if m.has(keyPw) && m.get(keyPw) != m.get(pw) {
			return m.errf(keyPw, "differs from ssl.keystore.password: a PKCS12 keystore has one password for the store and its key")
		}
		if err := m.set("ssl.keystore.location", path, loc); err != nil {
			return err
		}
		return m.set("ssl.keystore.password", m.get(pw), pw)
	case typeJKS:
		return m.jksKey(loc, path, b, m.get(pw), m.get(keyPw))
	}
	return m.errf(loc, "%s is neither a JKS nor a PKCS12 store (for PEM set ssl.keystore.type=PEM)", path)
}

// jksKey reads the one private key entry of a JKS keystore and hands its
// key and chain to librdkafka as PEM.
func (m *mapper) jksKey(loc, path string, b []byte, storePw, keyPw string) error {
	ks := keystore.New()
	if err := ks.Load(bytes.NewReader(b), []byte(storePw)); err != nil {
		return m.errf(loc, "reading %s as a JKS store: %v", path, err)
	}
	var aliases []string
	for _, a := range ks.Aliases() {
		if ks.IsPrivateKeyEntry(a) {
			aliases = append(aliases, a)
		}
	}
	if len(aliases) != 1 {
		return m.errf(loc, "%s holds %d private keys; kord takes a keystore with exactly one", path, len(aliases))
	}
	if keyPw == "" {
		keyPw = storePw
	}
	e, err := ks.GetPrivateKeyEntry(aliases[0], []byte(keyPw))
	if err != nil {
		return m.errf(loc, "%s: the key of entry %s (decrypted with ssl.key.password, else the store's password): %v", path, aliases[0], err)
	}
	if _, err := x509.ParsePKCS8PrivateKey(e.PrivateKey); err != nil {
		return m.errf(loc, "%s: the key of entry %s: %v", path, aliases[0], err)
	}
	var chain bytes.Buffer
	for _, c := range e.CertificateChain {
		if c.Type != "X509" && c.Type != "X.509" {
			return m.errf(loc, "%s: entry %s holds a %s certificate, not X.509", path, aliases[0], c.Type)
		}
		_ = pem.Encode(&chain, &pem.Block{Type: "CERTIFICATE", Bytes: c.Content})
	}
	if chain.Len() == 0 {
		return m.errf(loc, "%s: entry %s has no certificate", path, aliases[0])
	}
	key := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: e.PrivateKey})
	if err := m.set("ssl.key.pem", string(key), loc); err != nil {
		return err
	}
	return m.set("ssl.certificate.pem", chain.String(), loc)
}
