package security_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/kordproject/kord/admin"
	"github.com/kordproject/kord/cluster"
	"github.com/kordproject/kord/kafkaio"
	"github.com/kordproject/kord/producer"
	"github.com/kordproject/kord/serde"
)

// A Java client's client.properties, mapped to librdkafka's settings by
// cluster.New. New opens no connection, so this runs without a broker.
func Example_properties() {
	dir := tempDir()
	defer os.RemoveAll(dir)
	props := filepath.Join(dir, "client.properties")
	// snippet:properties
	must(os.WriteFile(props, []byte(`
bootstrap.servers=broker1.example.com:9093
security.protocol=SASL_SSL
sasl.mechanism=SCRAM-SHA-512
sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \
    username="uri-counts" password="s3cret";
`), 0o600))

	kafka, err := cluster.New(
		cluster.Properties(props),              // the Java or Flink client's file
		cluster.Set("client.id", "uri-counts"), // librdkafka's names; later options override
	)
	if err != nil { // a refused property, an unreadable store or keytab, GSSAPI missing
		log.Fatal(err)
	}
	fmt.Println(kafka) // String redacts the secrets; Settings returns them
	// snippet:end

	// Output:
	// bootstrap.servers=broker1.example.com:9093 client.id=uri-counts sasl.mechanisms=SCRAM-SHA-512 sasl.password=[redacted] sasl.username=uri-counts security.protocol=sasl_ssl
}

// A Java property with no librdkafka equivalent is refused, naming the
// file, the line and what to use instead.
func Example_refused() {
	dir := tempDir()
	defer os.RemoveAll(dir)
	props := filepath.Join(dir, "client.properties")
	must(os.WriteFile(props, []byte("bootstrap.servers=broker1.example.com:9092\nmax.block.ms=60000\n"), 0o600))
	// snippet:refused
	_, err := cluster.New(cluster.Properties(props))
	fmt.Println(errors.Is(err, cluster.ErrConfig))
	// snippet:end
	fmt.Println(strings.ReplaceAll(err.Error(), dir+string(filepath.Separator), ""))
	// Output:
	// true
	// cluster: invalid configuration: client property refused: client.properties:2: max.block.ms: no librdkafka equivalent: kord's calls wait as long as their context allows
}

// One cluster configuration for a job's sources and sinks, a producer and
// an admin client. It needs a secured broker, so go test compiles it and
// does not run it.
func Example_clients() {
	type Event struct{ User string }
	// snippet:clients
	kafka, err := cluster.New(cluster.Properties("/etc/kord/client.properties"))
	if err != nil {
		log.Fatal(err)
	}
	client, err := kafkaio.NewClient(kafkaio.Cluster(kafka)) // a job's sources and sinks
	if err != nil {
		log.Fatal(err)
	}
	p, err := producer.New(serde.String(), serde.JSON[Event](), producer.Cluster(kafka)) // a producer of the same cluster
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()
	a, err := admin.New(admin.Cluster(kafka)) // its admin requests
	if err != nil {
		log.Fatal(err)
	}
	defer a.Close()
	// snippet:end
	_ = client
}

// The same settings by librdkafka's names, without a properties file.
// They need a secured broker: compiled, not run.
func Example_settings() {
	// snippet:tls
	// TLS with a client certificate (mTLS), PEM files.
	mtls, err := cluster.New(cluster.Brokers("broker1.example.com:9093"),
		cluster.Set("security.protocol", "ssl"),
		cluster.Set("ssl.ca.location", "/etc/kord/tls/ca.pem"),
		cluster.Set("ssl.certificate.location", "/etc/kord/tls/client-cert.pem"),
		cluster.Set("ssl.key.location", "/etc/kord/tls/client-key.pem"))
	// snippet:end
	// snippet:sasl
	// SASL SCRAM over TLS; for PLAIN, sasl.mechanisms PLAIN.
	scram, err := cluster.New(cluster.Brokers("broker1.example.com:9093"),
		cluster.Set("security.protocol", "sasl_ssl"),
		cluster.Set("sasl.mechanisms", "SCRAM-SHA-512"),
		cluster.Set("sasl.username", "uri-counts"),
		cluster.Set("sasl.password", os.Getenv("KAFKA_PASSWORD")))

	// OAUTHBEARER with an OIDC token endpoint (client credentials).
	oauth, err := cluster.New(cluster.Brokers("broker1.example.com:9093"),
		cluster.Set("security.protocol", "sasl_ssl"),
		cluster.Set("sasl.mechanisms", "OAUTHBEARER"),
		cluster.Set("sasl.oauthbearer.method", "oidc"),
		cluster.Set("sasl.oauthbearer.token.endpoint.url", "https://login.example.com/oauth2/token"),
		cluster.Set("sasl.oauthbearer.client.id", "uri-counts"),
		cluster.Set("sasl.oauthbearer.client.secret", os.Getenv("OAUTH_SECRET")))
	// snippet:end
	// snippet:kerberos
	// GSSAPI (Kerberos) with a keytab: needs a program built with
	// -tags dynamic against a librdkafka that has GSSAPI.
	kerberos, err := cluster.New(cluster.Brokers("broker1.example.com:9093"),
		cluster.Set("security.protocol", "sasl_ssl"),
		cluster.Set("sasl.mechanisms", "GSSAPI"),
		cluster.Set("sasl.kerberos.service.name", "kafka"),
		cluster.Set("sasl.kerberos.keytab", "/etc/security/keytabs/kord.keytab"),
		cluster.Set("sasl.kerberos.principal", "kord-client@EXAMPLE.COM"))
	// snippet:end
	fmt.Println(mtls, scram, oauth, kerberos, err)
}

// How a refusal surfaces: a job stops (no restart) with an error that
// says why; a client's call fails with one of the shared error values.
// Needs a secured broker: compiled, not run.
func Example_errors() {
	client, _ := kafkaio.NewClient(kafkaio.Properties("/etc/kord/client.properties"))
	// snippet:errors
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	a, err := admin.New(admin.Cluster(client.Cluster()))
	if err != nil {
		log.Fatal(err)
	}
	defer a.Close()
	_, err = a.Partitions(ctx, "access-log")
	switch {
	case errors.Is(err, admin.ErrAuth): // credentials or TLS refused: the same value as producer.ErrAuth
		log.Fatalf("refused by the cluster: %v", err)
	case errors.Is(err, admin.ErrUnreachable): // no broker answered within the request timeout
		log.Fatalf("cluster unreachable: %v", err)
	case err != nil:
		log.Fatal(err)
	}
	// snippet:end
}

func tempDir() string {
	d, err := os.MkdirTemp("", "security")
	must(err)
	return d
}

func must(err error) {
	if err != nil {
		log.Fatal(err)
	}
}
