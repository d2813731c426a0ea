// Command userbehavior produces user-behavior events keyed by user uuid
// through kord's producer and checks them back: every event sits on the
// partition Kafka's Java producer would have chosen, and each user's events
// are in order.
//
// With no flags it runs on an in-process Kafka (the embedded default):
//
//	go run ./examples/userbehavior
//
// and against a real cluster with -brokers host:port. (The keyed,
// checkpointed processing job joins this example in a later step.)
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kordproject/kord/internal/embedded"
	"github.com/kordproject/kord/partitioner"
	"github.com/kordproject/kord/producer"
)

// Event is one user action.
type Event struct {
	UUID   string    `json:"uuid"`
	Seq    int64     `json:"seq"` // per-user sequence number, from 0
	Action string    `json:"action"`
	Page   string    `json:"page"`
	Time   time.Time `json:"ts"`
}

type options struct {
	brokers    string
	topic      string
	events     int
	users      int
	partitions int
	seed       uint64
}

func main() {
	var o options
	flag.StringVar(&o.brokers, "brokers", "", "Kafka bootstrap servers; empty runs an in-process cluster")
	flag.StringVar(&o.topic, "topic", "", "input topic (default: a fresh user-behavior.<time> topic)")
	flag.IntVar(&o.events, "events", 100_000, "events to produce")
	flag.IntVar(&o.users, "users", 10_000, "distinct user uuids")
	flag.IntVar(&o.partitions, "partitions", 12, "partitions of the topic when it is created")
	flag.Uint64Var(&o.seed, "seed", 1, "random seed")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "userbehavior:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) error {
	if o.events <= 0 || o.users <= 0 || o.partitions <= 0 {
		return errors.New("-events, -users and -partitions must be positive")
	}
	if o.brokers == "" {
		c, err := embedded.Start(1)
		if err != nil {
			return err
		}
		defer c.Close()
		o.brokers = c.Brokers()
		fmt.Printf("embedded Kafka (kfake) at %s\n", o.brokers)
	}
	if o.topic == "" {
		o.topic = fmt.Sprintf("user-behavior.%d", time.Now().UnixNano())
	}
	parts, err := ensureTopic(ctx, o.brokers, o.topic, o.partitions)
	if err != nil {
		return err
	}

	p, err := producer.New(producer.String(), producer.JSON[Event](), producer.Brokers(o.brokers), producer.Set("linger.ms", "10"))
	if err != nil {
		return err
	}
	defer p.Close()

	r := rand.New(rand.NewPCG(o.seed, o.seed^0x9e3779b97f4a7c15))
	users := make([]string, o.users)
	for i := range users {
		users[i] = uuid(r)
	}
	seq := make([]int64, o.users)
	actions := []string{"view", "click", "add_to_cart", "purchase"}
	start := time.Now()
	for i := 0; i < o.events; i++ {
		u := r.IntN(o.users)
		ev := Event{UUID: users[u], Seq: seq[u], Action: actions[r.IntN(len(actions))], Page: fmt.Sprintf("/item/%d", r.IntN(1000)), Time: time.Now()}
		seq[u]++
		if err := p.Produce(ctx, producer.Record[string, Event]{Topic: o.topic, Key: ev.UUID, Value: ev}, nil); err != nil {
			return err
		}
	}
	if err := p.Flush(ctx); err != nil {
		return err
	}
	elapsed := time.Since(start)
	fmt.Printf("produced %d events for %d users to %s (%d partitions) in %v (%.0f events/s)\n",
		o.events, o.users, o.topic, parts, elapsed.Round(time.Millisecond), float64(o.events)/elapsed.Seconds())

	return verify(ctx, o, parts)
}

// verify reads the topic back and checks placement and per-user order.
func verify(ctx context.Context, o options, parts int) error {
	c, err := kafka.NewConsumer(&kafka.ConfigMap{
		"bootstrap.servers":  o.brokers,
		"group.id":           "userbehavior-verify",
		"enable.auto.commit": false,
		"isolation.level":    "read_committed",
		"log_level":          3,
	})
	if err != nil {
		return err
	}
	defer c.Close()
	var tps []kafka.TopicPartition
	for i := 0; i < parts; i++ {
		tps = append(tps, kafka.TopicPartition{Topic: &o.topic, Partition: int32(i), Offset: kafka.OffsetBeginning})
	}
	if err := c.Assign(tps); err != nil {
		return err
	}
	next := map[string]int64{}
	misplaced, outOfOrder, n := 0, 0, 0
	deadline := time.Now().Add(2 * time.Minute)
	for n < o.events {
		if err := ctx.Err(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("read back only %d of %d events from %s", n, o.events, o.topic)
		}
		m, err := c.ReadMessage(200 * time.Millisecond)
		if err != nil {
			if kerr, ok := err.(kafka.Error); ok && kerr.IsTimeout() {
				continue
			}
			return err
		}
		var ev Event
		if err := json.Unmarshal(m.Value, &ev); err != nil {
			return fmt.Errorf("%s[%d]@%d: %w", o.topic, m.TopicPartition.Partition, m.TopicPartition.Offset, err)
		}
		n++
		if m.TopicPartition.Partition != partitioner.KeyPartition(m.Key, parts) {
			misplaced++
		}
		if ev.Seq != next[ev.UUID] {
			outOfOrder++
		}
		next[ev.UUID] = ev.Seq + 1
	}
	fmt.Printf("read back %d events: %d on a partition other than Java's, %d per-user order violations\n", n, misplaced, outOfOrder)
	if misplaced+outOfOrder > 0 {
		return errors.New("verification failed")
	}
	return nil
}

// ensureTopic creates the topic if it does not exist and returns its
// partition count.
func ensureTopic(ctx context.Context, brokers, topic string, partitions int) (int, error) {
	a, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": brokers, "log_level": 3})
	if err != nil {
		return 0, err
	}
	defer a.Close()
	md, err := a.GetMetadata(&topic, false, 10_000)
	if err == nil {
		if t, ok := md.Topics[topic]; ok && t.Error.Code() == kafka.ErrNoError && len(t.Partitions) > 0 {
			return len(t.Partitions), nil
		}
	}
	res, err := a.CreateTopics(ctx, []kafka.TopicSpecification{{Topic: topic, NumPartitions: partitions, ReplicationFactor: 1}})
	if err != nil {
		return 0, fmt.Errorf("create topic %s: %w", topic, err)
	}
	if e := res[0].Error; e.Code() != kafka.ErrNoError && e.Code() != kafka.ErrTopicAlreadyExists {
		return 0, fmt.Errorf("create topic %s: %w", topic, e)
	}
	return partitions, nil
}

func uuid(r *rand.Rand) string {
	b := make([]byte, 16)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}
