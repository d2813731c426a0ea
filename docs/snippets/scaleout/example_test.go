package scaleout_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"gocloud.dev/blob"

	"github.com/kordproject/kord/checkpoint/blobstore"
	"github.com/kordproject/kord/consumer"
	"github.com/kordproject/kord/kafkaio"
	"github.com/kordproject/kord/keyed"
	"github.com/kordproject/kord/kordtest"
	"github.com/kordproject/kord/producer"
	"github.com/kordproject/kord/serde"
)

// snippet:types
// Event is a page visit of a user, keyed by the user in Kafka.
type Event struct {
	User string `json:"user"`
	Page string `json:"page"`
}

// Count is a user's visits so far.
type Count struct {
	User   string `json:"user"`
	Visits int64  `json:"visits"`
}

// count is the job's keyed stage: each user's visits counted in keyed
// state.
func count(user string, e Event, n *keyed.ValueState[int64], out *keyed.Collector[Count]) error {
	c, _ := n.Get()
	n.Set(c + 1)
	out.Emit(Count{User: user, Visits: c + 1})
	return nil
}

// snippet:end

// One process of a job of several (keyed.Instance), alone in its group,
// on kordtest's in-process cluster: Kafka's group assigns it every
// partition, and each partition's offset in the commit group carries a
// commit record naming the checkpoint and this instance.
func Example_instance() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cluster, err := kordtest.NewCluster(kordtest.Topic("visits", 2), kordtest.Topic("counts", 2))
	must(err)
	defer cluster.Close()
	client, err := cluster.Client()
	must(err)
	produce(ctx, cluster, "visits", Event{"ann", "/home"}, Event{"dan", "/cart"}, Event{"ann", "/cart"}, Event{"bob", "/home"})
	dir, err := os.MkdirTemp("", "counts")
	must(err)
	defer os.RemoveAll(dir)

	// snippet:instance
	job := keyed.NewJob("counts",
		keyed.Instance("p1"), // this process: stable across its restarts, unique among the running ones
		keyed.Dir(dir))       // every process of the job shares this storage
	visits := keyed.FromSource(job, "visits", 0,
		kafkaio.NewSource(client, "visits", serde.JSON[Event](), kafkaio.Bounded()))
	counts := keyed.ProcessValue(keyed.ByPartition(visits), "count", 0, serde.Int64(),
		func(user []byte, e Event, n *keyed.ValueState[int64], out *keyed.Collector[Count]) error {
			return count(string(user), e, n, out)
		})
	keyed.ToSink(counts, "counts", kafkaio.NewSink(client, "counts", serde.JSON[Count](),
		kafkaio.SessionTimeout(10*time.Second))) // how long Kafka waits for a silent process
	if err := job.Run(ctx); err != nil {
		log.Fatal(err)
	}

	// What Kafka recorded: each input partition's offset, and the
	// instance whose transaction committed it.
	commit, err := kafkaio.ReadCommit(ctx, client, "counts")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(commit.Group, kafkaio.InstanceTransactionalID("counts", "p1"))
	for _, p := range commit.Partitions {
		fmt.Printf("%s[%d] offset %d lag %d instance %s\n", p.Topic, p.Partition, p.Offset, p.Lag, p.Instance)
	}
	// snippet:end

	// Output:
	// kord.counts.commit kord.counts.p1
	// visits[0] offset 3 lag 0 instance p1
	// visits[1] offset 1 lag 0 instance p1
}

// A job keyed by a field on several processes: the records cross between
// the processes through the job's hop topic,
// kord.<job>.count.repartition. Each process runs this program with its
// own POD_NAME; the checkpoints are in a bucket they all reach. It needs
// a real cluster and a bucket, so go test compiles it and does not run it.
func Example_hop() {
	// snippet:hop
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop() // SIGTERM: a final checkpoint, then Run returns
	client, err := kafkaio.NewClient(kafkaio.Brokers("broker1:9092"))
	if err != nil {
		log.Fatal(err)
	}
	bucket, err := blob.OpenBucket(ctx, "s3://my-bucket?region=eu-west-1") // the program imports gocloud.dev/blob/s3blob
	if err != nil {
		log.Fatal(err)
	}
	defer bucket.Close()

	job := keyed.NewJob("counts",
		keyed.Instance(os.Getenv("POD_NAME")),
		keyed.CheckpointStorage(blobstore.New(bucket, "jobs/counts/")))
	visits := keyed.FromSource(job, "visits", 0,
		kafkaio.NewSource(client, "visits", serde.JSON[Event](), kafkaio.StartFrom(consumer.Latest)))
	byUser := keyed.KeyByString("user", func(e Event) string { return e.User }, visits).
		Serde(serde.JSON[Event]()) // how the records cross between the processes
	counts := keyed.ProcessValue(byUser, "count", 0, serde.Int64(), count)
	keyed.ToSink(counts, "counts", kafkaio.NewSink(client, "counts", serde.JSON[Count](),
		kafkaio.Key(func(c Count) string { return c.User }, serde.String())))
	if err := job.Run(ctx); err != nil {
		log.Fatal(err)
	}
	// snippet:end
}

// produce writes events keyed by user, placed as Java's producer places
// them.
func produce(ctx context.Context, c *kordtest.Cluster, topic string, events ...Event) {
	p, err := producer.New(serde.String(), serde.JSON[Event](), producer.Brokers(c.Brokers()...))
	must(err)
	defer p.Close()
	for _, e := range events {
		must(p.Produce(ctx, producer.Record[string, Event]{Topic: topic, Key: e.User, Value: e}, nil))
	}
	must(p.Flush(ctx))
}

func must(err error) {
	if err != nil {
		log.Fatal(err)
	}
}
