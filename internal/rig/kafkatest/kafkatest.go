// Package kafkatest gives tests a Kafka cluster: the in-process kfake cluster
// always, and the real Apache Kafka broker named by KORD_KAFKA_BROKERS when it
// is set (scripts/kafka.sh starts one). With KORD_REQUIRE_KAFKA=1 a missing
// real broker fails the test instead of running on kfake alone, so CI cannot
// pass without the broker-backed runs.
//
// Reading back and admin work use franz-go's kgo client, a client
// independent of the confluent-kafka-go code under test.
package kafkatest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kordproject/kord/kordtest"
)

// Cluster is one cluster a test runs against.
type Cluster struct {
	Name    string // "kfake", "kafka" or "kafka-cluster" (ThreeBrokers)
	Brokers string
	// Fake is the in-process cluster, for fault injection; nil on the real
	// broker.
	Fake *kfake.Cluster
}

// Real reports whether c is real Apache Kafka (one broker or three), not
// kfake.
func (c *Cluster) Real() bool { return c.Fake == nil }

// Env names the environment variables kafkatest reads.
const (
	EnvBrokers = "KORD_KAFKA_BROKERS"
	EnvRequire = "KORD_REQUIRE_KAFKA"
)

// Each runs fn as a subtest against every cluster: "kfake" (a fresh
// in-process cluster) and "kafka" (the real broker) when KORD_KAFKA_BROKERS is
// set.
func Each(t *testing.T, fn func(t *testing.T, c *Cluster)) {
	t.Helper()
	t.Run("kfake", func(t *testing.T) { fn(t, Fake(t)) })
	if c := realOrRequire(t); c != nil {
		t.Run("kafka", func(t *testing.T) { fn(t, c) })
	}
}

// Fake starts a fresh single-broker kfake cluster, closed when t ends.
func Fake(t testing.TB) *Cluster {
	t.Helper()
	e, err := kordtest.NewCluster()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return &Cluster{Name: "kfake", Brokers: strings.Join(e.Brokers(), ","), Fake: e.Fake()}
}

// Broker returns the real broker, failing t when it is required and missing,
// skipping t otherwise. For tests whose meaning needs real transaction states.
func Broker(t testing.TB) *Cluster {
	t.Helper()
	c := realOrRequire(t)
	if c == nil {
		t.Skipf("needs the real Kafka broker: start one with scripts/kafka.sh start and set %s", EnvBrokers)
	}
	return c
}

func realOrRequire(t testing.TB) *Cluster {
	t.Helper()
	if b := os.Getenv(EnvBrokers); b != "" {
		return &Cluster{Name: "kafka", Brokers: b}
	}
	if os.Getenv(EnvRequire) == "1" {
		t.Fatalf("%s=1 but %s is not set: the broker-backed tests could not run", EnvRequire, EnvBrokers)
	}
	return nil
}

var unsafeChars = regexp.MustCompile(`[^a-zA-Z0-9._-]+`)

// TopicName returns a topic name unique to this test and call.
func TopicName(t testing.TB) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := unsafeChars.ReplaceAllString(t.Name(), ".")
	if len(name) > 150 {
		name = name[len(name)-150:]
	}
	return fmt.Sprintf("kord.%s.%s", strings.Trim(name, "."), hex.EncodeToString(b[:]))
}

// Client returns a kgo client for c, closed when t ends.
func (c *Cluster) Client(t testing.TB, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(strings.Split(c.Brokers, ",")...)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// AddPartitions grows topic to count partitions.
func (c *Cluster) AddPartitions(t testing.TB, topic string, count int32) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	req := kmsg.NewPtrCreatePartitionsRequest()
	rt := kmsg.NewCreatePartitionsRequestTopic()
	rt.Topic = topic
	rt.Count = count
	req.Topics = append(req.Topics, rt)
	req.TimeoutMillis = 30000
	resp, err := req.RequestWith(ctx, c.Client(t))
	if err != nil {
		t.Fatalf("add partitions to %s: %v", topic, err)
	}
	if err := kerr.ErrorForCode(resp.Topics[0].ErrorCode); err != nil {
		t.Fatalf("add partitions to %s: %v", topic, err)
	}
}

// CreateTopic creates a topic with a unique name and the brokers' default
// replication factor, and returns the name. It waits until every partition
// has a leader.
func (c *Cluster) CreateTopic(t testing.TB, partitions int32, configs map[string]string) string {
	t.Helper()
	topic := TopicName(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := createTopic(ctx, strings.Split(c.Brokers, ","), topic, partitions, configs); err != nil {
		t.Fatal(err)
	}
	return topic
}

// createTopic creates topic with kgo, independent of the code under test
// (kordtest.CreateTopic is kord's admin client), and returns once every
// partition has a leader.
func createTopic(ctx context.Context, brokers []string, name string, partitions int32, configs map[string]string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return fmt.Errorf("kafkatest: create topic %s: %w", name, err)
	}
	defer cl.Close()
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	// -1: the brokers' default.replication.factor (1 on scripts/kafka.sh's
	// broker, 3 on scripts/kafka-cluster.sh's; kfake takes as many as it
	// has brokers, up to 3).
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = name, partitions, -1
	for k, v := range configs {
		rc := kmsg.NewCreateTopicsRequestTopicConfig()
		rc.Name, rc.Value = k, kmsg.StringPtr(v)
		rt.Configs = append(rt.Configs, rc)
	}
	req.Topics = append(req.Topics, rt)
	req.TimeoutMillis = 30000
	resp, err := req.RequestWith(ctx, cl)
	if err == nil {
		err = kerr.ErrorForCode(resp.Topics[0].ErrorCode)
	}
	if err != nil {
		return fmt.Errorf("kafkatest: create topic %s at %s: %w", name, strings.Join(brokers, ","), err)
	}
	for {
		mreq := kmsg.NewPtrMetadataRequest()
		mt := kmsg.NewMetadataRequestTopic()
		mt.Topic = kmsg.StringPtr(name)
		mreq.Topics = append(mreq.Topics, mt)
		mresp, err := mreq.RequestWith(ctx, cl)
		if err == nil && len(mresp.Topics) == 1 && mresp.Topics[0].ErrorCode == 0 && len(mresp.Topics[0].Partitions) == int(partitions) {
			ok := true
			for _, p := range mresp.Topics[0].Partitions {
				ok = ok && p.ErrorCode == 0 && p.Leader >= 0
			}
			if ok {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kafkatest: topic %s: partitions without a leader (last error %v): %w", name, err, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// ReadAll reads topic from the start until want records arrived or the
// timeout passed, and returns what it read. readCommitted selects
// isolation.level=read_committed.
func (c *Cluster) ReadAll(t testing.TB, topic string, want int, readCommitted bool, timeout time.Duration) []*kgo.Record {
	t.Helper()
	opts := []kgo.Opt{kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart())}
	if readCommitted {
		opts = append(opts, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	}
	cl := c.Client(t, opts...)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var out []*kgo.Record
	for len(out) < want {
		fs := cl.PollFetches(ctx)
		// What the poll fetched counts even when the timeout ended it.
		out = append(out, fs.Records()...)
		if ctx.Err() != nil {
			break
		}
		fs.EachError(func(topic string, p int32, err error) {
			t.Errorf("fetch %s[%d]: %v", topic, p, err)
		})
	}
	return out
}

// ReadExactly reads topic as a read_committed consumer until want records
// came (within a minute, however slow the fetches of a loaded machine),
// then reads it again for 3 s to see that no more come, as a duplicate
// would. It fails t unless exactly want came, and returns them.
func (c *Cluster) ReadExactly(t testing.TB, topic string, want int) []*kgo.Record {
	t.Helper()
	recs := c.ReadAll(t, topic, want, true, time.Minute)
	if len(recs) != want {
		t.Fatalf("topic %s: %d records within a minute, want %d", topic, len(recs), want)
	}
	if n := len(c.ReadAll(t, topic, want+1, true, 3*time.Second)); n > want {
		t.Fatalf("topic %s: %d records, want %d", topic, n, want)
	}
	return recs
}

// RecreateTopic deletes topic and creates it again under its name with
// partitions partitions: a new incarnation, with a new topic id (KIP-516)
// and its offsets starting over. It waits until the create succeeds (a
// real broker removes a deleted topic in the background) and every
// partition has a leader.
func (c *Cluster) RecreateTopic(t testing.TB, topic string, partitions int32) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	req := kmsg.NewPtrDeleteTopicsRequest()
	rt := kmsg.NewDeleteTopicsRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	req.TopicNames = []string{topic}
	req.TimeoutMillis = 30000
	resp, err := req.RequestWith(ctx, c.Client(t))
	if err == nil && len(resp.Topics) == 1 {
		err = kerr.ErrorForCode(resp.Topics[0].ErrorCode)
	}
	if err != nil {
		t.Fatalf("delete topic %s: %v", topic, err)
	}
	for {
		err := kordtest.CreateTopic(ctx, strings.Split(c.Brokers, ","), topic, partitions, nil)
		if err == nil {
			return
		}
		if !errors.Is(err, kerr.TopicAlreadyExists) || ctx.Err() != nil {
			t.Fatalf("create topic %s again: %v", topic, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
