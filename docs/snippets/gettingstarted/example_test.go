package gettingstarted_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/kordproject/kord/kafkaio"
	"github.com/kordproject/kord/keyed"
	"github.com/kordproject/kord/keyed/connector"
	"github.com/kordproject/kord/kordtest"
	"github.com/kordproject/kord/producer"
	"github.com/kordproject/kord/serde"
)

// snippet:types
// Event is one visit of a user to a page: the job's input.
type Event struct {
	User string `json:"user"`
	Page string `json:"page"`
}

// Count is the job's output: the user's visits so far, this one included.
type Count struct {
	User   string `json:"user"`
	Page   string `json:"page"`
	Visits int64  `json:"visits"`
}

// snippet:end

// The guide's first job, whole, on kordtest's in-process cluster.
func Example_firstJob() {
	// snippet:cluster
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cluster, err := kordtest.NewCluster(kordtest.Topic("events", 3), kordtest.Topic("visits", 3))
	check(err)
	defer cluster.Close()
	client, err := cluster.Client() // a real cluster: kafkaio.NewClient(kafkaio.Brokers("host:9092"))
	check(err)
	// snippet:end

	// snippet:produce
	p, err := producer.New(serde.String(), serde.JSON[Event](), producer.Brokers(cluster.Brokers()...))
	check(err)
	for _, e := range []Event{{"ann", "/home"}, {"bob", "/home"}, {"ann", "/cart"},
		{"cy", "/help"}, {"ann", "/pay"}, {"bob", "/cart"}} {
		check(p.Produce(ctx, producer.Record[string, Event]{Topic: "events", Key: e.User, Value: e}, nil))
	}
	check(p.Flush(ctx))
	p.Close()
	// snippet:end

	// snippet:job
	dir, err := os.MkdirTemp("", "visits")
	check(err)
	defer os.RemoveAll(dir)

	job := keyed.NewJob("visits", keyed.Dir(dir))
	events := keyed.FromSource(job, "events", 0,
		kafkaio.NewSource(client, "events", serde.JSON[Event](), kafkaio.Bounded()))
	byUser := keyed.KeyByString("user", func(e Event) string { return e.User }, events)
	visits := keyed.ProcessValue(byUser, "count", 0, serde.Int64(),
		func(user string, e Event, n *keyed.ValueState[int64], out *keyed.Collector[Count]) error {
			c, _ := n.Get() // 0, false for a user not seen before
			n.Set(c + 1)
			out.Emit(Count{User: user, Page: e.Page, Visits: c + 1})
			return nil
		})
	keyed.ToSink(visits, "visits", kafkaio.NewSink(client, "visits", serde.JSON[Count](),
		kafkaio.Key(func(c Count) string { return c.User }, serde.String())))

	check(job.Run(ctx)) // returns once the input is processed and committed
	// snippet:end

	// snippet:read
	recs, err := kordtest.ReadCommitted(ctx, client, "visits")
	check(err)
	for _, r := range recs { // each partition's records in order, partitions ascending
		fmt.Printf("partition %d: %s\n", r.Partition, r.Value)
	}
	// snippet:end

	// Output:
	// partition 0: {"user":"bob","page":"/home","visits":1}
	// partition 0: {"user":"bob","page":"/cart","visits":2}
	// partition 1: {"user":"cy","page":"/help","visits":1}
	// partition 2: {"user":"ann","page":"/home","visits":1}
	// partition 2: {"user":"ann","page":"/cart","visits":2}
	// partition 2: {"user":"ann","page":"/pay","visits":3}
}

// The same job against a real cluster, until SIGTERM. It is compiled,
// not run: it needs a broker.
func Example_realCluster() {
	// snippet:real
	client, err := kafkaio.NewClient(kafkaio.Brokers("broker1:9092", "broker2:9092"))
	if err != nil {
		log.Fatal(err)
	}
	job := keyed.NewJob("visits", // checkpoints in keyed.DefaultDir("visits")
		keyed.Logger(slog.Default()),
		keyed.RestartStrategy(keyed.ExponentialBackoff(10, time.Second, time.Minute)))
	events := keyed.FromSource(job, "events", 0,
		kafkaio.NewSource(client, "events", serde.JSON[Event]())) // not bounded: runs until stopped
	byUser := keyed.KeyByString("user", func(e Event) string { return e.User }, events)
	visits := keyed.ProcessValue(byUser, "count", 0, serde.Int64(), countVisit)
	keyed.ToSink(visits, "visits", kafkaio.NewSink(client, "visits", serde.JSON[Count](),
		kafkaio.Key(func(c Count) string { return c.User }, serde.String()),
		kafkaio.DeadLetterTopic("events.dlq"))) // records that do not decode go here

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := job.Run(ctx); err != nil { // a stop commits a final checkpoint, then Run returns nil
		log.Fatal(err)
	}
	// snippet:end
}

// check ends the example on an error.
func check(err error) {
	if err != nil {
		log.Fatal(err)
	}
}

// snippet:declare
// visitCounts declares the job between a source and a sink: the program
// gives it Kafka's (kafkaio.NewSource, kafkaio.NewSink), a test memory's.
func visitCounts(job *keyed.Job, src connector.Source[Event], sink connector.Sink[Count]) {
	events := keyed.FromSource(job, "events", 0, src)
	byUser := keyed.KeyByString("user", func(e Event) string { return e.User }, events)
	visits := keyed.ProcessValue(byUser, "count", 0, serde.Int64(), countVisit)
	keyed.ToSink(visits, "visits", sink)
}

func countVisit(user string, e Event, n *keyed.ValueState[int64], out *keyed.Collector[Count]) error {
	c, _ := n.Get()
	n.Set(c + 1)
	out.Emit(Count{User: user, Page: e.Page, Visits: c + 1})
	return nil
}

// snippet:end

// snippet:memtest
func TestVisitCounts(t *testing.T) {
	src := keyed.NewMemorySource[Event]("events", 2, true) // 2 partitions, bounded
	src.Append(0, []byte("ann"), Event{"ann", "/home"})
	src.Append(1, []byte("bob"), Event{"bob", "/home"})
	src.Append(0, []byte("ann"), Event{"ann", "/cart"})
	sink := keyed.NewMemorySink[Count]()

	job := keyed.NewJob("visits", keyed.Dir(t.TempDir()))
	visitCounts(job, src, sink)
	if err := job.Run(t.Context()); err != nil {
		t.Fatal(err)
	}

	got := map[string][]int64{} // each user's counts, in the order committed
	for _, c := range sink.Committed() {
		got[c.User] = append(got[c.User], c.Visits)
	}
	if !slices.Equal(got["ann"], []int64{1, 2}) || !slices.Equal(got["bob"], []int64{1}) {
		t.Errorf("got %v", got)
	}
}

// snippet:end

// snippet:kafkatest
func TestVisitCountsOnKafka(t *testing.T) {
	cluster, err := kordtest.NewCluster(kordtest.Topic("events", 2), kordtest.Topic("visits", 2))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	client, err := cluster.Client()
	if err != nil {
		t.Fatal(err)
	}
	produce(t, cluster, Event{"ann", "/home"}, Event{"bob", "/home"}, Event{"ann", "/cart"})

	job := keyed.NewJob("visits", keyed.Dir(t.TempDir()))
	visitCounts(job, kafkaio.NewSource(client, "events", serde.JSON[Event](), kafkaio.Bounded()),
		kafkaio.NewSink(client, "visits", serde.JSON[Count](),
			kafkaio.Key(func(c Count) string { return c.User }, serde.String())))
	if err := job.Run(t.Context()); err != nil {
		t.Fatal(err)
	}

	recs, err := kordtest.ReadCommitted(t.Context(), client, "visits")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]int64{}
	for _, r := range recs {
		c, err := serde.JSON[Count]().Decode(r.Value)
		if err != nil {
			t.Fatal(err)
		}
		got[c.User] = append(got[c.User], c.Visits)
	}
	if !slices.Equal(got["ann"], []int64{1, 2}) || !slices.Equal(got["bob"], []int64{1}) {
		t.Errorf("got %v", got)
	}
}

// snippet:end

// produce writes events to the topic "events", keyed by user, with kord's
// producer (as Example_firstJob does).
func produce(t *testing.T, cluster *kordtest.Cluster, events ...Event) {
	t.Helper()
	p, err := producer.New(serde.String(), serde.JSON[Event](), producer.Brokers(cluster.Brokers()...))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for _, e := range events {
		if err := p.Produce(t.Context(), producer.Record[string, Event]{Topic: "events", Key: e.User, Value: e}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// An Avro serde maps a struct's json-tagged fields onto a record schema.
func Example_avro() {
	// snippet:avro
	counts, err := serde.Avro[Count](`{"type": "record", "name": "Count", "fields": [
		{"name": "user", "type": "string"},
		{"name": "page", "type": "string"},
		{"name": "visits", "type": "long"}]}`)
	if err != nil {
		log.Fatal(err)
	}
	b, err := counts.Encode(nil, Count{User: "ann", Page: "/pay", Visits: 3})
	if err != nil {
		log.Fatal(err)
	}
	c, err := counts.Decode(b)
	fmt.Printf("%d bytes, %+v, %v\n", len(b), c, err)
	// snippet:end

	// Output: 10 bytes, {User:ann Page:/pay Visits:3}, <nil>
}
