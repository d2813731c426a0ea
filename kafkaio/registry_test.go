package kafkaio_test

import (
	"context"
	"encoding/binary"
	"strings"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/schemaregistry"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kordproject/kord/internal/rig/kafkatest"
	"github.com/kordproject/kord/kafkaio"
	"github.com/kordproject/kord/keyed"
	"github.com/kordproject/kord/keyed/connector"
	"github.com/kordproject/kord/serde"
	"github.com/kordproject/kord/serde/registry"
)

// TestRegistryDeadLetters (kfake): a job reading Schema Registry Avro
// (registry.Avro, on the mock registry) counts the good records, and the
// ones it cannot read go to the dead-letter topic, each naming why: the
// unknown schema id and the subject, or the bad magic byte.
func TestRegistryDeadLetters(t *testing.T) {
	c := kafkatest.Fake(t)
	in, out, dlq := c.CreateTopic(t, 1, nil), c.CreateTopic(t, 1, nil), c.CreateTopic(t, 1, nil)
	sr, err := schemaregistry.NewClient(schemaregistry.NewConfig("mock://dlq"))
	require.NoError(t, err)
	reg := registry.Of(sr, "mock://dlq")
	const schema = `{"type":"record","name":"Event","namespace":"kord.test","fields":[{"name":"uuid","type":"string"},{"name":"seq","type":"long"}]}`
	events, err := registry.Avro[event](reg, in, schema)
	require.NoError(t, err)

	kc := c.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var recs []*kgo.Record
	for i := range 3 {
		v, err := events.Encode(nil, event{UUID: "u", Seq: int64(i)})
		require.NoError(t, err)
		recs = append(recs, &kgo.Record{Topic: in, Key: []byte("u"), Value: v})
	}
	unknown := binary.BigEndian.AppendUint32([]byte{0}, 4242)
	recs = append(recs[:2], &kgo.Record{Topic: in, Key: []byte("u"), Value: append(unknown, 2, 'u', 0)},
		&kgo.Record{Topic: in, Key: []byte("u"), Value: []byte(`{"uuid":"u","seq":9}`)}, recs[2])
	require.NoError(t, kc.ProduceSync(ctx, recs...).FirstErr())

	cl := client(c)
	j := keyed.NewJob(strings.ReplaceAll(kafkatest.TopicName(t), "/", "."), keyed.Dir(t.TempDir()), keyed.CheckpointInterval(100*time.Millisecond))
	s := keyed.FromSource(j, "events", 1, kafkaio.NewSource(cl, in, events, kafkaio.Bounded()))
	o := keyed.Process(keyed.ByPartition(s), "count", 1, func() keyed.Operator[event, result] { return &counter{} })
	keyed.ToSink(o, "results", connector.Sink[result](kafkaio.NewSink(cl, out, serde.JSON[result](), byUUID, kafkaio.DeadLetterTopic(dlq))))
	require.NoError(t, j.Run(ctx))
	require.Len(t, c.ReadAll(t, out, 3, true, time.Minute), 3)
	dead := c.ReadAll(t, dlq, 2, true, time.Minute)
	require.Len(t, dead, 2)
	errs := map[string]string{}
	for _, r := range dead {
		for _, h := range r.Headers {
			if h.Key == "kord.dlq.error" {
				errs[string(r.Value[:1])] = string(h.Value)
			}
		}
	}
	require.Contains(t, errs["\x00"], "subject "+in+"-value: schema id 4242")
	require.Contains(t, errs["{"], "magic byte 0x7b")
	require.Contains(t, errs["{"], "offset 3")
}

// TestRegistryHeaders (kfake): schema ids in headers across kord's Kafka
// edge. A sink with HeaderIDs writes each result's schema GUID in
// __value_schema_id and the bare Avro as the value; a source reads
// records written so by another client, taking the header.
func TestRegistryHeaders(t *testing.T) {
	c := kafkatest.Fake(t)
	in, out := c.CreateTopic(t, 1, nil), c.CreateTopic(t, 1, nil)
	sr, err := schemaregistry.NewClient(schemaregistry.NewConfig("mock://headers"))
	require.NoError(t, err)
	reg := registry.Of(sr, "mock://headers")
	const evSchema = `{"type":"record","name":"Event","namespace":"kord.test","fields":[{"name":"uuid","type":"string"},{"name":"seq","type":"long"}]}`
	const resSchema = `{"type":"record","name":"Result","namespace":"kord.test","fields":[{"name":"uuid","type":"string"},{"name":"seq","type":"long"},{"name":"count","type":"long"}]}`
	// The input as another client writes it: header ids.
	w, err := registry.Avro[event](reg, in, evSchema, registry.HeaderIDs())
	require.NoError(t, err)
	kc := c.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i := range 5 {
		v, hs, err := w.(serde.HeaderSerde[event]).EncodeHeaders(nil, event{UUID: "u", Seq: int64(i)})
		require.NoError(t, err)
		require.NoError(t, kc.ProduceSync(ctx, &kgo.Record{Topic: in, Key: []byte("u"), Value: v,
			Headers: []kgo.RecordHeader{{Key: hs[0].Key, Value: hs[0].Value}}}).FirstErr())
	}
	events, err := registry.Avro[event](reg, in, evSchema)
	require.NoError(t, err)
	results, err := registry.Avro[result](reg, out, resSchema, registry.HeaderIDs())
	require.NoError(t, err)

	cl := client(c)
	j := keyed.NewJob(strings.ReplaceAll(kafkatest.TopicName(t), "/", "."), keyed.Dir(t.TempDir()), keyed.CheckpointInterval(100*time.Millisecond))
	s := keyed.FromSource(j, "events", 1, kafkaio.NewSource(cl, in, events, kafkaio.Bounded()))
	o := keyed.Process(keyed.ByPartition(s), "count", 1, func() keyed.Operator[event, result] { return &counter{} })
	keyed.ToSink(o, "results", connector.Sink[result](kafkaio.NewSink(cl, out, results, byUUID)))
	require.NoError(t, j.Run(ctx), "every record read through its header")

	recs := c.ReadAll(t, out, 5, true, time.Minute)
	require.Len(t, recs, 5)
	md, err := sr.GetLatestSchemaMetadata(out + "-value")
	require.NoError(t, err)
	reader, err := registry.Avro[result](reg, out, resSchema)
	require.NoError(t, err)
	for _, r := range recs {
		require.Len(t, r.Headers, 1)
		require.Equal(t, registry.ValueSchemaIDHeader, r.Headers[0].Key)
		require.Equal(t, byte(1), r.Headers[0].Value[0])
		_, err := reader.Decode(r.Value)
		require.ErrorIs(t, err, registry.ErrFormat, "the value is bare")
		v, err := reader.(serde.HeaderSerde[result]).DecodeHeaders([]serde.Header{{Key: r.Headers[0].Key, Value: r.Headers[0].Value}}, r.Value)
		require.NoError(t, err)
		require.Equal(t, v.Seq+1, v.Count)
	}
	require.NotEmpty(t, md.GUID)
}
