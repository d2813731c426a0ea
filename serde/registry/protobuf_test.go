package registry_test

import (
	_ "embed"
	"encoding/binary"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/kordproject/kord/serde"
	"github.com/kordproject/kord/serde/registry"
	pb "github.com/kordproject/kord/serde/registry/internal/regtestpb"
	pb2 "github.com/kordproject/kord/serde/registry/internal/regtestpb/v2"
)

var (
	//go:embed internal/regtestpb/order.proto
	orderProto string
	//go:embed internal/regtestpb/v2/order_v2.proto
	orderV2Proto string
)

// TestProtobufFormat: the bytes after the schema id are the message's
// indexes in Confluent's encoding (the single byte 0 for the file's first
// message; a zigzag count and path for the others, [1] and [1 0] here:
// three messages of one file, one subject), then the Protobuf binary; each
// reads back, and only as its own message.
func TestProtobufFormat(t *testing.T) {
	c := mock(t)
	body := func(m proto.Message) []byte {
		b, err := proto.Marshal(m)
		require.NoError(t, err)
		return b
	}
	check := func(b []byte, subject string, indexes []byte, m proto.Message) {
		t.Helper()
		md, err := c.Registry().GetLatestSchemaMetadata(subject)
		require.NoError(t, err)
		require.Equal(t, "PROTOBUF", md.SchemaType)
		require.Equal(t, orderProto, md.Schema)
		want := binary.BigEndian.AppendUint32([]byte{0}, uint32(md.ID))
		want = append(append(want, indexes...), body(m)...)
		require.Equal(t, want, b)
	}

	o, err := registry.Protobuf[*pb.Order](c, "orders", orderProto)
	require.NoError(t, err)
	in := &pb.Order{Id: "o1", Qty: 3}
	b, err := o.Encode(nil, in)
	require.NoError(t, err)
	check(b, "orders-value", []byte{0}, in)
	got, err := o.Decode(b)
	require.NoError(t, err)
	require.True(t, proto.Equal(in, got), "%v", got)

	sh, err := registry.Protobuf[*pb.Shipment](c, "orders", orderProto)
	require.NoError(t, err)
	ship := &pb.Shipment{OrderId: "o1", Lines: []*pb.Shipment_Line{{Sku: "a", N: 2}}}
	b, err = sh.Encode(nil, ship)
	require.NoError(t, err)
	check(b, "orders-value", []byte{2, 2}, ship) // count 1, index 1

	ln, err := registry.Protobuf[*pb.Shipment_Line](c, "orders", orderProto)
	require.NoError(t, err)
	line := &pb.Shipment_Line{Sku: "b", N: 7}
	lb, err := ln.Encode(nil, line)
	require.NoError(t, err)
	check(lb, "orders-value", []byte{4, 2, 0}, line) // count 2, indexes 1 0
	gotLine, err := ln.Decode(lb)
	require.NoError(t, err)
	require.True(t, proto.Equal(line, gotLine))

	// [0] written in full (count 1, index 0) reads as the shortcut does.
	md, err := c.Registry().GetLatestSchemaMetadata("orders-value")
	require.NoError(t, err)
	full := append(binary.BigEndian.AppendUint32([]byte{0}, uint32(md.ID)), 2, 0)
	got, err = o.Decode(append(full, body(in)...))
	require.NoError(t, err)
	require.True(t, proto.Equal(in, got))

	// Another message of the file is not misread as an Order.
	_, err = o.Decode(b)
	require.ErrorContains(t, err, "the message at indexes [1] of its schema, not this serde's protobuf:kord.test.Order ([0])")
	// Indexes cut short.
	_, err = o.Decode(binary.BigEndian.AppendUint32([]byte{0}, uint32(md.ID)))
	require.ErrorIs(t, err, registry.ErrFormat)
	_, err = ln.Decode(lb[:6])
	require.ErrorIs(t, err, registry.ErrFormat)
}

// TestProtobufEvolution: the file's next version (a field added) under
// the same subject; each version's values read with the other, by field
// numbers.
func TestProtobufEvolution(t *testing.T) {
	c := mock(t)
	v1, err := registry.Protobuf[*pb.Order](c, "orders", orderProto)
	require.NoError(t, err)
	v2, err := registry.Protobuf[*pb2.Order](c, "orders", orderV2Proto)
	require.NoError(t, err)
	b1, err := v1.Encode(nil, &pb.Order{Id: "o1", Qty: 1})
	require.NoError(t, err)
	b2, err := v2.Encode(nil, &pb2.Order{Id: "o2", Qty: 2, Note: "fragile"})
	require.NoError(t, err)
	require.NotEqual(t, b1[1:5], b2[1:5], "two versions, two ids")

	old, err := v1.Decode(b2)
	require.NoError(t, err)
	require.Equal(t, "o2", old.Id)
	require.Equal(t, int64(2), old.Qty)
	require.NotEmpty(t, old.ProtoReflect().GetUnknown(), "the new field kept as unknown")
	newer, err := v2.Decode(b1)
	require.NoError(t, err)
	require.Equal(t, "o1", newer.Id)
	require.Empty(t, newer.Note)
}

// TestProtobufHeaderIDs: with HeaderIDs the header holds magic 1, the
// GUID and the message indexes (Confluent's GUIDToBytes), the value the
// bare Protobuf binary.
func TestProtobufHeaderIDs(t *testing.T) {
	c := mock(t)
	s, err := registry.Protobuf[*pb.Shipment](c, "shipments", orderProto, registry.HeaderIDs())
	require.NoError(t, err)
	in := &pb.Shipment{OrderId: "o9"}
	b, headers, err := s.(serde.HeaderSerde[*pb.Shipment]).EncodeHeaders(nil, in)
	require.NoError(t, err)
	bare, err := proto.Marshal(in)
	require.NoError(t, err)
	require.Equal(t, bare, b)
	md, err := c.Registry().GetLatestSchemaMetadata("shipments-value")
	require.NoError(t, err)
	g, err := uuid.Parse(md.GUID)
	require.NoError(t, err)
	require.Equal(t, []serde.Header{{Key: registry.ValueSchemaIDHeader, Value: append(append([]byte{1}, g[:]...), 2, 2)}}, headers)

	r, err := registry.Protobuf[*pb.Shipment](c, "shipments", orderProto)
	require.NoError(t, err)
	got, err := r.(serde.HeaderSerde[*pb.Shipment]).DecodeHeaders(headers, b)
	require.NoError(t, err)
	require.True(t, proto.Equal(in, got))
	// A header without the indexes is not a Protobuf schema's.
	_, err = r.(serde.HeaderSerde[*pb.Shipment]).DecodeHeaders([]serde.Header{{Key: registry.ValueSchemaIDHeader, Value: headers[0].Value[:17]}}, b)
	require.ErrorIs(t, err, registry.ErrFormat)
}
