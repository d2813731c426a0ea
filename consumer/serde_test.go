package consumer_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kordproject/kord/consumer"
	"github.com/kordproject/kord/producer"
)

type visit struct {
	UUID string   `json:"uuid"`
	Seq  int64    `json:"seq"`
	Tags []string `json:"tags"`
}

const visitSchema = `{"type":"record","name":"Visit","fields":[
	{"name":"uuid","type":"string"},{"name":"seq","type":"long"},
	{"name":"tags","type":{"type":"array","items":"string"}}]}`

// TestDeserializersRoundTrip: what producer's serializers write, the
// consumer's deserializers read back; bad input is an error, never a zero
// value passed on.
func TestDeserializersRoundTrip(t *testing.T) {
	v := visit{UUID: "6f1c…", Seq: 42, Tags: []string{"a", "中文"}}
	rec := func(b []byte) consumer.Record { return consumer.Record{Topic: "t", Value: b} }

	b, err := producer.JSON[visit]().Serialize("t", v)
	require.NoError(t, err)
	got, err := consumer.JSONValue[visit]()(rec(b))
	require.NoError(t, err)
	require.Equal(t, v, got)
	_, err = consumer.JSONValue[visit]()(rec(append(b, 'x')))
	require.Error(t, err, "trailing bytes")
	_, err = consumer.JSONValue[visit]()(rec(nil))
	require.Error(t, err, "null value")

	ser, err := producer.Avro[visit](visitSchema)
	require.NoError(t, err)
	b, err = ser.Serialize("t", v)
	require.NoError(t, err)
	de, err := consumer.AvroValue[visit](visitSchema)
	require.NoError(t, err)
	got, err = de(rec(b))
	require.NoError(t, err)
	require.Equal(t, v, got)
	_, err = de(rec(append(b, 0)))
	require.ErrorContains(t, err, "1 bytes left")
	_, err = de(rec(b[:len(b)-2]))
	require.Error(t, err, "truncated")
	nat, err := consumer.AvroNativeValue(visitSchema)
	require.NoError(t, err)
	n, err := nat(rec(b))
	require.NoError(t, err)
	require.Equal(t, int64(42), n.(map[string]any)["seq"])
	_, err = consumer.AvroValue[visit](`{"type":"nope"}`)
	require.Error(t, err)

	s, err := consumer.StringValue()(rec([]byte("hé")))
	require.NoError(t, err)
	require.Equal(t, "hé", s)
	_, err = consumer.StringValue()(rec(nil))
	require.Error(t, err)
	raw, err := consumer.BytesValue()(rec(nil))
	require.NoError(t, err)
	require.Nil(t, raw)
}
