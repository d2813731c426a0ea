// Package kordtest runs kord jobs in tests: an in-process Kafka cluster
// (franz-go's kfake, a Kafka-compatible broker in Go) that kord's clients
// and jobs use like any other, and a way to read a topic back to its end as
// a read_committed consumer sees it. It is what Kafka Streams'
// TopologyTestDriver is to a Streams application, with the real protocol
// in between: start a [Cluster], create topics, produce input with kord's
// producer, run the job (a [kafkaio.Bounded] source makes Run return at the
// end of the input), and check what [ReadCommitted] returns.
//
// kfake completes transactions at once, so tests of the windows between a
// transaction's commit request and its markers mean something only on a
// real broker; for a job's own logic it is exact.
package kordtest

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/kordproject/kord/admin"
	"github.com/kordproject/kord/consumer"
	"github.com/kordproject/kord/kafkaio"
)

// Cluster is a running in-process cluster on 127.0.0.1.
type Cluster struct {
	fake *kfake.Cluster
}

// Opt configures a Cluster.
type Opt func(*opts)

type opts struct {
	brokers int
	topics  []topic
}

type topic struct {
	name       string
	partitions int32
}

// Brokers is the number of brokers. Default 1.
func Brokers(n int) Opt { return func(o *opts) { o.brokers = n } }

// Topic creates topic with partitions partitions when the cluster starts.
func Topic(name string, partitions int32) Opt {
	return func(o *opts) { o.topics = append(o.topics, topic{name, partitions}) }
}

// NewCluster starts a cluster on free ports of 127.0.0.1. Close it when
// done.
func NewCluster(options ...Opt) (*Cluster, error) {
	o := opts{brokers: 1}
	for _, opt := range options {
		opt(&o)
	}
	if o.brokers < 1 {
		return nil, fmt.Errorf("kordtest: Brokers(%d): want at least 1", o.brokers)
	}
	ports := make([]int, o.brokers) // 0: any free port
	// Each cluster gets an id of its own, as a real cluster does (kfake's
	// default is one fixed id): a job's checkpoints record it, and a
	// restore onto another cluster is refused.
	var id [16]byte
	_, _ = rand.Read(id[:])
	f, err := kfake.NewCluster(kfake.NumBrokers(o.brokers), kfake.Ports(ports...), kfake.ClusterID("kordtest-"+base64.RawURLEncoding.EncodeToString(id[:])))
	if err != nil {
		return nil, fmt.Errorf("kordtest: start the cluster: %w", err)
	}
	c := &Cluster{fake: f}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, t := range o.topics {
		if err := c.CreateTopic(ctx, t.name, t.partitions); err != nil {
			c.Close()
			return nil, err
		}
	}
	return c, nil
}

// Brokers returns the bootstrap servers.
func (c *Cluster) Brokers() []string { return c.fake.ListenAddrs() }

// Client returns a kafkaio client of the cluster, with opts added.
func (c *Cluster) Client(opts ...kafkaio.Opt) (*kafkaio.Client, error) {
	return kafkaio.NewClient(append([]kafkaio.Opt{kafkaio.Brokers(c.Brokers()...)}, opts...)...)
}

// Fake returns the kfake cluster itself, for fault injection.
func (c *Cluster) Fake() *kfake.Cluster { return c.fake }

// Close stops the cluster and its goroutines.
func (c *Cluster) Close() { c.fake.Close() }

// CreateTopic creates topic with partitions partitions (kord itself never
// creates topics). It returns once every partition has a leader.
func (c *Cluster) CreateTopic(ctx context.Context, name string, partitions int32) error {
	return CreateTopic(ctx, c.Brokers(), name, partitions, nil)
}

// CreateTopic creates topic on the cluster at brokers (any Kafka cluster,
// not only an in-process one), with configs as its topic-level settings,
// through kord's admin client: it returns once every partition has a
// leader, and fails within the admin client's request timeout (10 s) with
// its classified error (admin.ErrUnreachable, admin.ErrAuth, ...). A topic
// that exists already is an error.
func CreateTopic(ctx context.Context, brokers []string, name string, partitions int32, configs map[string]string) error {
	a, err := admin.New(admin.Brokers(brokers...))
	if err != nil {
		return fmt.Errorf("kordtest: create topic %s: %w", name, err)
	}
	defer a.Close()
	created, err := a.CreateTopic(ctx, name, partitions, configs)
	if err == nil && !created {
		err = fmt.Errorf("topic %s exists already", name)
	}
	if err != nil {
		return fmt.Errorf("kordtest: create topic %s at %s: %w", name, strings.Join(brokers, ","), err)
	}
	return nil
}

// ReadCommitted reads topic from its start to its end, as a read_committed
// consumer of client's cluster sees it now (up to each partition's last
// stable offset), and returns its records, each partition's in order,
// partitions in ascending order: the independent check of what a job
// committed, on an in-process cluster (Cluster.Client) or any other. It
// holds every record in memory: for tests, tools and small topics.
func ReadCommitted(ctx context.Context, client *kafkaio.Client, topic string) ([]consumer.Record, error) {
	// Reaching the end past a transaction's commit marker takes fetches
	// that return nothing, each waiting fetch.wait.max.ms (librdkafka's
	// 500 ms by default): a short wait reads a small topic in a tenth of
	// the time.
	src, err := consumer.New(consumer.Cluster(client.Cluster()), consumer.Set("fetch.wait.max.ms", "10"))
	if err != nil {
		return nil, fmt.Errorf("kordtest: read %s: %w", topic, err)
	}
	defer src.Close()
	start, err := src.Resolve(ctx, topic, consumer.Earliest)
	if err != nil {
		return nil, fmt.Errorf("kordtest: read %s: %w", topic, err)
	}
	if err := src.Assign(ctx, start); err != nil {
		return nil, fmt.Errorf("kordtest: read %s: %w", topic, err)
	}
	ends, err := src.Ends(ctx)
	if err != nil {
		return nil, fmt.Errorf("kordtest: read %s: %w", topic, err)
	}
	end := make(map[int32]int64, len(ends))
	for _, e := range ends {
		end[e.Partition] = e.Offset
	}
	per := map[int32][]consumer.Record{}
	for !src.Reached(ends) {
		recs, err := src.Poll(ctx, 10_000, 100*time.Millisecond)
		if err != nil {
			return nil, fmt.Errorf("kordtest: read %s: %w", topic, err)
		}
		for _, r := range recs {
			per[r.Partition] = append(per[r.Partition], r)
		}
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("kordtest: reading %s to its end: %w", topic, err)
		}
	}
	var out []consumer.Record
	for _, p := range start {
		for _, r := range per[p.Partition] {
			if r.Offset < end[p.Partition] {
				out = append(out, r)
			}
		}
	}
	return out, nil
}
