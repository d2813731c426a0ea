package kafkaio

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/kordproject/kord/admin"
	"github.com/kordproject/kord/consumer"
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
}

// NewClient returns a client configuration (options Brokers, Properties,
// Set, Logger). It fails when a properties file cannot be read or mapped
// (Properties), or when the settings ask for what the linked librdkafka
// was not built with (GSSAPI, say): at once, before any job runs.
func NewClient(opts ...Opt) (*Client, error) {
	o := apply(toClient, opts)
	if err := errors.Join(o.err, o.misplaced("NewClient")); err != nil {
		return nil, err
	}
	c := &Client{brokers: o.brokers, settings: o.settings, log: o.log}
	if c.settings == nil {
		c.settings = map[string]string{}
	}
	if err := kafkaconf.FoldAliases(c.settings); err != nil {
		return nil, fmt.Errorf("kafkaio: %w", err)
	}
	if err := kafkaconf.Check(c.settings); err != nil {
		return nil, fmt.Errorf("kafkaio: %w", err)
	}
	return c, nil
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
	switch {
	case c.log != nil:
		return c.log
	case fallback != nil:
		return fallback
	}
	return slog.New(slog.DiscardHandler)
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
