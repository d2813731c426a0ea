// Package embedded runs an in-process Kafka-compatible cluster (franz-go's
// kfake) on 127.0.0.1. It is kord's default cluster for examples and the
// in-process half of the Kafka test suite.
//
// kfake speaks the Kafka protocol, including idempotent and transactional
// produce and read_committed fetches, but it is not Apache Kafka: it
// completes transactions synchronously, so tests of the windows between a
// transaction's commit request and its markers mean something only on the
// real broker (see internal/kafkatest).
package embedded

import (
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kfake"
)

// Cluster is a running in-process cluster.
type Cluster struct {
	fake *kfake.Cluster
}

// Start starts a cluster of brokers brokers (at least 1) listening on
// random ports of 127.0.0.1.
func Start(brokers int) (*Cluster, error) {
	if brokers < 1 {
		return nil, fmt.Errorf("embedded: need at least one broker, got %d", brokers)
	}
	ports := make([]int, brokers) // 0 = any free port
	f, err := kfake.NewCluster(kfake.NumBrokers(brokers), kfake.Ports(ports...))
	if err != nil {
		return nil, fmt.Errorf("embedded: start kfake: %w", err)
	}
	return &Cluster{fake: f}, nil
}

// Brokers returns the bootstrap servers, comma-separated.
func (c *Cluster) Brokers() string { return strings.Join(c.fake.ListenAddrs(), ",") }

// Fake returns the kfake cluster, for fault injection in tests.
func (c *Cluster) Fake() *kfake.Cluster { return c.fake }

// Close stops the cluster and its goroutines.
func (c *Cluster) Close() { c.fake.Close() }
