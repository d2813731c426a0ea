package producer_test

import (
	"testing"

	"github.com/linkedin/goavro/v2"
	"github.com/stretchr/testify/require"

	"github.com/kordproject/kord/producer"
)

const eventSchema = `{"type":"record","name":"Event","fields":[
 {"name":"uuid","type":"string"},{"name":"seq","type":"long"},{"name":"page","type":"string"}]}`

type event struct {
	UUID string `json:"uuid"`
	Seq  int64  `json:"seq"`
	Page string `json:"page"`
}

func TestSerializers(t *testing.T) {
	b, err := producer.String().Serialize("t", "")
	require.NoError(t, err)
	require.NotNil(t, b, "the empty string is an empty key, not a null key")
	require.Len(t, b, 0)

	b, err = producer.Bytes().Serialize("t", nil)
	require.NoError(t, err)
	require.Nil(t, b)

	b, err = producer.JSON[event]().Serialize("t", event{UUID: "u", Seq: 3, Page: "/"})
	require.NoError(t, err)
	require.JSONEq(t, `{"uuid":"u","seq":3,"page":"/"}`, string(b))

	_, err = producer.JSON[chan int]().Serialize("events", make(chan int))
	require.ErrorContains(t, err, `"events"`)

	s, err := producer.Avro[event](eventSchema)
	require.NoError(t, err)
	b, err = s.Serialize("t", event{UUID: "用户", Seq: 9, Page: "/p"})
	require.NoError(t, err)
	codec, err := goavro.NewCodec(eventSchema)
	require.NoError(t, err)
	native, rest, err := codec.NativeFromBinary(b)
	require.NoError(t, err)
	require.Empty(t, rest)
	require.Equal(t, map[string]any{"uuid": "用户", "seq": int64(9), "page": "/p"}, native)

	n, err := producer.AvroNative(eventSchema)
	require.NoError(t, err)
	b2, err := n.Serialize("t", map[string]any{"uuid": "用户", "seq": int64(9), "page": "/p"})
	require.NoError(t, err)
	require.Equal(t, b, b2)

	_, err = n.Serialize("events", map[string]any{"uuid": "x"})
	require.ErrorContains(t, err, `"events"`, "a record missing fields fails, naming the topic")

	_, err = producer.Avro[event](`{"type":"nope"}`)
	require.Error(t, err)
}
