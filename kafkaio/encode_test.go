package kafkaio_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kordproject/kord/internal/jsonx"
	"github.com/kordproject/kord/kafkaio"
)

// TestJSONEncoder: kafkaio.JSON writes encoding/json's bytes, keys each
// record by key(result) without copying it (no allocation beyond the
// JSON's), gives the empty string as an empty key and no key func as a
// null key.
func TestJSONEncoder(t *testing.T) {
	type result struct {
		UUID  string `json:"uuid"`
		Count int64  `json:"count"`
	}
	v := result{UUID: "1b4e28ba-2fa1-41d2-883f-0016d3cca427", Count: 3}
	enc := kafkaio.JSON(func(r result) string { return r.UUID })
	key, val, err := enc(v)
	require.NoError(t, err)
	require.Equal(t, []byte(v.UUID), key)
	want, err := json.Marshal(v)
	require.NoError(t, err)
	require.Equal(t, want, val)

	key, _, err = enc(result{})
	require.NoError(t, err)
	require.NotNil(t, key, "an empty string is an empty key, not a null key")
	require.Empty(t, key)

	key, _, err = kafkaio.JSON[result](nil)(v)
	require.NoError(t, err)
	require.Nil(t, key, "no key func: a null key")

	marshal := testing.AllocsPerRun(200, func() { _, _ = jsonx.Marshal(v) })
	encode := testing.AllocsPerRun(200, func() { _, _, _ = enc(v) })
	require.Equal(t, marshal, encode, "allocations: the JSON alone %v, the encoder %v", marshal, encode)
}
