package registry

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/kordproject/kord/serde"
)

// Protobuf returns a serde of the generated message type T (a pointer, as
// *pb.Order) in Schema Registry's format for topic. schema is the text of
// the .proto file T was generated from, registered as it is (the subject's
// schema for RecordName is T's full name). After the schema id come T's
// message indexes, its path among the file's messages (Confluent's
// format: zigzag varints, a count then the indexes; [0], the file's first
// message, as the single byte 0), then the Protobuf binary.
//
// Reading, the indexes must be T's: a record of another message of the
// file is an error naming them, not a value misread. Protobuf resolves
// versions by field numbers, so a value written under another version of
// the file reads into T, unknown fields kept as unknown. A schema that
// imports other files (references) is not supported: its imports would
// have to be registered and named as references.
func Protobuf[T proto.Message](c *Client, topic, schema string, opts ...Opt) (serde.Serde[T], error) {
	var zero T
	md := zero.ProtoReflect().Descriptor()
	if md.ParentFile().Imports().Len() > 0 {
		return nil, fmt.Errorf("registry: Protobuf: %s imports %s: schemas with references are not supported", md.ParentFile().Path(), md.ParentFile().Imports().Get(0).Path())
	}
	reader := protoSerde[T]{name: string(md.FullName())}
	f := format[T]{kind: "PROTOBUF", schema: schema, reader: reader, indexes: messageIndexes(md),
		writerOf: func(string) (serde.Serde[T], error) { return reader, nil },
		resolve:  func(string) (func([]byte) (T, error), error) { return reader.Decode, nil }}
	return newSerde(c, topic, string(md.FullName()), f, configOf(opts))
}

// messageIndexes is the path of message d among its file's messages: its
// index among its parent's, for each message from the top level down.
func messageIndexes(d protoreflect.MessageDescriptor) []int {
	var path []int
	var x protoreflect.Descriptor = d
	for ; x != nil; x = x.Parent() {
		if _, ok := x.(protoreflect.MessageDescriptor); !ok {
			break
		}
		path = append(path, x.Index())
	}
	slices.Reverse(path)
	return path
}

// appendIndexes writes message indexes as Confluent's serializers do
// (AbstractKafkaProtobufSerializer; confluent-kafka-go's
// writeMessageIndexes): the single byte 0 for [0], else the count and the
// indexes as zigzag varints.
func appendIndexes(dst []byte, idx []int) []byte {
	if len(idx) == 1 && idx[0] == 0 {
		return append(dst, 0)
	}
	dst = binary.AppendVarint(dst, int64(len(idx)))
	for _, i := range idx {
		dst = binary.AppendVarint(dst, int64(i))
	}
	return dst
}

// readIndexes reads message indexes from the start of b: the indexes and
// how many bytes they took. A count of 0 is [0] (the shortcut).
func readIndexes(b []byte) ([]int, int, error) {
	n, k := binary.Varint(b)
	if k <= 0 || n < 0 || n > int64(len(b)) {
		return nil, 0, errors.New("no message indexes (a count, then the indexes, as zigzag varints)")
	}
	if n == 0 {
		return []int{0}, k, nil
	}
	idx := make([]int, n)
	for i := range idx {
		v, m := binary.Varint(b[k:])
		if m <= 0 || v < 0 {
			return nil, 0, fmt.Errorf("message index %d of %d is not a varint >= 0", i+1, n)
		}
		idx[i] = int(v)
		k += m
	}
	return idx, k, nil
}

// protoSerde writes and reads the Protobuf binary of T.
type protoSerde[T proto.Message] struct{ name string }

func (p protoSerde[T]) Fingerprint() string { return "protobuf:" + p.name }

func (p protoSerde[T]) Encode(dst []byte, v T) ([]byte, error) {
	return proto.MarshalOptions{}.MarshalAppend(dst, v)
}

func (p protoSerde[T]) Decode(b []byte) (T, error) {
	var zero T
	m := zero.ProtoReflect().Type().New().Interface().(T)
	if err := proto.Unmarshal(b, m); err != nil {
		return zero, fmt.Errorf("%s: %w", p.name, err)
	}
	return m, nil
}
