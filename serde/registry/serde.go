package registry

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/confluentinc/confluent-kafka-go/v2/schemaregistry"
	"github.com/google/uuid"

	"github.com/kordproject/kord/serde"
)

// ErrFormat is a payload not in Schema Registry's wire format.
var ErrFormat = errors.New("registry: not in Schema Registry's wire format")

// Avro returns a serde of T in Schema Registry's format for topic: values
// are written under schema (registered under its subject, see the Opts)
// and read from whatever schema of the subject's they were written under,
// by Avro's schema resolution into schema (serde.Avro's).
func Avro[T any](c *Client, topic, schema string, opts ...Opt) (serde.Serde[T], error) {
	reader, err := serde.Avro[T](schema)
	if err != nil {
		return nil, err
	}
	res, ok := reader.(serde.Resolver[T])
	if !ok {
		return nil, errors.New("registry: serde.Avro is not a serde.Resolver")
	}
	var named struct{ Type, Name, Namespace string }
	_ = json.Unmarshal([]byte(schema), &named)
	record := named.Name
	if named.Type == "record" && named.Namespace != "" && !containsDot(named.Name) {
		record = named.Namespace + "." + named.Name
	}
	if named.Type != "record" {
		record = ""
	}
	// The schema as given: a registry's lookup (and the mock's) matches
	// the text registered.
	f := format[T]{kind: "AVRO", schema: schema, reader: reader,
		writerOf: func(s string) (serde.Serde[T], error) { return serde.Avro[T](s) },
		resolve: func(writer string) (func([]byte) (T, error), error) {
			_, dec, err := res.Resolve(writer)
			return dec, err
		}}
	return newSerde(c, topic, record, f, configOf(opts))
}

// JSON returns a serde of T in Schema Registry's format for topic, its
// values JSON text (serde.JSON's), schema the JSON Schema registered for
// them (its title names the record for RecordName). Values are not
// validated against a schema; a value written under another schema of the
// subject is read as JSON into T.
func JSON[T any](c *Client, topic, schema string, opts ...Opt) (serde.Serde[T], error) {
	var titled struct{ Title string }
	if err := json.Unmarshal([]byte(schema), &titled); err != nil {
		return nil, fmt.Errorf("registry: JSON schema: %w", err)
	}
	reader := serde.JSON[T]()
	f := format[T]{kind: "JSON", schema: schema, reader: reader,
		writerOf: func(string) (serde.Serde[T], error) { return reader, nil },
		resolve:  func(string) (func([]byte) (T, error), error) { return reader.Decode, nil }}
	return newSerde(c, topic, titled.Title, f, configOf(opts))
}

func containsDot(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == '.' {
			return true
		}
	}
	return false
}

// format is what one schema type's serde does with its values.
type format[T any] struct {
	kind   string // the registry's schemaType: AVRO, JSON, PROTOBUF
	schema string
	reader serde.Serde[T]
	// indexes are a Protobuf message's path in its file, written after
	// the schema id (in the header, with HeaderIDs) and checked on read;
	// nil for the other formats.
	indexes []int
	// writerOf is the serde that writes under another schema (UseLatest,
	// UseVersion); resolve the decoder of values written under writer.
	writerOf func(schema string) (serde.Serde[T], error)
	resolve  func(writer string) (func([]byte) (T, error), error)
}

type regSerde[T any] struct {
	c       *Client
	subject string
	f       format[T]
	cfg     config

	mu      sync.Mutex
	prefix  []byte         // what each value written starts with, once known
	writer  serde.Serde[T] // what writes the values
	byID    map[int]func([]byte) (T, error)
	byGUID  map[uuid.UUID]func([]byte) (T, error)
	nameErr error
}

func newSerde[T any](c *Client, topic, record string, f format[T], cfg config) (serde.Serde[T], error) {
	subject, err := cfg.subject(topic, record)
	if err != nil {
		return nil, err
	}
	return &regSerde[T]{c: c, subject: subject, f: f, cfg: cfg, byID: map[int]func([]byte) (T, error){}, byGUID: map[uuid.UUID]func([]byte) (T, error){}}, nil
}

// Subject returns the subject the serde's schema is registered under.
func (s *regSerde[T]) Subject() string { return s.subject }

// Fingerprint implements serde.Serde.
func (s *regSerde[T]) Fingerprint() string {
	return "registry:" + s.f.kind + ":" + s.subject + ":" + s.f.reader.Fingerprint()
}

// Encode implements serde.Serde: the prefix of the schema it writes under
// (registered, looked up, or the subject's latest or given version, once),
// then the value.
func (s *regSerde[T]) Encode(dst []byte, v T) ([]byte, error) {
	s.mu.Lock()
	if s.prefix == nil {
		if err := s.resolveWriter(); err != nil {
			s.mu.Unlock()
			return dst, err
		}
	}
	prefix, writer := s.prefix, s.writer
	s.mu.Unlock()
	return writer.Encode(append(dst, prefix...), v)
}

// resolveWriter finds the schema Encode writes under; called with s.mu
// held.
func (s *regSerde[T]) resolveWriter() error {
	sr := s.c.sr
	info := schemaregistry.SchemaInfo{Schema: s.f.schema, SchemaType: s.f.kind}
	if s.f.kind == "AVRO" {
		info.SchemaType = "" // the registry's default, which it leaves out
	}
	var md schemaregistry.SchemaMetadata
	var err error
	writer := s.f.reader
	switch {
	case s.cfg.latest || s.cfg.version > 0:
		if s.cfg.latest {
			md, err = sr.GetLatestSchemaMetadata(s.subject)
		} else {
			md, err = sr.GetSchemaMetadata(s.subject, s.cfg.version)
		}
		if err == nil {
			writer, err = s.f.writerOf(md.Schema)
		}
	case s.cfg.autoRegister:
		md, err = sr.RegisterFullResponse(s.subject, info, false)
	default:
		md, err = sr.GetIDFullResponse(s.subject, info, false)
		if err != nil {
			err = fmt.Errorf("%w (the schema is not registered, and AutoRegister is off)", err)
		}
	}
	if err != nil {
		return fmt.Errorf("registry: %s: subject %s: %w", s.c.where, s.subject, err)
	}
	if s.cfg.guid {
		g, err := uuid.Parse(md.GUID)
		if err != nil {
			return fmt.Errorf("registry: %s: subject %s: schema id %d has no GUID (%q): the registry does not give GUIDs; write ids (without WriteGUID)", s.c.where, s.subject, md.ID, md.GUID)
		}
		s.prefix = append([]byte{1}, g[:]...)
	} else {
		s.prefix = binary.BigEndian.AppendUint32([]byte{0}, uint32(md.ID))
	}
	if s.f.indexes != nil {
		s.prefix = appendIndexes(s.prefix, s.f.indexes)
	}
	s.writer = writer
	return nil
}

var _ serde.HeaderSerde[int] = (*regSerde[int])(nil)

// EncodeHeaders implements serde.HeaderSerde: with HeaderIDs, the bare
// value and the header naming its schema; else Encode's.
func (s *regSerde[T]) EncodeHeaders(dst []byte, v T) ([]byte, []serde.Header, error) {
	if !s.cfg.headers {
		out, err := s.Encode(dst, v)
		return out, nil, err
	}
	s.mu.Lock()
	if s.prefix == nil {
		if err := s.resolveWriter(); err != nil {
			s.mu.Unlock()
			return dst, nil, err
		}
	}
	prefix, writer := s.prefix, s.writer
	s.mu.Unlock()
	out, err := writer.Encode(dst, v)
	if err != nil {
		return dst, nil, err
	}
	return out, []serde.Header{{Key: s.cfg.header(), Value: prefix}}, nil
}

// DecodeHeaders implements serde.HeaderSerde: the schema named by the
// record's header when it has one (the value is then bare), else by the
// value's prefix. A header that names no schema is an error naming it.
func (s *regSerde[T]) DecodeHeaders(headers []serde.Header, b []byte) (T, error) {
	var zero T
	var h []byte
	for _, x := range headers {
		if x.Key == s.cfg.header() && len(x.Value) > 0 {
			h = x.Value // the last one, as Java's lastHeader
		}
	}
	if h == nil {
		return s.Decode(b)
	}
	var id int
	g := uuid.Nil
	n := 0
	switch {
	case h[0] == 0 && len(h) >= 5:
		id, n = int(binary.BigEndian.Uint32(h[1:5])), 5
	case h[0] == 1 && len(h) >= 17:
		g, _ = uuid.FromBytes(h[1:17])
		n = 17
	}
	if n > 0 {
		k, err := s.indexes(h[n:], id, g)
		if err != nil {
			return zero, err
		}
		n += k
	}
	if n == 0 || n != len(h) {
		return zero, fmt.Errorf("%w: subject %s: header %s (%x) names no schema (want magic byte 0 and an id, or 1 and a GUID)", ErrFormat, s.subject, s.cfg.header(), h)
	}
	dec, err := s.decoder(id, g)
	if err != nil {
		return zero, err
	}
	v, err := dec(b)
	if err != nil {
		return zero, fmt.Errorf("registry: subject %s: the schema header %s names: %w", s.subject, s.cfg.header(), err)
	}
	return v, nil
}

// Decode implements serde.Serde: the schema the value was written under,
// by its id or GUID, and the value read from it.
func (s *regSerde[T]) Decode(b []byte) (T, error) {
	var zero T
	if len(b) == 0 {
		return zero, fmt.Errorf("%w: subject %s: an empty value", ErrFormat, s.subject)
	}
	switch b[0] {
	case 0:
		if len(b) < 5 {
			return zero, fmt.Errorf("%w: subject %s: %d bytes, too short for magic byte 0 and a schema id", ErrFormat, s.subject, len(b))
		}
		id := int(binary.BigEndian.Uint32(b[1:5]))
		dec, err := s.decoder(id, uuid.Nil)
		if err != nil {
			return zero, err
		}
		k, err := s.indexes(b[5:], id, uuid.Nil)
		if err != nil {
			return zero, err
		}
		v, err := dec(b[5+k:])
		if err != nil {
			return zero, fmt.Errorf("registry: subject %s: schema id %d: %w", s.subject, id, err)
		}
		return v, nil
	case 1:
		if len(b) < 17 {
			return zero, fmt.Errorf("%w: subject %s: %d bytes, too short for magic byte 1 and a schema GUID", ErrFormat, s.subject, len(b))
		}
		g, _ := uuid.FromBytes(b[1:17])
		dec, err := s.decoder(0, g)
		if err != nil {
			return zero, err
		}
		k, err := s.indexes(b[17:], 0, g)
		if err != nil {
			return zero, err
		}
		v, err := dec(b[17+k:])
		if err != nil {
			return zero, fmt.Errorf("registry: subject %s: schema GUID %s: %w", s.subject, g, err)
		}
		return v, nil
	}
	return zero, fmt.Errorf("%w: subject %s: magic byte 0x%02x (want 0, a schema id, or 1, a GUID)", ErrFormat, s.subject, b[0])
}

// indexes reads a Protobuf value's message indexes from the start of b
// and checks they are the serde's message's: how many bytes they took (0
// for the other formats, which have none).
func (s *regSerde[T]) indexes(b []byte, id int, g uuid.UUID) (int, error) {
	if s.f.indexes == nil {
		return 0, nil
	}
	what := fmt.Sprintf("schema id %d", id)
	if id == 0 {
		what = "schema GUID " + g.String()
	}
	idx, k, err := readIndexes(b)
	if err != nil {
		return 0, fmt.Errorf("%w: subject %s: %s: %v", ErrFormat, s.subject, what, err)
	}
	if !slices.Equal(idx, s.f.indexes) {
		return 0, fmt.Errorf("registry: subject %s: %s: the value is the message at indexes %v of its schema, not this serde's %s (%v)", s.subject, what, idx, s.f.reader.Fingerprint(), s.f.indexes)
	}
	return k, nil
}

// decoder returns the decoder of values written under schema id (or
// GUID), fetched from the registry once.
func (s *regSerde[T]) decoder(id int, g uuid.UUID) (func([]byte) (T, error), error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if dec := s.byID[id]; id != 0 && dec != nil {
		return dec, nil
	}
	if dec := s.byGUID[g]; g != uuid.Nil && dec != nil {
		return dec, nil
	}
	var info schemaregistry.SchemaInfo
	var err error
	what := fmt.Sprintf("schema id %d", id)
	if id != 0 {
		info, err = s.c.sr.GetBySubjectAndID(s.subject, id)
	} else {
		what = "schema GUID " + g.String()
		info, err = s.c.sr.GetByGUID(g.String())
	}
	if err != nil {
		return nil, fmt.Errorf("registry: %s: subject %s: %s: %w", s.c.where, s.subject, what, err)
	}
	if info.SchemaType != "" && info.SchemaType != s.f.kind || info.SchemaType == "" && s.f.kind != "AVRO" {
		return nil, fmt.Errorf("registry: subject %s: %s is a %s schema, not %s", s.subject, what, schemaType(info.SchemaType), s.f.kind)
	}
	dec, err := s.f.resolve(info.Schema)
	if err != nil {
		return nil, fmt.Errorf("registry: subject %s: %s: its values cannot be read as this serde's: %w", s.subject, what, err)
	}
	if id != 0 {
		s.byID[id] = dec
	} else {
		s.byGUID[g] = dec
	}
	return dec, nil
}

// schemaType is a registry's schemaType, AVRO when empty (the registry's
// default).
func schemaType(t string) string {
	if t == "" {
		return "AVRO"
	}
	return t
}
