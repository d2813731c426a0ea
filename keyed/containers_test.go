package keyed

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kordproject/kord/serde"
)

func TestListMapEncoding(t *testing.T) {
	b, _, err := appendList(nil, nil, serde.String(), []string{"a", "", "bc"})
	require.NoError(t, err)
	require.Equal(t, []byte{0x01, 3, 1, 'a', 0, 2, 'b', 'c'}, b, "documented layout")
	l, err := decodeList(b, serde.String())
	require.NoError(t, err)
	require.Equal(t, []string{"a", "", "bc"}, l)

	b, _, err = appendMap(nil, nil, serde.String(), serde.Int64(), map[string]int64{"k": 7})
	require.NoError(t, err)
	require.Equal(t, []byte{0x01, 1, 1, 'k', 8, 0, 0, 0, 0, 0, 0, 0, 7}, b, "documented layout")
	m, err := decodeMap(b, serde.String(), serde.Int64())
	require.NoError(t, err)
	require.Equal(t, map[string]int64{"k": 7}, m)

	big := map[string]int64{}
	for i := range 1000 {
		big[string(binary.AppendUvarint(nil, uint64(i)))] = int64(i)
	}
	b, _, err = appendMap(nil, nil, serde.String(), serde.Int64(), big)
	require.NoError(t, err)
	m, err = decodeMap(b, serde.String(), serde.Int64())
	require.NoError(t, err)
	require.Equal(t, big, m)

	for _, bad := range [][]byte{
		nil, {0x02, 1, 0}, {0x01}, {0x01, 0}, {0x01, 2, 0}, {0x01, 1, 5, 'a'}, {0x01, 1, 0, 0},
		{0x01, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01},
	} {
		_, err := decodeList(bad, serde.String())
		require.Error(t, err, "list %x", bad)
	}
	for _, bad := range [][]byte{
		nil, {0x01, 1, 1, 'k'}, {0x01, 1, 1, 'k', 1, 0}, // value not 8 bytes
		{0x01, 2, 1, 'k', 8, 0, 0, 0, 0, 0, 0, 0, 1, 1, 'k', 8, 0, 0, 0, 0, 0, 0, 0, 2}, // duplicate key
	} {
		_, err := decodeMap(bad, serde.String(), serde.Int64())
		require.Error(t, err, "map %x", bad)
	}
}

// FuzzDecodeList checks that the list decoder never panics, and that what
// it accepts re-encodes to the same bytes.
func FuzzDecodeList(f *testing.F) {
	for _, l := range [][]string{{"a"}, {"", "x", "yz"}} {
		b, _, _ := appendList(nil, nil, serde.String(), l)
		f.Add(b)
	}
	f.Add([]byte{0x01, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Add([]byte("\x01\x05\x00\x80\x00\x010\x00\x010")) // overlong varint, found by the fuzzer
	f.Fuzz(func(t *testing.T, b []byte) {
		l, err := decodeList(b, serde.String())
		if err != nil {
			return
		}
		out, _, err := appendList(nil, nil, serde.String(), l)
		require.NoError(t, err)
		require.Equal(t, b, out)
		// Int64 elements too: fixed-size items.
		_, _ = decodeList(b, serde.Int64())
	})
}

// FuzzDecodeMap checks that the map decoder never panics, and that what it
// accepts decodes again to the same map after re-encoding.
func FuzzDecodeMap(f *testing.F) {
	b, _, _ := appendMap(nil, nil, serde.String(), serde.Int64(), map[string]int64{"a": 1, "b": -2})
	f.Add(b)
	f.Add([]byte{0x01, 1, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeMap(b, serde.String(), serde.Int64())
		if err == nil {
			out, _, err := appendMap(nil, nil, serde.String(), serde.Int64(), m)
			require.NoError(t, err)
			again, err := decodeMap(out, serde.String(), serde.Int64())
			require.NoError(t, err)
			require.Equal(t, m, again)
		}
		_, _ = decodeMap(b, serde.String(), serde.Bytes())
	})
}
