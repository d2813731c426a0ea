package consumer_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/kordproject/kord/consumer"
	"github.com/kordproject/kord/kordtest"
	"github.com/kordproject/kord/producer"
	"github.com/kordproject/kord/serde"
)

// Reading a topic from its start to its end, as a read_committed consumer
// sees it: resolve where to start, assign, poll until Reached says every
// partition's end (fixed by Ends) is read. Nothing is committed.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cluster, err := kordtest.NewCluster(kordtest.Topic("greetings", 1))
	if err != nil {
		log.Fatal(err)
	}
	defer cluster.Close()
	p, err := producer.New(serde.String(), serde.String(), producer.Brokers(cluster.Brokers()...))
	if err != nil {
		log.Fatal(err)
	}
	for _, v := range []string{"hello", "hej", "bonjour"} {
		if _, err := p.ProduceSync(ctx, producer.Record[string, string]{Topic: "greetings", Key: "k", Value: v}); err != nil {
			log.Fatal(err)
		}
	}
	p.Close()

	src, err := consumer.New(consumer.Brokers(cluster.Brokers()...))
	if err != nil {
		log.Fatal(err)
	}
	defer src.Close()
	start, err := src.Resolve(ctx, "greetings", consumer.Earliest)
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
	for !src.Reached(ends) {
		recs, err := src.Poll(ctx, 100, 100*time.Millisecond)
		if err != nil {
			log.Fatal(err)
		}
		for _, r := range recs {
			fmt.Printf("%s[%d]@%d %s\n", r.Topic, r.Partition, r.Offset, r.Value)
		}
	}
	// Output:
	// greetings[0]@0 hello
	// greetings[0]@1 hej
	// greetings[0]@2 bonjour
}
