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
