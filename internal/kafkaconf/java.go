// Package kafkaconf turns a Java client.properties into librdkafka settings
// and checks what the linked librdkafka can do. The producer, the consumer,
// the admin client and the Kafka edge (kafkaio) load properties through
// it, so that every client of a job is configured the same way.
//
// It is also the one place kord classifies a client's failures to reach
// the cluster: every kord client follows its connection with a Conn, makes
// each call that reaches for the cluster through Conn.Do (bounded by the
// client's request timeout, DefaultTimeout by default, and sliced so that
// a refusal ends the wait early) and sorts what fails with Conn.Classify
// into ErrAuth, ErrUnreachable, ErrDenied, ErrUnknownTopic and
// ErrUnknownGroup. internal/connfail tests every path against it.
package kafkaconf

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
)

// ErrProperty is a Java property kord cannot map: no librdkafka
// equivalent, an invalid value, or an unreadable store.
var ErrProperty = errors.New("client property refused")

// refused are Java properties with no librdkafka equivalent, each with
// what to use instead. A property whose value is Java's default and is
// what librdkafka does anyway is accepted (accepted).
var refused = map[string]string{
	"key.serializer":                           "kord's producer takes a Go Serializer (producer.New)",
	"value.serializer":                         "kord's producer takes a Go Serializer (producer.New)",
	"key.deserializer":                         "kord's consumer and sources take Go decoders (consumer.JSONValue, kafkaio.NewSource)",
	"value.deserializer":                       "kord's consumer and sources take Go decoders (consumer.JSONValue, kafkaio.NewSource)",
	"partitioner.class":                        "kord places every record with its partitioner package (producer.Partitioner)",
	"partitioner.ignore.keys":                  "kord places every record with its partitioner package (producer.Partitioner)",
	"partitioner.adaptive.partitioning.enable": "kord places every record with its partitioner package (producer.Partitioner)",
	"partitioner.availability.timeout.ms":      "kord places every record with its partitioner package (producer.Partitioner)",
	"interceptor.classes":                      "there are no JVM interceptors; wrap the Go calls instead",
	"metric.reporters":                         "there are no JVM metric reporters; use librdkafka's statistics.interval.ms",
	"buffer.memory":                            "librdkafka bounds its queue with queue.buffering.max.kbytes and queue.buffering.max.messages",
	"max.block.ms":                             "kord's calls wait as long as their context allows",
	"default.api.timeout.ms":                   "kord's calls wait as long as their context allows",
	"sasl.login.class":                         "librdkafka has no pluggable login; use the sasl.* settings of librdkafka's CONFIGURATION.md",
	"sasl.client.callback.handler.class":       "librdkafka has no pluggable SASL callbacks",
	"sasl.login.refresh.window.factor":         "librdkafka refreshes OAUTHBEARER tokens itself",
	"sasl.login.refresh.window.jitter":         "librdkafka refreshes OAUTHBEARER tokens itself",
	"sasl.login.refresh.min.period.seconds":    "librdkafka refreshes OAUTHBEARER tokens itself",
	"sasl.login.refresh.buffer.seconds":        "librdkafka refreshes OAUTHBEARER tokens itself",
	"sasl.kerberos.ticket.renew.window.factor": "librdkafka renews the Kerberos ticket by running sasl.kerberos.kinit.cmd every sasl.kerberos.min.time.before.relogin ms",
	"sasl.kerberos.ticket.renew.jitter":        "librdkafka renews the Kerberos ticket by running sasl.kerberos.kinit.cmd every sasl.kerberos.min.time.before.relogin ms",
	"ssl.cipher.suites":                        "librdkafka's ssl.cipher.suites takes OpenSSL cipher names, not Java's (`openssl ciphers -stdname` lists both); pass it by its librdkafka name with Set",
	"ssl.secure.random.implementation":         "librdkafka uses OpenSSL's random generator",
	"ssl.provider":                             "librdkafka uses OpenSSL",
	"ssl.engine.factory.class":                 "librdkafka uses OpenSSL; its ssl.engine.* settings load OpenSSL engines",
	"security.providers":                       "librdkafka uses OpenSSL and its own SASL providers",
	"ssl.truststore.type":                      "", // handled with ssl.truststore.location
}

// accepted are Java properties that librdkafka has no setting for, but
// whose Java default is what librdkafka does anyway: that value is
// accepted, any other refused.
var accepted = map[string]struct{ value, why string }{
	"ssl.protocol":               {"TLSv1.3", "librdkafka negotiates the newest TLS version OpenSSL and the broker share and has no such setting"},
	"ssl.enabled.protocols":      {"TLSv1.2,TLSv1.3", "librdkafka negotiates TLS 1.2 or 1.3 with OpenSSL's defaults and has no such setting"},
	"ssl.keymanager.algorithm":   {"SunX509", "librdkafka uses OpenSSL's key handling and has no such setting"},
	"ssl.trustmanager.algorithm": {"PKIX", "librdkafka verifies certificates with OpenSSL (PKIX) and has no such setting"},
}

// renamed are Java properties librdkafka knows by another name, for the
// same meaning.
var renamed = map[string]string{
	"sasl.mechanism":       "sasl.mechanisms",
	"fetch.max.wait.ms":    "fetch.wait.max.ms",
	"max.request.size":     "message.max.bytes",
	"receive.buffer.bytes": "socket.receive.buffer.bytes",
	"send.buffer.bytes":    "socket.send.buffer.bytes",
}

// handled are Java properties mapped as a group, below.
var handled = map[string]bool{
	"sasl.jaas.config": true, "sasl.kerberos.kinit.cmd": true, "sasl.kerberos.service.name": true,
	"ssl.truststore.location": true, "ssl.truststore.password": true, "ssl.truststore.type": true,
	"ssl.truststore.certificates": true,
	"ssl.keystore.location":       true, "ssl.keystore.password": true, "ssl.keystore.type": true,
	"ssl.keystore.key": true, "ssl.keystore.certificate.chain": true, "ssl.key.password": true,
	"ssl.endpoint.identification.algorithm": true, "security.protocol": true,
	"partition.assignment.strategy": true, "sasl.login.callback.handler.class": true,
	"sasl.oauthbearer.token.endpoint.url": true,
}

// mapper holds one file's properties while they are mapped.
type mapper struct {
	name  string
	props map[string]Property
	out   map[string]string
	from  map[string]string // librdkafka name → the Java property it came from
}

func (m *mapper) has(k string) bool   { _, ok := m.props[k]; return ok }
func (m *mapper) get(k string) string { return m.props[k].Value }

// errf is an error about Java property k: file, line, name, and never its
// value.
func (m *mapper) errf(k, format string, args ...any) error {
	where := m.name
	if p, ok := m.props[k]; ok && p.Line > 0 {
		where = fmt.Sprintf("%s:%d", m.name, p.Line)
	}
	return fmt.Errorf("%w: %s: %s: %s", ErrProperty, where, k, fmt.Sprintf(format, args...))
}

func (m *mapper) set(k, v, from string) error {
	if prev, ok := m.from[k]; ok && prev != from && m.out[k] != v {
		return m.errf(from, "sets librdkafka's %s, which %s also sets, differently", k, prev)
	}
	m.out[k] = v
	m.from[k] = from
	return nil
}

// LoadJava reads a Java client.properties file and maps it to librdkafka
// settings (FromJava).
func LoadJava(path string) (map[string]string, error) {
	props, err := ReadProperties(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrProperty, err)
	}
	return FromJava(props, path)
}

// LoadJavaInto loads a Java client.properties (LoadJava) into settings,
// the merge every client's Properties option does.
func LoadJavaInto(path string, settings map[string]string) error {
	s, err := LoadJava(path)
	if err != nil {
		return err
	}
	for k, v := range s {
		settings[k] = v
	}
	return nil
}

// FromJava maps Java client properties to librdkafka settings: each Java
// name to its librdkafka equivalent (docs/security.md's table), keystores and
// truststores to what librdkafka reads, sasl.jaas.config to librdkafka's
// SASL settings. A property with no equivalent is refused with an error
// that names it (file, line) and says what to use instead; every setting
// produced is checked by librdkafka itself. Errors never quote a value.
func FromJava(props []Property, name string) (map[string]string, error) {
	m := &mapper{name: name, props: map[string]Property{}, out: map[string]string{}, from: map[string]string{}}
	keys := make([]string, 0, len(props))
	for _, p := range props {
		if _, dup := m.props[p.Key]; !dup {
			keys = append(keys, p.Key)
		}
		m.props[p.Key] = p
	}
	sort.Slice(keys, func(i, j int) bool { return m.props[keys[i]].Line < m.props[keys[j]].Line })
	for _, k := range keys {
		v := m.get(k)
		if a, ok := accepted[k]; ok {
			if !sameList(v, a.value) {
				return nil, m.errf(k, "only Java's default (%s) can be honoured: %s", a.value, a.why)
			}
			continue
		}
		if why, ok := refused[k]; ok && why != "" {
			return nil, m.errf(k, "no librdkafka equivalent: %s", why)
		}
		if handled[k] {
			continue
		}
		to := k
		if k == "auto.offset.reset" && strings.TrimSpace(v) == "none" {
			v = "error" // Java's none: fail when there is no valid offset
		}
		if r, ok := renamed[k]; ok {
			to = r
			if k == "receive.buffer.bytes" || k == "send.buffer.bytes" {
				if v == "-1" {
					v = "0" // the OS default: Java's -1, librdkafka's 0
				}
			}
		}
		if err := m.set(to, v, k); err != nil {
			return nil, err
		}
	}
	steps := []func() error{m.protocol, m.sasl, m.truststore, m.keystore, m.endpoint, m.assignor}
	for _, step := range steps {
		if err := step(); err != nil {
			return nil, err
		}
	}
	// librdkafka checks every name and value: a Java name librdkafka does
	// not know, and kord has no rule for, is refused here.
	for k, v := range m.out {
		if err := check(k, v); err != nil {
			from := m.from[k]
			if errors.Is(err, errUnknown) {
				return nil, m.errf(from, "no librdkafka equivalent (librdkafka has no setting %s); see docs/security.md, \"Java properties and what kord does with them\"", k)
			}
			return nil, m.errf(from, "librdkafka's %s: %v", k, err)
		}
	}
	return m.out, nil
}

// sameList reports whether two comma-separated lists hold the same items,
// in any order and case.
func sameList(a, b string) bool {
	items := func(s string) []string {
		var out []string
		for _, x := range strings.Split(s, ",") {
			out = append(out, strings.ToLower(strings.TrimSpace(x)))
		}
		sort.Strings(out)
		return out
	}
	return strings.Join(items(a), ",") == strings.Join(items(b), ",")
}

func (m *mapper) protocol() error {
	if !m.has("security.protocol") {
		return nil
	}
	v := strings.ToUpper(strings.TrimSpace(m.get("security.protocol")))
	switch v {
	case "PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL":
		return m.set("security.protocol", strings.ToLower(v), "security.protocol")
	}
	return m.errf("security.protocol", "want PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL")
}

// endpoint maps ssl.endpoint.identification.algorithm: Java's "https" (its
// default) or "" (no hostname check) to librdkafka's https or none.
func (m *mapper) endpoint() error {
	const k = "ssl.endpoint.identification.algorithm"
	if !m.has(k) {
		return nil
	}
	switch v := strings.TrimSpace(m.get(k)); strings.ToLower(v) {
	case "https":
		return m.set(k, "https", k)
	case "":
		return m.set(k, "none", k)
	}
	return m.errf(k, "want https or empty (no hostname verification)")
}

// assignor maps Java's assignor class names to librdkafka's names.
func (m *mapper) assignor() error {
	const k = "partition.assignment.strategy"
	if !m.has(k) {
		return nil
	}
	names := map[string]string{
		"org.apache.kafka.clients.consumer.RangeAssignor":             "range",
		"org.apache.kafka.clients.consumer.RoundRobinAssignor":        "roundrobin",
		"org.apache.kafka.clients.consumer.CooperativeStickyAssignor": "cooperative-sticky",
	}
	var out []string
	for _, c := range strings.Split(m.get(k), ",") {
		c = strings.TrimSpace(c)
		n, ok := names[c]
		if !ok {
			return m.errf(k, "assignor %s has no librdkafka equivalent: librdkafka offers range, roundrobin and cooperative-sticky (Java's RangeAssignor, RoundRobinAssignor, CooperativeStickyAssignor)", c)
		}
		out = append(out, n)
	}
	return m.set(k, strings.Join(out, ","), k)
}

// fileExists fails with an error naming k and the path when path cannot
// be read.
func (m *mapper) readable(k, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return m.errf(k, "%v", err)
	}
	return f.Close()
}
