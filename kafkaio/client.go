package kafkaio

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"unsafe"

	"github.com/kordproject/kord/admin"
	"github.com/kordproject/kord/consumer"
	"github.com/kordproject/kord/internal/jsonx"
	"github.com/kordproject/kord/internal/kafkaconf"
	"github.com/kordproject/kord/keyed"
	"github.com/kordproject/kord/producer"
)

// Client is a Kafka client configuration, given once: every client a
// job's sources and sinks create (consumers, the transactional producer,
// admin requests) is configured from it. It opens no connection itself.
type Client struct {
	brokers  []string
	settings map[string]string
	log      *slog.Logger
	logSet   bool
	err      error
}

// ClientOpt configures a Client.
type ClientOpt func(*Client)

// NewClient returns a client configuration. It fails when a properties
// file cannot be read or mapped (Properties), or when the settings ask for
// what the linked librdkafka was not built with (GSSAPI, say): at once,
// before any job runs.
func NewClient(opts ...ClientOpt) (*Client, error) {
	c := &Client{settings: map[string]string{}, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	for _, o := range opts {
		o(c)
	}
	if c.err != nil {
		return nil, c.err
	}
	if err := kafkaconf.FoldAliases(c.settings); err != nil {
		return nil, fmt.Errorf("kafkaio: %w", err)
	}
	if err := kafkaconf.Check(c.settings); err != nil {
		return nil, fmt.Errorf("kafkaio: %w", err)
	}
	return c, nil
}

// Brokers are the bootstrap servers, host:port (Kafka's
// bootstrap.servers). Required.
func Brokers(addrs ...string) ClientOpt {
	return func(c *Client) { c.brokers = append(c.brokers, addrs...) }
}

// Set passes a librdkafka property to every client (security settings,
// client.id, ...), by librdkafka's name. The settings kord derives or
// owns are refused where they are used (see the producer and consumer
// packages, and Sink's doc).
func Set(key, value string) ClientOpt { return func(c *Client) { c.settings[key] = value } }

// Properties applies a Java client.properties file, the one a Java or
// Flink client of the same cluster uses, to every client: each Java
// property is mapped to its librdkafka equivalent (security.protocol,
// sasl.mechanism, sasl.jaas.config, ssl.truststore.*, ssl.keystore.*,
// ...; the README's table). A property with no equivalent makes NewClient
// fail, naming it and what to use instead. Its bootstrap.servers serves
// when Brokers is not given; options after it override what it sets.
func Properties(path string) ClientOpt {
	return func(c *Client) {
		if err := kafkaconf.LoadJavaInto(path, c.settings); err != nil {
			c.err = errors.Join(c.err, fmt.Errorf("kafkaio: %w", err))
		}
	}
}

// Logger receives the clients' log. Default: the job's logger, or nothing.
func Logger(l *slog.Logger) ClientOpt {
	return func(c *Client) { c.log, c.logSet = l, true }
}

// classify marks an error no restart can cure as permanent (keyed
// stops the job with it rather than restarting): a refused configuration,
// or a cluster that refuses the client (producer.ErrAuth, the same value
// as consumer.ErrAuth and admin.ErrAuth).
func classify(err error) error {
	if errors.Is(err, consumer.ErrConfig) || errors.Is(err, producer.ErrConfig) || errors.Is(err, admin.ErrConfig) || errors.Is(err, producer.ErrAuth) {
		return keyed.Permanent(err)
	}
	return err
}

// BrokerList returns the bootstrap servers, comma-separated: those of
// Brokers, else the bootstrap.servers setting.
func (c *Client) BrokerList() string {
	if len(c.brokers) == 0 {
		return c.settings["bootstrap.servers"]
	}
	return strings.Join(c.brokers, ",")
}

// Settings returns the librdkafka settings every client gets (the
// bootstrap servers included), by librdkafka's names: for a client of the
// same cluster made outside kord (an independent reader, say). It holds
// the configuration's secrets: never log it.
func (c *Client) Settings() map[string]string {
	out := make(map[string]string, len(c.settings)+1)
	for k, v := range c.settings {
		out[k] = v
	}
	if b := c.BrokerList(); b != "" {
		out["bootstrap.servers"] = b
	}
	return out
}

// logger returns the client's logger, or fallback when none was set.
func (c *Client) logger(fallback *slog.Logger) *slog.Logger {
	if c.logSet || fallback == nil {
		return c.log
	}
	return fallback
}

// admin returns an admin client of the client's settings, logging to
// log unless the client has a logger of its own. Its Close ends its
// goroutines.
func (c *Client) admin(log *slog.Logger) (*admin.Client, error) {
	opts := []admin.Opt{admin.Logger(c.logger(log))}
	for k, v := range c.Settings() {
		opts = append(opts, admin.Set(k, v))
	}
	a, err := admin.New(opts...)
	return a, classify(err)
}

// consumer creates a consumer with the client's configuration, extra
// settings (later ones win) and log.
func (c *Client) consumer(log *slog.Logger, extra map[string]string) (*consumer.Source, error) {
	opts := []consumer.Opt{consumer.Logger(c.logger(log))}
	for k, v := range c.Settings() {
		opts = append(opts, consumer.Set(k, v))
	}
	for k, v := range extra {
		opts = append(opts, consumer.Set(k, v))
	}
	return consumer.New(opts...)
}

// producerOpts returns the producer options of the client's configuration,
// with extra settings (later ones win) and log.
func (c *Client) producerOpts(log *slog.Logger, extra map[string]string) []producer.Opt {
	opts := []producer.Opt{producer.Logger(c.logger(log))}
	for k, v := range c.Settings() {
		opts = append(opts, producer.Set(k, v))
	}
	for k, v := range extra {
		opts = append(opts, producer.Set(k, v))
	}
	return opts
}

// JSON returns a sink encoder that writes each result as JSON
// (encoding/json's bytes, by internal/jsonx), keyed by key(result) (nil key
// when key is nil; an empty string is an empty key, not a null one).
//
// The key it returns shares the string's memory instead of copying it,
// which saves an allocation per record: it is read-only. The Sink only
// reads it (to place the record, and to hand it to librdkafka, which
// copies it); a caller of the encoder must not write to it either.
func JSON[T any](key func(T) string) func(T) ([]byte, []byte, error) {
	return func(v T) ([]byte, []byte, error) {
		b, err := jsonx.Marshal(v)
		if key == nil {
			return nil, b, err
		}
		return stringBytes(key(v)), b, err
	}
}

// stringBytes is s's bytes without a copy: read-only. The empty string
// gives an empty, non-nil slice (an empty key, never a null key).
func stringBytes(s string) []byte {
	if s == "" {
		return []byte{}
	}
	return unsafe.Slice(unsafe.StringData(s), len(s))
}
