package kafkaio_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/kordproject/kord/kafkaio"
	"github.com/kordproject/kord/keyed"
	"github.com/kordproject/kord/kordtest"
	"github.com/kordproject/kord/producer"
	"github.com/kordproject/kord/serde"
)

// Hit is one line of an access log.
type Hit struct {
	Method string `json:"method"`
	Path   string `json:"path"`
	Status int    `json:"status"`
}

// PatternCount is how many hits a URI pattern has had so far.
type PatternCount struct {
	Pattern string `json:"pattern"`
	Count   int64  `json:"count"`
}

// normalize turns a path into its pattern: numeric segments become {id}.
func normalize(path string) string {
	path, _, _ = strings.Cut(path, "?")
	segs := strings.Split(path, "/")
	for i, s := range segs {
		if s != "" && strings.Trim(s, "0123456789") == "" {
			segs[i] = "{id}"
		}
	}
	return strings.Join(segs, "/")
}

// A complete exactly-once job: access-log hits in JSON are counted per
// normalized URI pattern in keyed state, every count goes to a topic, and
// a line that is not JSON goes to a dead-letter topic. The source is
// bounded, so Run returns once the input is processed and committed. It
// runs on kordtest's in-process cluster; against a real one, only the
// client's brokers change.
func Example_accessLog() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cluster, err := kordtest.NewCluster(kordtest.Topic("access-log", 3), kordtest.Topic("uri-counts", 3), kordtest.Topic("access-log.dlq", 1))
	if err != nil {
		log.Fatal(err)
	}
	defer cluster.Close()
	writeLines(ctx, cluster, "access-log",
		`{"method":"GET","path":"/users/17","status":200}`,
		`{"method":"GET","path":"/users/42?tab=posts","status":200}`,
		`{"method":"POST","path":"/orders","status":201}`,
		`not json at all`,
		`{"method":"GET","path":"/users/17/orders/3","status":404}`,
		`{"method":"GET","path":"/users/99","status":200}`)
	dir, _ := os.MkdirTemp("", "uri-counts-")
	defer os.RemoveAll(dir)

	// The job: configured once (its name, its checkpoint directory), one
	// client for every Kafka client it creates.
	client, err := cluster.Client()
	if err != nil {
		fmt.Println(err)
		return
	}
	job := keyed.NewJob("uri-counts", keyed.Dir(dir), keyed.CheckpointInterval(100*time.Millisecond))
	hits := keyed.FromSource[Hit](job, "hits", 1, kafkaio.NewSource(client, "access-log", serde.JSON[Hit](), kafkaio.Bounded()))
	byPattern := keyed.KeyByString("pattern", func(h Hit) string { return normalize(h.Path) }, hits)
	counts := keyed.ProcessValue(byPattern, "count", 2, serde.Int64(),
		func(pattern string, _ Hit, n *keyed.ValueState[int64], out *keyed.Collector[PatternCount]) error {
			c, _ := n.Get()
			n.Set(c + 1)
			out.Emit(PatternCount{Pattern: pattern, Count: c + 1})
			return nil
		})
	keyed.ToSink(counts, "counts", kafkaio.NewSink(client, "uri-counts",
		serde.JSON[PatternCount](), kafkaio.Key(func(c PatternCount) string { return c.Pattern }, serde.String()),
		kafkaio.DeadLetterTopic("access-log.dlq")))
	if err := job.Run(ctx); err != nil {
		log.Fatal(err)
	}

	// What a read_committed reader sees: the latest count per pattern,
	// and the line that could not be read.
	latest := map[string]string{}
	recs, err := kordtest.ReadCommitted(ctx, client, "uri-counts")
	if err != nil {
		log.Fatal(err)
	}
	for _, r := range recs {
		latest[string(r.Key)] = string(r.Value)
	}
	patterns := make([]string, 0, len(latest))
	for p := range latest {
		patterns = append(patterns, p)
	}
	sort.Strings(patterns)
	for _, p := range patterns {
		fmt.Println(latest[p])
	}
	dead, err := kordtest.ReadCommitted(ctx, client, "access-log.dlq")
	if err != nil {
		log.Fatal(err)
	}
	for _, d := range dead {
		fmt.Printf("dead letter: %q\n", d.Value)
	}
	fmt.Println("dead letters counted:", job.DeadLetters())
	// Output:
	// {"pattern":"/orders","count":1}
	// {"pattern":"/users/{id}","count":3}
	// {"pattern":"/users/{id}/orders/{id}","count":1}
	// dead letter: "not json at all"
	// dead letters counted: 1
}

// writeLines produces lines to topic with kord's producer.
func writeLines(ctx context.Context, c *kordtest.Cluster, topic string, lines ...string) {
	p, err := producer.New(serde.Bytes(), serde.String(), producer.Brokers(c.Brokers()...))
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()
	for _, l := range lines {
		if err := p.Produce(ctx, producer.Record[[]byte, string]{Topic: topic, Value: l}, nil); err != nil {
			log.Fatal(err)
		}
	}
	if err := p.Flush(ctx); err != nil {
		log.Fatal(err)
	}
}
