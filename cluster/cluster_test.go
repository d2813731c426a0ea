package cluster_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kordproject/kord/admin"
	"github.com/kordproject/kord/cluster"
	"github.com/kordproject/kord/consumer"
	"github.com/kordproject/kord/internal/rig/kafkatest"
	"github.com/kordproject/kord/producer"
	"github.com/kordproject/kord/serde"
)

// TestNew: a configuration is checked when it is made: brokers required,
// a file a setting names must be readable (the error names the setting),
// a Java client.properties maps onto librdkafka's names, aliases fold,
// options after a file override it; Settings is a copy, String hides
// secrets.
func TestNew(t *testing.T) {
	_, err := cluster.New()
	require.ErrorIs(t, err, cluster.ErrConfig)
	require.ErrorContains(t, err, "no brokers")

	_, err = cluster.New(cluster.Brokers("b:9092"), cluster.Set("ssl.ca.location", "/no/such/ca.pem"))
	require.ErrorIs(t, err, cluster.ErrConfig)
	require.ErrorContains(t, err, "ssl.ca.location")

	props := filepath.Join(t.TempDir(), "client.properties")
	require.NoError(t, os.WriteFile(props, []byte("bootstrap.servers=p:9092\nsecurity.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"+
		"sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username=\"u\" password=\"s3cret\";\n"), 0o600))
	c, err := cluster.New(cluster.Properties(props), cluster.Set("client.id", "mine"))
	require.NoError(t, err)
	require.Equal(t, "p:9092", c.Brokers())
	s := c.Settings()
	require.Equal(t, "PLAIN", s["sasl.mechanisms"], "sasl.mechanism folded onto librdkafka's name")
	require.Equal(t, "u", s["sasl.username"])
	require.Equal(t, "mine", s["client.id"])
	s["client.id"] = "changed"
	require.Equal(t, "mine", c.Settings()["client.id"], "Settings is a copy")
	require.NotContains(t, c.String(), "s3cret")

	c, err = cluster.New(cluster.Properties(props), cluster.Brokers("b1:9092", "b2:9092"))
	require.NoError(t, err)
	require.Equal(t, "b1:9092,b2:9092", c.Brokers(), "Brokers over the file's")

	_, err = cluster.New(cluster.Brokers("b:9092"), cluster.Properties(filepath.Join(t.TempDir(), "missing.properties")))
	require.ErrorIs(t, err, cluster.ErrConfig)
}

// TestClientsTakeIt: the producer, a consumer and the admin client reach
// the cluster a Config describes, with nothing else given; a client's own
// setting wins over the Config's, and a setting the client owns is refused
// wherever it comes from.
func TestClientsTakeIt(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, kc *kafkatest.Cluster) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		c, err := cluster.New(cluster.Brokers(kc.Brokers), cluster.Set("client.id", "kord-cluster-test"))
		require.NoError(t, err)
		topic := kc.CreateTopic(t, 2, nil)

		a, err := admin.New(admin.Cluster(c))
		require.NoError(t, err)
		defer a.Close()
		ps, err := a.Partitions(ctx, topic)
		require.NoError(t, err)
		require.Equal(t, []int32{0, 1}, ps)

		p, err := producer.New[[]byte](nil, serde.String(), producer.Cluster(c), producer.Set("linger.ms", "1"))
		require.NoError(t, err)
		_, err = p.ProduceSync(ctx, producer.Record[[]byte, string]{Topic: topic, Value: "v"})
		require.NoError(t, err)
		require.NoError(t, p.Close())

		src, err := consumer.New(consumer.Cluster(c))
		require.NoError(t, err)
		defer src.Close()
		got, err := src.Partitions(ctx, topic)
		require.NoError(t, err)
		require.Equal(t, ps, got)

		bad, err := cluster.New(cluster.Brokers(kc.Brokers), cluster.Set("enable.idempotence", "false"))
		require.NoError(t, err, "the cluster does not know what a producer owns")
		_, err = producer.New[[]byte](nil, serde.String(), producer.Cluster(bad))
		require.ErrorIs(t, err, producer.ErrReordering, "the producer refuses it, from a Config as from its own Set")
	})
}
