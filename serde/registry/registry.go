// Package registry reads and writes records in Confluent Schema Registry's
// wire format, the one most Kafka shops' Java services write, as
// serde.Serdes a kord source or sink takes:
//
//	magic 0:  0x00, the schema id (4 bytes, big-endian), the value
//	magic 1:  0x01, the schema's GUID (16 bytes), the value
//
// (Confluent's serializers, AbstractKafkaSchemaSerDe; confluent-kafka-go's
// schemaregistry/serde, serde.go). [Avro] values are Avro binary, read and
// written by package serde's Avro serdes, so a value written under another
// schema of its subject is read by Avro's schema resolution; [JSON] values
// are JSON text.
//
// The registry is reached through confluent-kafka-go's schemaregistry
// client (already kord's dependency), and only the client: its serdes are
// built on other Avro libraries (hamba/avro, gogen-avro), take the topic and
// an interface{} at every call, and panic on a short payload.
//
// A record that cannot be read (a bad magic byte, an unknown id, a schema
// that does not resolve) is an error naming the subject and the id, which
// a kord source hands to its dead letters with the record's topic,
// partition and offset. The engine's own state schemas never come from a
// registry.
//
// Schema ids travel in the value's first bytes, or in the record's headers
// ([HeaderIDs]; a kord source and sink hand [serde.HeaderSerde] the headers).
//
// Proven on confluent-kafka-go's mock registry, and against a real one with
// Java on the other side: Apicurio Registry's Confluent API and Apicurio's
// Java Kafka serdes (scripts/schema-registry.sh), for Avro and JSON.
// Apicurio gives no GUIDs, so magic 1 and header ids are proven on the mock
// only. [Protobuf] (generated messages, their .proto text registered; the
// message indexes after the id) is proven on the mock only. Not built: JSON
// Schema validation in kord (Confluent's Java serializer does not validate
// by default either; the Java side of the tests validates what kord
// writes), and Protobuf schemas with references (imports).
package registry

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/confluentinc/confluent-kafka-go/v2/schemaregistry"
)

// Client is a Schema Registry (Confluent's REST API; Apicurio's ccompat
// API too).
type Client struct {
	sr    schemaregistry.Client
	where string // the URL, for errors
}

// New returns a client configured by Java's property names, as a Java
// serializer's are: schema.registry.url (required; several, comma-
// separated), basic.auth.credentials.source (USER_INFO or URL) with
// basic.auth.user.info, and TLS: schema.registry.ssl.truststore.location
// (a PEM file of the CAs; truststore.type PEM),
// schema.registry.ssl.keystore.location (a PEM file of the client's
// certificate and key; keystore.type PEM), and
// schema.registry.ssl.endpoint.identification.algorithm ("" turns host
// name checks off). A JKS or PKCS12 store is refused, and a store without
// a type is read only if it is PEM (Java's default type is JKS). Every
// other setting is refused, naming it: a Java serializer's own
// (auto.register.schemas, the subject strategies, use.latest.version)
// with the serde's Opt that says the same.
func New(props map[string]string) (*Client, error) {
	url := props["schema.registry.url"]
	if url == "" {
		return nil, errors.New("registry: schema.registry.url is not set")
	}
	cfg := schemaregistry.NewConfig(url)
	switch src := strings.ToUpper(props["basic.auth.credentials.source"]); src {
	case "":
	case "USER_INFO":
		info := props["basic.auth.user.info"]
		if info == "" {
			info = props["schema.registry.basic.auth.user.info"]
		}
		if !strings.Contains(info, ":") {
			return nil, errors.New("registry: basic.auth.credentials.source=USER_INFO needs basic.auth.user.info=<user>:<password>")
		}
		cfg.BasicAuthCredentialsSource, cfg.BasicAuthUserInfo = "USER_INFO", info
	case "URL":
		cfg.BasicAuthCredentialsSource = "URL"
	default:
		return nil, fmt.Errorf("registry: basic.auth.credentials.source=%s is not supported (USER_INFO or URL)", src)
	}
	for _, k := range slices.Sorted(maps.Keys(props)) {
		v := props[k]
		rest, ok := strings.CutPrefix(k, "schema.registry.ssl.")
		if !ok {
			switch k {
			case "schema.registry.url", "basic.auth.credentials.source", "basic.auth.user.info", "schema.registry.basic.auth.user.info":
			default:
				if opt, ok := serdeSettings[k]; ok {
					return nil, fmt.Errorf("registry: %s is a serde's setting here, not the client's: %s", k, opt)
				}
				return nil, fmt.Errorf("registry: %s is not supported (the client takes schema.registry.url, basic.auth.* and schema.registry.ssl.*)", k)
			}
			continue
		}
		switch rest {
		case "truststore.location":
			if err := pemFile(k, v, props["schema.registry.ssl.truststore.type"]); err != nil {
				return nil, err
			}
			cfg.SslCaLocation = v
		case "keystore.location":
			if err := pemFile(k, v, props["schema.registry.ssl.keystore.type"]); err != nil {
				return nil, err
			}
			cfg.SslCertificateLocation, cfg.SslKeyLocation = v, v // one PEM file: its certificate and its key
		case "truststore.type", "keystore.type":
			if !strings.EqualFold(v, "PEM") {
				return nil, fmt.Errorf("registry: %s=%s: only PEM stores are read (convert it: keytool -exportcert -rfc, or openssl pkcs12)", k, v)
			}
		case "endpoint.identification.algorithm":
			cfg.SslDisableEndpointVerification = v == ""
		default:
			return nil, fmt.Errorf("registry: %s is not supported", k)
		}
	}
	if cfg.SslCertificateLocation != "" {
		if _, err := tls.LoadX509KeyPair(cfg.SslCertificateLocation, cfg.SslKeyLocation); err != nil {
			return nil, fmt.Errorf("registry: schema.registry.ssl.keystore.location %s: %w", cfg.SslCertificateLocation, err)
		}
	}
	sr, err := schemaregistry.NewClient(cfg)
	if err != nil {
		return nil, fmt.Errorf("registry: %s: %w", url, err)
	}
	return &Client{sr: sr, where: url}, nil
}

// serdeSettings are the Java serializers' settings that are a serde's
// options here, with the option that says the same.
var serdeSettings = map[string]string{
	"auto.register.schemas":       "registry.AutoRegister",
	"use.latest.version":          "registry.UseLatest",
	"use.schema.id":               "not supported: kord writes under the serde's schema, the latest or a version (registry.UseVersion)",
	"key.subject.name.strategy":   "registry.SubjectStrategy with registry.Key",
	"value.subject.name.strategy": "registry.SubjectStrategy",
	"normalize.schemas":           "not supported: the schema is registered as given",
	"latest.compatibility.strict": "not supported",
	"json.fail.invalid.schema":    "not supported: kord does not validate JSON values against their schema",
}

// pemFile checks that a store named by setting k is a PEM file: Java's
// default store type is JKS, which kord does not read, so a store without
// a type is read only if it is PEM.
func pemFile(k, path, typ string) error {
	if typ != "" {
		return nil // checked as the type's own setting
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("registry: %s: %w", k, err)
	}
	if !bytes.Contains(b, []byte("-----BEGIN ")) {
		return fmt.Errorf("registry: %s=%s is not a PEM file (Java's default store type is JKS, which kord does not read): convert it (keytool -exportcert -rfc, or openssl pkcs12) and set its type to PEM", k, path)
	}
	return nil
}

// Of wraps a client of confluent-kafka-go's schemaregistry package: the
// mock one (NewClient with a mock:// URL) in tests, say.
func Of(c schemaregistry.Client, where string) *Client { return &Client{sr: c, where: where} }

// Registry returns the schemaregistry client underneath.
func (c *Client) Registry() schemaregistry.Client { return c.sr }

// Strategy names a subject for a topic and a schema (Confluent's subject
// name strategies).
type Strategy int

const (
	// TopicName: <topic>-value, or <topic>-key (Key). The default.
	TopicName Strategy = iota
	// RecordName: the record's full name (an Avro record's namespace and
	// name; a JSON schema's title).
	RecordName
	// TopicRecordName: <topic>-<the record's full name>.
	TopicRecordName
)

// Opt configures a serde.
type Opt func(*config)

type config struct {
	key          bool
	strategy     Strategy
	autoRegister bool
	latest       bool
	version      int
	guid         bool
	headers      bool
}

// Key makes the serde the key's: subject <topic>-key under TopicName.
func Key() Opt { return func(c *config) { c.key = true } }

// SubjectStrategy sets how the subject is named. Default TopicName.
func SubjectStrategy(s Strategy) Opt { return func(c *config) { c.strategy = s } }

// AutoRegister sets whether the serde registers its schema under its
// subject when it first writes (Java's auto.register.schemas, true by
// default); without, the schema must be registered already, and the
// first write fails naming the subject if it is not.
func AutoRegister(on bool) Opt { return func(c *config) { c.autoRegister = on } }

// UseLatest writes under the subject's latest schema instead of the
// serde's own (Java's use.latest.version): the values must be writable
// under it.
func UseLatest() Opt { return func(c *config) { c.latest = true } }

// UseVersion writes under version v of the subject's schemas.
func UseVersion(v int) Opt { return func(c *config) { c.version = v } }

// WriteGUID writes magic byte 1 and the schema's GUID instead of magic 0
// and its id (Confluent's newer format; the registry must give GUIDs).
func WriteGUID() Opt { return func(c *config) { c.guid = true } }

// HeaderIDs names the schema in the record's header instead of the value's
// first bytes (Confluent's HeaderSchemaIDSerializer): __value_schema_id
// (__key_schema_id with Key) holds magic byte 1 and the schema's GUID, and
// the value is the bare Avro or JSON. A kord sink writes so; through plain
// Encode, which has no headers, the serde writes the prefix instead. Reads
// take a header when the record has one, else the prefix (Confluent's
// DualSchemaIDDeserializer), whatever this option.
func HeaderIDs() Opt { return func(c *config) { c.headers, c.guid = true, true } }

// The headers that name a record's schemas (Confluent's serde.go,
// KeySchemaIDHeader and ValueSchemaIDHeader).
const (
	KeySchemaIDHeader   = "__key_schema_id"
	ValueSchemaIDHeader = "__value_schema_id"
)

func (c config) header() string {
	if c.key {
		return KeySchemaIDHeader
	}
	return ValueSchemaIDHeader
}

func configOf(opts []Opt) config {
	c := config{autoRegister: true}
	for _, o := range opts {
		o(&c)
	}
	return c
}

// subject names the subject of topic for a schema whose record is named
// record.
func (c config) subject(topic, record string) (string, error) {
	part := "-value"
	if c.key {
		part = "-key"
	}
	switch c.strategy {
	case TopicName:
		return topic + part, nil
	case RecordName, TopicRecordName:
		if record == "" {
			return "", errors.New("registry: RecordName and TopicRecordName need a named record (an Avro record, a JSON schema with a title)")
		}
		if c.strategy == RecordName {
			return record, nil
		}
		return topic + "-" + record, nil
	}
	return "", fmt.Errorf("registry: unknown subject strategy %d", c.strategy)
}
