package producer_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/kordproject/kord/kordtest"
	"github.com/kordproject/kord/producer"
	"github.com/kordproject/kord/serde"
)

type Event struct {
	UUID   string `json:"uuid"`
	Action string `json:"action"`
}

// A producer of JSON events keyed by user uuid: each key goes to the
// partition Kafka's Java client would choose (murmur2), and a key's records
// stay in order. The callback reports where each record landed.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cluster, err := kordtest.NewCluster(kordtest.Topic("user-behavior", 12))
	if err != nil {
		log.Fatal(err)
	}
	defer cluster.Close()

	p, err := producer.New(serde.String(), serde.JSON[Event](), producer.Brokers(cluster.Brokers()...))
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()
	for _, ev := range []Event{{"3f2a9c1e-8d4b-4c6a-9e1f-2b7d5a0c8e41", "view"}, {"a7c0e2d9-1b3f-4e8a-b6d2-9c5f0e7a3b18", "cart"}, {"3f2a9c1e-8d4b-4c6a-9e1f-2b7d5a0c8e41", "buy"}} {
		d, err := p.ProduceSync(ctx, producer.Record[string, Event]{Topic: "user-behavior", Key: ev.UUID, Value: ev})
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s %s: partition %d offset %d\n", ev.UUID[:8], ev.Action, d.Partition, d.Offset)
	}
	// Output:
	// 3f2a9c1e view: partition 8 offset 0
	// a7c0e2d9 cart: partition 0 offset 0
	// 3f2a9c1e buy: partition 8 offset 1
}
