package kafkaio

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/kordproject/kord/admin"
	"github.com/kordproject/kord/cluster"
	"github.com/kordproject/kord/consumer"
	"github.com/kordproject/kord/keyed"
	"github.com/kordproject/kord/producer"
)

// Client is the Kafka cluster a job's sources and sinks reach, configured
// once: every client they create (consumers, the transactional producer,
// admin requests) is made from its checked cluster configuration. It
// opens no connection itself.
type Client struct {
	cl       *cluster.Config
	settings map[string]string // cl's
	log      *slog.Logger
}

// NewClient returns a client of the cluster Cluster names, or of the one
// Brokers, Properties and Set describe (checked as cluster.New checks
// them); Logger receives the clients' log. It fails when a properties file
// cannot be read or mapped, when no brokers are given, or when the
// settings ask for what the linked librdkafka was not built with (GSSAPI,
// say): at once, before any job runs.
func NewClient(opts ...Opt) (*Client, error) {
	o := apply(toClient, opts)
	if err := errors.Join(o.err, o.misplaced("NewClient")); err != nil {
		return nil, err
	}
	cl := o.cluster
	if cl == nil {
		var copts []cluster.Opt
		for k, v := range o.settings {
			copts = append(copts, cluster.Set(k, v))
		}
		var err error
		if cl, err = cluster.New(append(copts, cluster.Brokers(o.brokers...))...); err != nil {
			return nil, fmt.Errorf("kafkaio: %w", err)
		}
	} else if len(o.brokers) > 0 || len(o.settings) > 0 {
		return nil, errors.New("kafkaio: NewClient: Cluster, or Brokers, Properties and Set: not both")
	}
	return &Client{cl: cl, settings: cl.Settings(), log: o.log}, nil
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

// BrokerList returns the bootstrap servers, comma-separated.
func (c *Client) BrokerList() string { return c.cl.Brokers() }

// Cluster returns the client's cluster configuration: for a producer,
// consumer or admin client of the same cluster (producer.Cluster,
// consumer.Cluster, admin.Cluster), or a client made outside kord
// (Settings).
func (c *Client) Cluster() *cluster.Config { return c.cl }

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
	a, err := admin.New(admin.Cluster(c.cl), admin.Logger(c.logger(log)))
	return a, classify(err)
}

// consumer creates a consumer with the client's configuration, extra
// settings (later ones win) and log.
func (c *Client) consumer(log *slog.Logger, extra map[string]string) (*consumer.Source, error) {
	opts := []consumer.Opt{consumer.Cluster(c.cl), consumer.Logger(c.logger(log))}
	for k, v := range extra {
		opts = append(opts, consumer.Set(k, v))
	}
	return consumer.New(opts...)
}

// producerOpts returns the producer options of the client's configuration,
// with extra settings (later ones win) and log.
func (c *Client) producerOpts(log *slog.Logger, extra map[string]string) []producer.Opt {
	opts := []producer.Opt{producer.Cluster(c.cl), producer.Logger(c.logger(log))}
	for k, v := range extra {
		opts = append(opts, producer.Set(k, v))
	}
	return opts
}
