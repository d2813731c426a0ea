package registry_test

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/schemaregistry"
	"github.com/stretchr/testify/require"

	"github.com/kordproject/kord/serde/registry"
)

// The round trips with Java: a real registry (Apicurio Registry, its
// Confluent-compatible API) and Apicurio's Java Kafka serdes on the other
// side, both started or built by scripts/schema-registry.sh. Without
// KORD_SCHEMA_REGISTRY (the registry's base URL) and KORD_REGISTRY_JAVA
// (the Java side's classpath) these tests are skipped, or fail when
// KORD_REQUIRE_REGISTRY=1, as scripts/test.sh sets.
//
// Apicurio Registry hands out no GUIDs, so magic 1 and header ids are
// proven against the mock only (TestGUID, TestHeaderIDs).
const (
	envRegistry        = "KORD_SCHEMA_REGISTRY"
	envRegistryJava    = "KORD_REGISTRY_JAVA"
	envRequireRegistry = "KORD_REQUIRE_REGISTRY"
)

// realRegistry returns a client of the registry at KORD_SCHEMA_REGISTRY,
// configured as a user would (Java's property name), and that URL.
func realRegistry(t *testing.T) (*registry.Client, string) {
	t.Helper()
	url, cp := os.Getenv(envRegistry), os.Getenv(envRegistryJava)
	if url == "" || cp == "" {
		if os.Getenv(envRequireRegistry) == "1" {
			t.Fatalf("%s and %s must be set when %s=1: run scripts/schema-registry.sh start and java", envRegistry, envRegistryJava, envRequireRegistry)
		}
		t.Skipf("%s or %s not set (scripts/schema-registry.sh start and java print them)", envRegistry, envRegistryJava)
	}
	c, err := registry.New(map[string]string{"schema.registry.url": url + "/apis/ccompat/v7"})
	require.NoError(t, err)
	return c, url
}

// javaSide is the Java program (serde/registry/testdata/java), one JVM per
// test, spoken to a line at a time.
type javaSide struct {
	in     io.WriteCloser
	out    *bufio.Scanner
	stderr *bytes.Buffer
}

func startJava(t *testing.T, url string) *javaSide {
	t.Helper()
	cmd := exec.Command("java", "-cp", os.Getenv(envRegistryJava), "KordRegistry", url+"/apis/registry/v3")
	j := &javaSide{stderr: new(bytes.Buffer)}
	cmd.Stderr = j.stderr
	var err error
	j.in, err = cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	j.out = bufio.NewScanner(stdout)
	j.out.Buffer(nil, 1<<20)
	t.Cleanup(func() {
		j.in.Close()
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	return j
}

// call sends one command and returns the result, or the Java side's error.
func (j *javaSide) call(t *testing.T, fields ...string) (string, error) {
	t.Helper()
	_, err := fmt.Fprintln(j.in, strings.Join(fields, "\t"))
	require.NoError(t, err)
	if !j.out.Scan() {
		t.Fatalf("the Java side ended: %v\n%s", j.out.Err(), j.stderr)
	}
	status, result, _ := strings.Cut(j.out.Text(), "\t")
	if status != "ok" {
		return "", fmt.Errorf("java: %s", result)
	}
	return result, nil
}

// unique names a topic of this run: the registry outlives a test.
func unique(name string) string { return fmt.Sprintf("%s-%d", name, time.Now().UnixNano()) }

func oneLine(schema string) string { return strings.Join(strings.Fields(schema), " ") }

func schemaID(t *testing.T, b []byte) uint32 {
	t.Helper()
	require.GreaterOrEqual(t, len(b), 5)
	require.Equal(t, byte(0), b[0], "magic byte")
	return binary.BigEndian.Uint32(b[1:5])
}

// TestJavaAvro: records a Java service writes with Apicurio's
// AvroKafkaSerializer read in kord, and kord's read by its
// AvroKafkaDeserializer, through a real registry; the schema evolves
// compatibly (a field with a default), then incompatibly (one without),
// which the registry refuses once the subject is BACKWARD.
func TestJavaAvro(t *testing.T) {
	c, url := realRegistry(t)
	j := startJava(t, url)
	topic := unique("users")
	subject := topic + "-value"

	// Java to kord: the Java side registers v1 and writes under its id.
	h, err := j.call(t, "ser", "avro", topic, oneLine(userV1), `{"name":"ann","age":30}`)
	require.NoError(t, err)
	fromJava, err := hex.DecodeString(h)
	require.NoError(t, err)
	v1ID := schemaID(t, fromJava)
	s1, err := registry.Avro[user1](c, topic, userV1)
	require.NoError(t, err)
	got1, err := s1.Decode(fromJava)
	require.NoError(t, err)
	require.Equal(t, user1{Name: "ann", Age: 30}, got1)
	// A reader a version ahead: the new field takes its default.
	s2, err := registry.Avro[user2](c, topic, userV2)
	require.NoError(t, err)
	got2, err := s2.Decode(fromJava)
	require.NoError(t, err)
	require.Equal(t, user2{Name: "ann", Age: 30, Email: "none"}, got2)

	// kord to Java: kord registers v2 (the subject's second version,
	// allowed under BACKWARD) and Java reads it by the writer's schema.
	_, err = c.Registry().UpdateCompatibility(subject, schemaregistry.Backward)
	require.NoError(t, err)
	fromKord, err := s2.Encode(nil, user2{Name: "bob", Age: 41, Email: "bob@example.com"})
	require.NoError(t, err)
	require.NotEqual(t, v1ID, schemaID(t, fromKord), "v2 must be registered as a schema of its own")
	out, err := j.call(t, "de", "avro", topic, hex.EncodeToString(fromKord))
	require.NoError(t, err)
	require.JSONEq(t, `{"name":"bob","age":41,"email":"bob@example.com"}`, out)
	// Java's v1 record, read back in Java too, and kord's v2 by a v1 reader.
	out, err = j.call(t, "de", "avro", topic, h)
	require.NoError(t, err)
	require.JSONEq(t, `{"name":"ann","age":30}`, out)
	back1, err := s1.Decode(fromKord)
	require.NoError(t, err)
	require.Equal(t, user1{Name: "bob", Age: 41}, back1)

	// Incompatible: v3 adds a field without a default. The registry
	// refuses it from kord, naming the subject, and from Java.
	s3, err := registry.Avro[user3](c, topic, userV3)
	require.NoError(t, err)
	_, err = s3.Encode(nil, user3{Name: "cy", Age: 1, Plan: "pro"})
	require.Error(t, err)
	require.Contains(t, err.Error(), subject)
	_, err = j.call(t, "ser", "avro", topic, oneLine(userV3), `{"name":"cy","age":1,"plan":"pro"}`)
	require.Error(t, err, "the registry took an incompatible schema from Java")
	// And Java's v1 record does not resolve into v3: the error names the
	// subject and the writer's id.
	_, err = s3.Decode(fromJava)
	require.Error(t, err)
	require.Contains(t, err.Error(), subject)
	require.Contains(t, err.Error(), fmt.Sprint(v1ID))
}

// orderSchema is a JSON Schema; its title names the record.
const orderSchema = `{"$schema":"http://json-schema.org/draft-07/schema#","title":"kord.test.Order",
	"type":"object","properties":{"id":{"type":"string"},"qty":{"type":"integer"}},
	"required":["id","qty"],"additionalProperties":false}`

type order struct {
	ID  string `json:"id"`
	Qty int    `json:"qty"`
}

// TestJavaJSON: kord registers a JSON Schema and writes under it; Java's
// JsonSchemaKafkaDeserializer reads (validating against the schema), and
// Java's serializer, finding the subject's latest schema, writes what kord
// reads. The schema is the registry's, enforced: Java refuses a value
// without a required field.
func TestJavaJSON(t *testing.T) {
	c, url := realRegistry(t)
	j := startJava(t, url)
	topic := unique("orders")

	s, err := registry.JSON[order](c, topic, orderSchema)
	require.NoError(t, err)
	fromKord, err := s.Encode(nil, order{ID: "o1", Qty: 3})
	require.NoError(t, err)
	id := schemaID(t, fromKord)
	out, err := j.call(t, "de", "json", topic, hex.EncodeToString(fromKord))
	require.NoError(t, err)
	require.JSONEq(t, `{"id":"o1","qty":3}`, out)

	h, err := j.call(t, "ser", "json", topic, "-", `{"id":"o2","qty":7}`)
	require.NoError(t, err)
	fromJava, err := hex.DecodeString(h)
	require.NoError(t, err)
	require.Equal(t, id, schemaID(t, fromJava), "Java wrote under another schema than kord registered")
	got, err := s.Decode(fromJava)
	require.NoError(t, err)
	require.Equal(t, order{ID: "o2", Qty: 7}, got)

	_, err = j.call(t, "ser", "json", topic, "-", `{"id":"o3"}`)
	require.Error(t, err, "Java wrote a value its schema forbids")
}
