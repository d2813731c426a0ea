package interop_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"log"
	"os"
	"sort"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/schemaregistry"

	"github.com/kordproject/kord/admin"
	"github.com/kordproject/kord/consumer"
	"github.com/kordproject/kord/kafkaio"
	"github.com/kordproject/kord/keyed"
	"github.com/kordproject/kord/kordtest"
	"github.com/kordproject/kord/partitioner"
	"github.com/kordproject/kord/producer"
	"github.com/kordproject/kord/serde"
	"github.com/kordproject/kord/serde/registry"
)

// Where three clients put the same keys in a topic of 6 partitions.
func Example_placement() {
	// snippet:rules
	for _, key := range []string{"ana", "bo", "cy", "user-17"} {
		k := []byte(key)
		fmt.Printf("%-8s java %d  sarama %d  consistent %d\n", key,
			partitioner.Java.Partition(k, 6),       // Java, franz-go, librdkafka murmur2
			partitioner.SaramaHash.Partition(k, 6), // sarama's default, goka, librdkafka fnv1a
			partitioner.Consistent.Partition(k, 6)) // librdkafka consistent (and its default for non-empty keys)
	}
	rule, ok := partitioner.RuleNamed("murmur2_random") // librdkafka's partitioner setting
	fmt.Println(rule.Name(), ok)
	// snippet:end

	// Output:
	// ana      java 4  sarama 3  consistent 0
	// bo       java 4  sarama 2  consistent 5
	// cy       java 4  sarama 1  consistent 5
	// user-17  java 0  sarama 5  consistent 1
	// java true
}

// snippet:types
// UserV1 is the first version of a record other services write.
type UserV1 struct {
	Name string `json:"name"`
	Age  int32  `json:"age"`
}

// UserV2 adds a field with a default.
type UserV2 struct {
	Name  string `json:"name"`
	Age   int32  `json:"age"`
	Email string `json:"email"`
}

const userV1 = `{"type":"record","name":"User","namespace":"shop","fields":[
	{"name":"name","type":"string"},{"name":"age","type":"int"}]}`

const userV2 = `{"type":"record","name":"User","namespace":"shop","fields":[
	{"name":"name","type":"string"},{"name":"age","type":"int"},
	{"name":"email","type":"string","default":"none"}]}`

// snippet:end

// A record written in Schema Registry's format under version 1 of a
// schema, and read by a serde of version 2: the registry is
// confluent-kafka-go's mock, which needs no server.
func Example_registry() {
	// snippet:registry
	sr, err := schemaregistry.NewClient(schemaregistry.NewConfig("mock://interop"))
	if err != nil {
		log.Fatal(err)
	}
	reg := registry.Of(sr, "mock://interop") // registry.New(props) for a real one

	v1, err := registry.Avro[UserV1](reg, "users", userV1) // subject users-value
	if err != nil {
		log.Fatal(err)
	}
	b, err := v1.Encode(nil, UserV1{Name: "ada", Age: 36}) // registers v1 on the first write
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("magic %d, schema id %d, %d bytes of Avro\n", b[0], binary.BigEndian.Uint32(b[1:5]), len(b[5:]))

	v2, err := registry.Avro[UserV2](reg, "users", userV2)
	if err != nil {
		log.Fatal(err)
	}
	u, err := v2.Decode(b) // v1's schema fetched by id, resolved into v2's
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%+v\n", u)
	// snippet:end

	// Output:
	// magic 0, schema id 1, 5 bytes of Avro
	// {Name:ada Age:36 Email:none}
}

// Kord's clients on their own: the admin client creates a topic, a
// transactional producer writes to it keyed for goka's consumers (sarama's
// placement), and a consumer reads it back as read_committed.
func Example_clients() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cluster, err := kordtest.NewCluster()
	if err != nil {
		log.Fatal(err)
	}
	defer cluster.Close()
	brokers := cluster.Brokers()

	// snippet:admin
	a, err := admin.New(admin.Brokers(brokers...))
	if err != nil {
		log.Fatal(err)
	}
	defer a.Close()
	if _, err := a.CreateTopic(ctx, "orders", 4, map[string]string{"retention.ms": "604800000"}); err != nil {
		log.Fatal(err)
	}
	// snippet:end

	// snippet:producer
	p, err := producer.New(serde.String(), serde.String(), producer.Brokers(brokers...),
		producer.Partitioner(partitioner.ByRule{Rule: partitioner.SaramaHash}), // where goka looks for a key
		producer.TransactionalID("orders-writer"))
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()
	if err := p.InitTransactions(ctx); err != nil {
		log.Fatal(err)
	}
	for _, value := range []string{"kept", "dropped"} {
		if err := p.BeginTransaction(); err != nil {
			log.Fatal(err)
		}
		for _, user := range []string{"ana", "bo", "cy"} {
			r := producer.Record[string, string]{Topic: "orders", Key: user, Value: value}
			if err := p.Produce(ctx, r, nil); err != nil {
				log.Fatal(err)
			}
		}
		if value == "kept" {
			err = p.CommitTransaction(ctx)
		} else {
			err = p.AbortTransaction(ctx)
		}
		if err != nil {
			log.Fatal(err)
		}
	}
	// snippet:end

	// snippet:consumer
	src, err := consumer.New(consumer.Brokers(brokers...)) // read_committed; commits nothing
	if err != nil {
		log.Fatal(err)
	}
	defer src.Close()
	start, err := src.Resolve(ctx, "orders", consumer.Earliest)
	if err != nil {
		log.Fatal(err)
	}
	if err := src.Assign(ctx, start); err != nil {
		log.Fatal(err)
	}
	ends, err := src.Ends(ctx)
	if err != nil {
		log.Fatal(err)
	}
	var lines []string
	for !src.Reached(ends) {
		recs, err := src.Poll(ctx, 100, 100*time.Millisecond)
		if err != nil {
			log.Fatal(err)
		}
		for _, r := range recs {
			lines = append(lines, fmt.Sprintf("%s %s in partition %d", r.Key, r.Value, r.Partition))
		}
	}
	// snippet:end
	sort.Strings(lines)
	for _, l := range lines {
		fmt.Println(l)
	}

	// Output:
	// ana kept in partition 1
	// bo kept in partition 2
	// cy kept in partition 1
}

// A kord job between goka services: its input was written by sarama's
// rule, which the source checks, and its output is placed by the same
// rule, where goka's processors look for each key.
func Example_gokaNeighbours() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cluster, err := kordtest.NewCluster(kordtest.Topic("clicks", 4), kordtest.Topic("click-counts", 4))
	if err != nil {
		log.Fatal(err)
	}
	defer cluster.Close()
	p, err := producer.New(serde.String(), serde.String(), producer.Brokers(cluster.Brokers()...),
		producer.Partitioner(partitioner.ByRule{Rule: partitioner.SaramaHash}))
	if err != nil {
		log.Fatal(err)
	}
	for _, user := range []string{"ana", "bo", "ana", "cy", "ana"} {
		if err := p.Produce(ctx, producer.Record[string, string]{Topic: "clicks", Key: user, Value: "click"}, nil); err != nil {
			log.Fatal(err)
		}
	}
	if err := p.Flush(ctx); err != nil {
		log.Fatal(err)
	}
	p.Close()
	client, err := cluster.Client()
	if err != nil {
		log.Fatal(err)
	}
	dir, _ := os.MkdirTemp("", "goka-")
	defer os.RemoveAll(dir)

	// snippet:job
	job := keyed.NewJob("click-counts", keyed.Dir(dir), keyed.CheckpointInterval(100*time.Millisecond))
	clicks := keyed.FromSource(job, "clicks", 0, kafkaio.NewSource(client, "clicks", serde.String(),
		kafkaio.CheckPlacement(partitioner.SaramaHash, true), // fail at a key in another partition
		kafkaio.Bounded()))
	counts := keyed.ProcessValue(keyed.ByPartition(clicks), "count", 0, serde.Int64(),
		func(user []byte, _ string, n *keyed.ValueState[int64], out *keyed.Collector[UserCount]) error {
			c, _ := n.Get()
			n.Set(c + 1)
			out.Emit(UserCount{User: string(user), Count: c + 1})
			return nil
		})
	keyed.ToSink(counts, "counts", kafkaio.NewSink(client, "click-counts", serde.JSON[UserCount](),
		kafkaio.Key(func(c UserCount) string { return c.User }, serde.String()),
		kafkaio.Placement(partitioner.SaramaHash))) // where goka's consumers look
	// snippet:end
	if err := job.Run(ctx); err != nil {
		log.Fatal(err)
	}
	for _, r := range readBack(ctx, cluster, "click-counts") {
		fmt.Printf("%s in partition %d (sarama: %d)\n", r.Value, r.Partition, partitioner.SaramaHash.Partition(r.Key, 4))
	}

	// Output:
	// {"user":"ana","count":1} in partition 1 (sarama: 1)
	// {"user":"ana","count":2} in partition 1 (sarama: 1)
	// {"user":"cy","count":1} in partition 1 (sarama: 1)
	// {"user":"ana","count":3} in partition 1 (sarama: 1)
	// {"user":"bo","count":1} in partition 2 (sarama: 2)
}

// readBack reads topic to its end as kordtest.ReadCommitted does, but
// waits 10 ms instead of librdkafka's 500 ms for each empty fetch: the last
// offsets of a transactional topic are commit markers, and finding them
// takes a few empty fetches.
func readBack(ctx context.Context, c *kordtest.Cluster, topic string) []consumer.Record {
	src, err := consumer.New(consumer.Brokers(c.Brokers()...), consumer.Set("fetch.wait.max.ms", "10"))
	if err != nil {
		log.Fatal(err)
	}
	defer src.Close()
	start, err := src.Resolve(ctx, topic, consumer.Earliest)
	if err != nil {
		log.Fatal(err)
	}
	if err := src.Assign(ctx, start); err != nil {
		log.Fatal(err)
	}
	ends, err := src.Ends(ctx)
	if err != nil {
		log.Fatal(err)
	}
	var out []consumer.Record
	for !src.Reached(ends) {
		recs, err := src.Poll(ctx, 100, 10*time.Millisecond)
		if err != nil {
			log.Fatal(err)
		}
		out = append(out, recs...)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Partition < out[j].Partition })
	return out
}

// UserCount is how many clicks a user has made so far.
type UserCount struct {
	User  string `json:"user"`
	Count int64  `json:"count"`
}

// A job that reads users other services write in Schema Registry's Avro
// format, under either version of the schema, and writes the adults among
// them in the same format with the schema's id in a header. Not run: it
// needs a registry server and a broker.
func Example_registryJob() {
	ctx := context.Background()
	// snippet:registryjob
	reg, err := registry.New(map[string]string{ // a Java serializer's property names
		"schema.registry.url":                     "https://registry.example.com:8081",
		"basic.auth.credentials.source":           "USER_INFO",
		"basic.auth.user.info":                    "kord:secret",
		"schema.registry.ssl.truststore.location": "/etc/kord/registry-ca.pem",
		"schema.registry.ssl.truststore.type":     "PEM",
	})
	if err != nil {
		log.Fatal(err)
	}
	users, err := registry.Avro[UserV2](reg, "users", userV2) // reads what v1 and v2 wrote
	if err != nil {
		log.Fatal(err)
	}
	adults, err := registry.Avro[UserV2](reg, "adults", userV2, registry.HeaderIDs())
	if err != nil {
		log.Fatal(err)
	}
	client, err := kafkaio.NewClient(kafkaio.Brokers("kafka-1:9092"))
	if err != nil {
		log.Fatal(err)
	}
	job := keyed.NewJob("adults")
	in := keyed.FromSource(job, "users", 0, kafkaio.NewSource(client, "users", users))
	// snippet:end
	byName := keyed.KeyByString("name", func(u UserV2) string { return u.Name }, in)
	out := keyed.ProcessFunc(byName, "adults", 0, func(name string, u UserV2, out *keyed.Collector[UserV2]) error {
		if u.Age >= 18 {
			out.Emit(u)
		}
		return nil
	})
	// snippet:registrysink
	keyed.ToSink(out, "adults", kafkaio.NewSink(client, "adults", adults,
		kafkaio.DeadLetterTopic("users.dlq"))) // a record with an unknown id or a bad magic byte
	// snippet:end
	if err := job.Run(ctx); err != nil {
		log.Fatal(err)
	}
}
