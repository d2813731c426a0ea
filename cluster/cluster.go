// Package cluster says how to reach one Kafka cluster: its bootstrap
// servers and the librdkafka settings every client of it needs (security,
// client.id, ...). A [Config] is made and checked once, by [New], and handed
// on as it is: producer.Cluster, consumer.Cluster, admin.Cluster and
// kafkaio's Client take it, so that a program's producer, consumers, admin
// requests and jobs reach the same cluster the same way without copying
// settings from one to the other.
//
// New checks what can be checked without a connection: each file a
// setting names can be read, the linked librdkafka has the features the
// settings ask for (GSSAPI, say), and a Java client.properties file maps
// onto librdkafka's settings ([Properties]). Each client still refuses, by
// its own rules, a setting it derives or owns (see the producer and
// consumer packages).
package cluster

import (
	"errors"
	"fmt"
	"maps"
	"strings"

	"github.com/kordproject/kord/internal/kafkaconf"
)

// ErrConfig is a configuration New refuses.
var ErrConfig = errors.New("cluster: invalid configuration")

// Config is a checked cluster configuration: New's. It is immutable and
// safe for concurrent use.
type Config struct {
	settings map[string]string // bootstrap.servers included
}

// Opt configures a Config.
type Opt func(*builder)

type builder struct {
	brokers  []string
	settings map[string]string
	err      error
}

// Brokers are the bootstrap servers, host:port (Kafka's
// bootstrap.servers). Required, here or in a Properties file.
func Brokers(addrs ...string) Opt {
	return func(b *builder) { b.brokers = append(b.brokers, addrs...) }
}

// Set passes a librdkafka setting by librdkafka's name, to every client
// of the cluster (security.protocol, sasl.*, ssl.*, client.id, ...).
func Set(key, value string) Opt { return func(b *builder) { b.settings[key] = value } }

// Properties applies a Java client.properties file, the one a Java or
// Flink client of the same cluster uses: each Java property is mapped to
// its librdkafka equivalent (security.protocol, sasl.mechanism,
// sasl.jaas.config, ssl.truststore.*, ssl.keystore.*, ...; docs/security.md's
// table), and a property with no equivalent makes New fail, naming it and
// what to use instead. Its bootstrap.servers serves when Brokers is not
// given; options after it override what it sets.
func Properties(path string) Opt {
	return func(b *builder) {
		if err := kafkaconf.LoadJavaInto(path, b.settings); err != nil {
			b.err = errors.Join(b.err, fmt.Errorf("%w: %w", ErrConfig, err))
		}
	}
}

// New returns the checked configuration of a cluster.
func New(opts ...Opt) (*Config, error) {
	b := builder{settings: map[string]string{}}
	for _, o := range opts {
		o(&b)
	}
	if b.err != nil {
		return nil, b.err
	}
	if len(b.brokers) > 0 {
		b.settings["bootstrap.servers"] = strings.Join(b.brokers, ",")
	}
	if err := kafkaconf.FoldAliases(b.settings); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if b.settings["bootstrap.servers"] == "" {
		return nil, fmt.Errorf("%w: no brokers (cluster.Brokers, or bootstrap.servers)", ErrConfig)
	}
	if err := kafkaconf.Check(b.settings); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return &Config{settings: b.settings}, nil
}

// Brokers returns the bootstrap servers, comma-separated.
func (c *Config) Brokers() string { return c.settings["bootstrap.servers"] }

// Settings returns the librdkafka settings, bootstrap.servers included,
// for a client made outside kord (an independent reader, say). It holds
// the configuration's secrets: never log it.
func (c *Config) Settings() map[string]string { return maps.Clone(c.settings) }

// String lists the settings, secrets redacted: for logs.
func (c *Config) String() string { return strings.Join(kafkaconf.Redacted(c.settings), " ") }

// OpenHandles is the number of librdkafka handles kord's clients (package
// producer, consumer and admin, and so kafkaio, which is built on them)
// hold open in this process now: one per producer, consumer or source,
// two for an admin client that has read a group. A handle is counted from
// its creation until its client's Close returns. It is there for a soak to
// check that a long-running process leaks none.
func OpenHandles() int { return int(kafkaconf.Handles()) }
