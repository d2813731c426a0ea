package checkpoint

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/kordproject/kord/internal/layout"
	"github.com/stretchr/testify/require"
)

func testMetadata() *Metadata {
	return &Metadata{
		Run:            "0123456789abcdef",
		ID:             42,
		Created:        time.Date(2025, 3, 1, 12, 0, 0, 123456789, time.UTC),
		MaxParallelism: 12,
		Offsets: []PartitionOffset{
			{Topic: "events", Partition: 0, Offset: 1000},
			{Topic: "events", Partition: 1, Offset: 0},
		},
		Files: []FileRef{
			{Name: layout.StateFileName("0123456789abcdef", 42, "count", 0), Size: 123, CRC32C: 0xdeadbeef, Operator: "count", KeyGroup: 0},
			{Name: layout.StateFileName("0123456789abcdef", 42, "count", 11), Size: 0, CRC32C: 0, Operator: "count", KeyGroup: 11},
		},
		Operators: []OperatorRef{
			{Name: "count", Type: "keyed.ValueState[int64]", SchemaFingerprint: "abc"},
			{Name: "op.m", Type: "keyed.map", SchemaFingerprint: "key=string;value=avro:0123456789abcdef", ValueSchema: `{"type":"record","name":"R","fields":[]}`},
		},
		Times:   []PartitionTime{{Topic: "events", Partition: 0, Time: 1_700_000_000_456}},
		Sources: []SourceRef{{Topic: "events", Cluster: "cZ1", TopicID: "tA2"}},
	}
}

func TestMetadataRoundTrip(t *testing.T) {
	m := testMetadata()
	b, err := encodeMetadata(m)
	require.NoError(t, err)
	require.Equal(t, metaMagic, string(b[:8]))
	got, err := DecodeMetadata("x.meta", b)
	require.NoError(t, err)
	m.Version = FormatVersion
	require.Equal(t, m, got)

	// Empty checkpoint (checkpoint 0 before any state).
	m0 := &Metadata{Run: "a", MaxParallelism: 1}
	b, err = encodeMetadata(m0)
	require.NoError(t, err)
	got, err = DecodeMetadata("x.meta", b)
	require.NoError(t, err)
	require.Equal(t, FormatVersion, got.Version)
	require.Equal(t, "a", got.Run)
	require.Nil(t, got.Watermark)

	// The watermark (version 2) round-trips; version 1 metadata has none.
	wm := int64(1_700_000_000_123)
	m.Watermark = &wm
	b, err = encodeMetadata(m)
	require.NoError(t, err)
	got, err = DecodeMetadata("x.meta", b)
	require.NoError(t, err)
	require.Equal(t, wm, *got.Watermark)
	got, err = DecodeMetadata("v1.meta", reframe(metaMagic, 1, []byte(`{"run":"a","maxParallelism":3,"created":"2020-01-01T00:00:00Z"}`)))
	require.NoError(t, err)
	require.Equal(t, 1, got.Version)
	require.Nil(t, got.Watermark)

	// Version 2 metadata has no sources: it restores unchecked.
	got, err = DecodeMetadata("v2.meta", reframe(metaMagic, 2, []byte(`{"run":"a","maxParallelism":3,"created":"2020-01-01T00:00:00Z","offsets":[{"topic":"t","partition":0,"offset":5}]}`)))
	require.NoError(t, err)
	require.Empty(t, got.Sources)

	// Version 3 metadata has no state schemas: its fingerprints must match.
	got, err = DecodeMetadata("v3.meta", reframe(metaMagic, 3, []byte(`{"run":"a","maxParallelism":3,"created":"2020-01-01T00:00:00Z","operators":[{"name":"op.v","type":"keyed.value","schemaFingerprint":"avro:0123456789abcdef"}]}`)))
	require.NoError(t, err)
	require.Equal(t, []OperatorRef{{Name: "op.v", Type: "keyed.value", SchemaFingerprint: "avro:0123456789abcdef"}}, got.Operators)

	// A state without schemas is written as in version 3.
	b, err = encodeMetadata(&Metadata{Run: "a", MaxParallelism: 1, Operators: []OperatorRef{{Name: "op.v", Type: "keyed.value", SchemaFingerprint: "int64-be"}}})
	require.NoError(t, err)
	require.NotContains(t, string(b), "Schema\"")
}

func TestEncodeMetadataInvalid(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(m *Metadata)
	}{
		{"bad run", func(m *Metadata) { m.Run = "XYZ" }},
		{"zero max parallelism", func(m *Metadata) { m.MaxParallelism = 0 }},
		{"future version", func(m *Metadata) { m.Version = FormatVersion + 1 }},
		{"duplicate offset", func(m *Metadata) { m.Offsets[1].Partition = 0 }},
		{"negative offset", func(m *Metadata) { m.Offsets[0].Offset = -1 }},
		{"empty topic", func(m *Metadata) { m.Offsets[0].Topic = "" }},
		{"file of another checkpoint", func(m *Metadata) { m.Files[0].Name = layout.StateFileName("0123456789abcdef", 41, "count", 0) }},
		{"file operator mismatch", func(m *Metadata) { m.Files[0].Operator = "other" }},
		{"key group beyond max parallelism", func(m *Metadata) {
			m.Files[1].Name = layout.StateFileName(m.Run, m.ID, "count", 12)
			m.Files[1].KeyGroup = 12
		}},
		{"duplicate file", func(m *Metadata) { m.Files[1] = m.Files[0] }},
		{"negative size", func(m *Metadata) { m.Files[0].Size = -1 }},
		{"bad operator name", func(m *Metadata) { m.Operators[0].Name = "a b" }},
		{"source without topic", func(m *Metadata) { m.Sources[0].Topic = "" }},
		{"source without ids", func(m *Metadata) { m.Sources[0] = SourceRef{Topic: "events"} }},
		{"duplicate source", func(m *Metadata) { m.Sources = append(m.Sources, m.Sources[0]) }},
		{"record time without offset", func(m *Metadata) { m.Times[0].Partition = 2 }},
		{"duplicate record time", func(m *Metadata) { m.Times = append(m.Times, m.Times[0]) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := testMetadata()
			tc.edit(m)
			_, err := encodeMetadata(m)
			require.Error(t, err)
		})
	}
}

// reframe builds an envelope around payload with a correct checksum.
func reframe(magic string, version uint32, payload []byte) []byte {
	return encodeEnvelope(magic, version, payload)
}

func TestDecodeMetadataErrors(t *testing.T) {
	valid, err := encodeMetadata(testMetadata())
	require.NoError(t, err)
	payload := valid[headerLen : len(valid)-trailerLen]
	const path = "/ckpt/ckpt-0123456789abcdef-00000000000000000042.meta"

	t.Run("every truncation", func(t *testing.T) {
		for i := range len(valid) {
			_, err := DecodeMetadata(path, valid[:i])
			var ce *CorruptError
			require.ErrorAs(t, err, &ce, "prefix %d", i)
			require.Equal(t, path, ce.Path)
			require.ErrorContains(t, err, path)
		}
	})
	t.Run("every bit flip", func(t *testing.T) {
		for i := range len(valid) * 8 {
			b := bytes.Clone(valid)
			b[i/8] ^= 1 << (i % 8)
			_, err := DecodeMetadata(path, b)
			require.Error(t, err, "bit %d", i)
			require.ErrorContains(t, err, path)
		}
	})
	t.Run("checksum mismatch names both sums", func(t *testing.T) {
		b := bytes.Clone(valid)
		b[headerLen+3] ^= 0x20
		_, err := DecodeMetadata(path, b)
		var ce *CorruptError
		require.ErrorAs(t, err, &ce)
		require.Contains(t, ce.Reason, "checksum mismatch")
		require.Contains(t, ce.Reason, "stored crc32c")
		require.Contains(t, ce.Reason, "computed")
	})
	t.Run("trailing bytes", func(t *testing.T) {
		_, err := DecodeMetadata(path, append(bytes.Clone(valid), 0))
		var ce *CorruptError
		require.ErrorAs(t, err, &ce)
	})
	t.Run("future version", func(t *testing.T) {
		_, err := DecodeMetadata(path, reframe(metaMagic, FormatVersion+1, payload))
		require.ErrorIs(t, err, ErrUnsupportedVersion)
		require.ErrorContains(t, err, path)
		require.ErrorContains(t, err, fmt.Sprintf("version %d", FormatVersion+1))
		var ce *CorruptError
		require.False(t, errors.As(err, &ce), "a newer version is not corruption")
	})
	t.Run("version 0", func(t *testing.T) {
		_, err := DecodeMetadata(path, reframe(metaMagic, 0, payload))
		var ce *CorruptError
		require.ErrorAs(t, err, &ce)
	})
	t.Run("wrong magic", func(t *testing.T) {
		_, err := DecodeMetadata(path, reframe(committedMagic, 1, payload))
		require.ErrorContains(t, err, "bad magic")
	})
	t.Run("unknown field", func(t *testing.T) {
		p := append([]byte(`{"extra":1,`), payload[1:]...)
		_, err := DecodeMetadata(path, reframe(metaMagic, 1, p))
		require.ErrorContains(t, err, "extra")
	})
	t.Run("valid checksum, invalid contents", func(t *testing.T) {
		_, err := DecodeMetadata(path, reframe(metaMagic, 1, []byte(`{"run":"a","maxParallelism":0}`)))
		var ce *CorruptError
		require.ErrorAs(t, err, &ce)
		require.Contains(t, ce.Reason, "max parallelism")
	})
	t.Run("huge length field", func(t *testing.T) {
		b := bytes.Clone(valid)
		binary.BigEndian.PutUint32(b[12:], 0xffffffff)
		_, err := DecodeMetadata(path, b)
		require.ErrorContains(t, err, "truncated")
	})
}

func TestCommittedEncoding(t *testing.T) {
	ref := Ref{Run: "beef", ID: 9}
	b, err := encodeCommitted(ref)
	require.NoError(t, err)
	got, err := decodeCommitted("C", b)
	require.NoError(t, err)
	require.Equal(t, ref, got)
	for i := range len(b) {
		_, err := decodeCommitted("C", b[:i])
		require.Error(t, err)
	}
	_, err = encodeCommitted(Ref{Run: "NOPE"})
	require.Error(t, err)
}

func FuzzDecodeMetadata(f *testing.F) {
	valid, err := encodeMetadata(testMetadata())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(valid)
	empty, _ := encodeMetadata(&Metadata{Run: "a", MaxParallelism: 1})
	f.Add(empty)
	f.Add(valid[:len(valid)/2])
	f.Add([]byte(metaMagic))
	f.Add(reframe(metaMagic, 1, []byte(`{"run":"a","maxParallelism":3,"created":"2020-01-01T00:00:00+01:00"}`)))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeMetadata("f", b)
		if err != nil {
			if m != nil {
				t.Fatal("metadata with an error")
			}
			return
		}
		// A decoded metadata re-encodes, and that encoding is a fixed point.
		enc, err := encodeMetadata(m)
		if err != nil {
			t.Fatalf("re-encode of decoded metadata: %v", err)
		}
		m2, err := DecodeMetadata("f", enc)
		if err != nil {
			t.Fatalf("decode of re-encoding: %v", err)
		}
		enc2, err := encodeMetadata(m2)
		if err != nil || !bytes.Equal(enc, enc2) {
			t.Fatalf("re-encoding not stable: %v", err)
		}
		// Any strict prefix of a valid encoding is an error.
		for _, i := range []int{0, 1, headerLen, len(b) / 2, len(b) - trailerLen, len(b) - 1} {
			if i >= 0 && i < len(b) {
				if _, err := DecodeMetadata("f", b[:i]); err == nil {
					t.Fatalf("prefix of %d bytes decoded", i)
				}
			}
		}
	})
}
