// Command rebalance measures how long a consumer group takes to move
// partitions between its members, with the two group protocols a job of
// several processes could use (issue #12: "try both, measure both"):
//
//   - classic: the classic group protocol with cooperative-sticky
//     assignment (KIP-429), members keeping what they own during a
//     rebalance;
//   - consumer: the consumer group protocol of KIP-848 (Kafka 4.x),
//     assignment computed by the broker, rebalances per member.
//
// For each protocol and round it starts -members consumers of one group on
// a fresh topic of -partitions partitions, then
//
//   - join: the time until the members own every partition;
//   - leave: one member closes (a planned stop); the time until the others
//     own every partition again;
//   - scale out: a new member starts; the time until it owns partitions and
//     the group owns every partition;
//
// and, for leave and scale out, how many partitions the members that stayed
// lost meanwhile (0 when a rebalance leaves the others alone).
//
//	go run ./bench/rebalance -brokers 127.0.0.1:9092 -rounds 3
//
// The protocols alternate round by round. Results go to stdout as a table.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

type member struct {
	c    *kafka.Consumer
	mu   sync.Mutex
	own  map[int32]bool
	lost int // partitions taken away while measuring
	stop chan struct{}
	done chan struct{}
}

func main() {
	brokers := flag.String("brokers", os.Getenv("KORD_KAFKA_BROKERS"), "bootstrap servers of a Kafka 4.x cluster")
	members := flag.Int("members", 3, "members at the start")
	partitions := flag.Int("partitions", 12, "partitions of the topic")
	rounds := flag.Int("rounds", 3, "rounds per protocol (alternated)")
	protocols := flag.String("protocols", "classic,consumer", "group protocols to measure")
	flag.Parse()
	if *brokers == "" {
		fmt.Fprintln(os.Stderr, "rebalance: -brokers (or KORD_KAFKA_BROKERS) is required")
		os.Exit(2)
	}
	results := map[string]map[string][]time.Duration{}
	lost := map[string]map[string][]int{}
	for r := 0; r < *rounds; r++ {
		for _, proto := range strings.Split(*protocols, ",") {
			res, l, err := round(*brokers, proto, *members, *partitions, r)
			if err != nil {
				fmt.Fprintf(os.Stderr, "rebalance: %s round %d: %v\n", proto, r+1, err)
				os.Exit(1)
			}
			if results[proto] == nil {
				results[proto], lost[proto] = map[string][]time.Duration{}, map[string][]int{}
			}
			for k, v := range res {
				results[proto][k] = append(results[proto][k], v)
				lost[proto][k] = append(lost[proto][k], l[k])
			}
			fmt.Fprintf(os.Stderr, "%s round %d: %v lost %v\n", proto, r+1, res, l)
		}
	}
	fmt.Printf("| protocol | step | median | max | partitions the others lost (per round) |\n|---|---|---|---|---|\n")
	for _, proto := range strings.Split(*protocols, ",") {
		for _, step := range []string{"join", "leave", "scale out"} {
			ds := results[proto][step]
			slices.Sort(ds)
			fmt.Printf("| %s | %s | %v | %v | %v |\n", proto, step, ds[len(ds)/2].Round(time.Millisecond), ds[len(ds)-1].Round(time.Millisecond), lost[proto][step])
		}
	}
}

func config(brokers, proto, group string) *kafka.ConfigMap {
	cm := kafka.ConfigMap{
		"bootstrap.servers": brokers, "group.id": group, "enable.auto.commit": false,
		"auto.offset.reset": "earliest", "log_level": 3,
	}
	switch proto {
	case "classic":
		cm["group.protocol"] = "classic"
		cm["partition.assignment.strategy"] = "cooperative-sticky"
		// Both protocols at their defaults: the classic member's
		// heartbeat.interval.ms (3 s) and session.timeout.ms (45 s) are
		// client settings; KIP-848's heartbeat interval is the broker's
		// group.consumer.heartbeat.interval.ms (5 s).
	case "consumer":
		cm["group.protocol"] = "consumer"
	}
	return &cm
}

// round runs one round of the three steps.
func round(brokers, proto string, n, partitions, r int) (map[string]time.Duration, map[string]int, error) {
	topic := fmt.Sprintf("kord.rebalance.%s.%d.%d", proto, r, time.Now().UnixNano())
	if err := createTopic(brokers, topic, partitions); err != nil {
		return nil, nil, err
	}
	group := topic + ".group"
	res, lost := map[string]time.Duration{}, map[string]int{}
	var ms []*member
	defer func() {
		for _, m := range ms {
			m.close()
		}
	}()
	start := time.Now()
	for i := 0; i < n; i++ {
		m, err := join(brokers, proto, group, topic)
		if err != nil {
			return nil, nil, err
		}
		ms = append(ms, m)
	}
	if err := waitCovered(ms, partitions, nil); err != nil {
		return nil, nil, fmt.Errorf("join: %w", err)
	}
	res["join"] = time.Since(start)

	resetLost(ms[1:])
	start = time.Now()
	ms[0].close()
	ms = ms[1:]
	if err := waitCovered(ms, partitions, nil); err != nil {
		return nil, nil, fmt.Errorf("leave: %w", err)
	}
	res["leave"] = time.Since(start)
	lost["leave"] = sumLost(ms)

	resetLost(ms)
	start = time.Now()
	nm, err := join(brokers, proto, group, topic)
	if err != nil {
		return nil, nil, err
	}
	old := ms
	ms = append(ms, nm)
	if err := waitCovered(ms, partitions, nm); err != nil {
		return nil, nil, fmt.Errorf("scale out: %w", err)
	}
	res["scale out"] = time.Since(start)
	// Partitions the newcomer took had to leave someone: what the others
	// lost beyond those is the rebalance's cost to them.
	lost["scale out"] = sumLost(old) - nm.count()
	return res, lost, nil
}

func join(brokers, proto, group, topic string) (*member, error) {
	c, err := kafka.NewConsumer(config(brokers, proto, group))
	if err != nil {
		return nil, err
	}
	m := &member{c: c, own: map[int32]bool{}, stop: make(chan struct{}), done: make(chan struct{})}
	if err := c.Subscribe(topic, m.rebalance); err != nil {
		c.Close()
		return nil, err
	}
	go m.poll()
	return m, nil
}

// rebalance tracks what the member owns. librdkafka assigns and unassigns
// itself after the callback (incrementally under cooperative-sticky and
// KIP-848) when the callback does not.
func (m *member) rebalance(c *kafka.Consumer, ev kafka.Event) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch e := ev.(type) {
	case kafka.AssignedPartitions:
		for _, tp := range e.Partitions {
			m.own[tp.Partition] = true
		}
	case kafka.RevokedPartitions:
		for _, tp := range e.Partitions {
			if m.own[tp.Partition] {
				m.lost++
			}
			delete(m.own, tp.Partition)
		}
	}
	return nil
}

func (m *member) poll() {
	defer close(m.done)
	for {
		select {
		case <-m.stop:
			return
		default:
		}
		m.c.Poll(50)
	}
}

func (m *member) close() {
	select {
	case <-m.stop:
		return
	default:
	}
	close(m.stop)
	<-m.done
	m.c.Close() // leaves the group: a planned stop
}

func (m *member) count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.own)
}

func resetLost(ms []*member) {
	for _, m := range ms {
		m.mu.Lock()
		m.lost = 0
		m.mu.Unlock()
	}
}

func sumLost(ms []*member) int {
	n := 0
	for _, m := range ms {
		m.mu.Lock()
		n += m.lost
		m.mu.Unlock()
	}
	return n
}

// waitCovered waits until every partition has exactly one owner among ms
// (and must, when set, owns at least one), up to a minute.
func waitCovered(ms []*member, partitions int, must *member) error {
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		owners := map[int32]int{}
		for _, m := range ms {
			m.mu.Lock()
			for p := range m.own {
				owners[p]++
			}
			m.mu.Unlock()
		}
		ok := len(owners) == partitions && (must == nil || must.count() > 0)
		for _, n := range owners {
			ok = ok && n == 1
		}
		if ok {
			return nil
		}
		time.Sleep(5 * time.Millisecond)
	}
	return fmt.Errorf("the group did not own all %d partitions within a minute", partitions)
}

func createTopic(brokers, topic string, partitions int) error {
	a, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": brokers, "log_level": 3})
	if err != nil {
		return err
	}
	defer a.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := a.CreateTopics(ctx, []kafka.TopicSpecification{{Topic: topic, NumPartitions: partitions, ReplicationFactor: 1}})
	if err != nil {
		return err
	}
	if e := res[0].Error; e.Code() != kafka.ErrNoError {
		return fmt.Errorf("create topic %s: %w", topic, e)
	}
	return nil
}
