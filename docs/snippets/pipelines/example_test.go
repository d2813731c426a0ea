// Package pipelines_test holds the snippets of docs/pipelines.md: jobs of
// several stages, side outputs, several sinks, joins and broadcast state.
// go test ./docs/snippets/pipelines/ runs them.
package pipelines_test

import (
	"context"
	"fmt"
	"log"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/kordproject/kord/kafkaio"
	"github.com/kordproject/kord/keyed"
	"github.com/kordproject/kord/kordtest"
	"github.com/kordproject/kord/producer"
	"github.com/kordproject/kord/serde"
	"github.com/kordproject/kord/vfs"
)

// View is one page view of a user.
type View struct {
	User  string `json:"user"`
	Page  string `json:"page"`
	Agent string `json:"agent"`
}

// Seen is a view numbered within its user's views by the first stage.
type Seen struct {
	User string
	Page string
	N    int64 // the user's n-th view
}

// Two keyed stages: views counted per user (keyed by partition: the input
// is keyed by user), then re-keyed by page and counted per page.
func Example_stages() {
	// snippet:stages
	src := keyed.NewMemorySource[View]("views", 2, true) // 2 partitions, bounded
	src.Append(0, []byte("ann"), View{User: "ann", Page: "/Home"})
	src.Append(0, []byte("ann"), View{User: "ann", Page: "/cart"})
	src.Append(1, []byte("bob"), View{User: "bob", Page: "/home"})
	src.Append(1, []byte("bob"), View{User: "bob", Page: "/health"})
	src.Append(1, []byte("bob"), View{User: "bob", Page: "/cart"})

	job := keyed.NewJob("page-views", keyed.FS(vfs.NewMem()), keyed.Dir("/ckpt")) // checkpoints in memory
	views := keyed.FromSource[View](job, "views", 2, src)

	// Chained into the source task: no channel, no goroutine.
	views = keyed.MapValues(views, func(v View) View { v.Page = strings.ToLower(v.Page); return v })
	views = views.Filter(func(v View) bool { return v.Page != "/health" })

	// Stage one, keyed by the input's partition: number each user's views.
	perUser := keyed.ProcessValue(keyed.ByPartition(views), "users", 2, serde.Int64(),
		func(user []byte, v View, n *keyed.ValueState[int64], out *keyed.Collector[Seen]) error {
			c, _ := n.Get()
			n.Set(c + 1)
			out.Emit(Seen{User: v.User, Page: v.Page, N: c + 1})
			return nil
		})

	// Stage two, re-keyed by page: a shuffle between the stages.
	byPage := keyed.KeyByString("page", func(s Seen) string { return s.Page }, perUser)
	perPage := keyed.ProcessValue(byPage, "pages", 2, serde.Int64(),
		func(page string, s Seen, n *keyed.ValueState[int64], out *keyed.Collector[string]) error {
			c, _ := n.Get()
			n.Set(c + 1)
			out.Emit(fmt.Sprintf("%s %d", page, c+1))
			return nil
		})
	sink := keyed.NewMemorySink[string]()
	keyed.ToSink(perPage, "counts", sink)
	if err := job.Run(context.Background()); err != nil {
		log.Fatal(err)
	}
	// snippet:end

	// A page's records come from both tasks of stage one in no set order,
	// so print each page's last count, not the order they came in.
	last := map[string]string{}
	for _, r := range sink.Committed() {
		page, n, _ := strings.Cut(r, " ")
		last[page] = max(last[page], n)
	}
	for _, page := range slices.Sorted(maps.Keys(last)) {
		fmt.Println(page, last[page])
	}
	// Output:
	// /cart 2
	// /home 2
}

// UserCount is a user's view count.
type UserCount struct {
	User  string `json:"user"`
	Views int64  `json:"views"`
}

// counter counts each user's views; views by a bot go to a side output
// instead.
type counter struct {
	n    *keyed.ValueState[int64]
	bots *keyed.SideOutput[View]
}

func (c *counter) Open(b *keyed.Backend) (err error) {
	c.n, err = keyed.Value(b, "views", serde.Int64())
	return err
}

// snippet:emitside
func (c *counter) Process(user []byte, v View, out *keyed.Collector[UserCount]) error {
	if strings.Contains(v.Agent, "bot") {
		keyed.EmitSide(out, c.bots, v) // to the side output, with v's time
		return nil
	}
	n, _ := c.n.Get()
	c.n.Set(n + 1)
	out.Emit(UserCount{User: v.User, Views: n + 1})
	return nil
}

// snippet:end

// A side output, and two topics written in one transaction per
// checkpoint, on kordtest's in-process cluster.
func Example_sideOutput() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cluster, err := kordtest.NewCluster(kordtest.Topic("views", 2), kordtest.Topic("user-counts", 2), kordtest.Topic("bots", 1))
	if err != nil {
		log.Fatal(err)
	}
	defer cluster.Close()
	produce(ctx, cluster, "views",
		View{User: "ann", Page: "/home", Agent: "firefox"},
		View{User: "crawler-7", Page: "/home", Agent: "googlebot"},
		View{User: "ann", Page: "/cart", Agent: "firefox"})
	client, err := cluster.Client()
	if err != nil {
		log.Fatal(err)
	}
	dir, _ := os.MkdirTemp("", "side-output-")
	defer os.RemoveAll(dir)

	// snippet:sinks
	job := keyed.NewJob("view-counts", keyed.Dir(dir), keyed.CheckpointInterval(100*time.Millisecond))
	views := keyed.FromSource[View](job, "views", 0,
		kafkaio.NewSource(client, "views", serde.JSON[View](), kafkaio.Bounded()))
	bots := keyed.NewSideOutput[View]("bots")
	counts := keyed.Process(keyed.ByPartition(views), "count", 0,
		func() keyed.Operator[View, UserCount] { return &counter{bots: bots} })

	// The first sink decides each commit; Output writes its topic in the
	// same transactions.
	results := kafkaio.NewSink(client, "user-counts", serde.JSON[UserCount](),
		kafkaio.Key(func(c UserCount) string { return c.User }, serde.String()))
	keyed.ToSink(counts, "counts", results)
	keyed.ToSink(keyed.Side(counts, bots), "bots", kafkaio.Output(results, "bots", serde.JSON[View]()))
	// snippet:end
	if err := job.Run(ctx); err != nil {
		log.Fatal(err)
	}
	for _, topic := range []string{"user-counts", "bots"} {
		recs, err := kordtest.ReadCommitted(ctx, client, topic)
		if err != nil {
			log.Fatal(err)
		}
		for _, r := range recs {
			fmt.Printf("%s: %s\n", topic, r.Value)
		}
	}
	// Output:
	// user-counts: {"user":"ann","views":1}
	// user-counts: {"user":"ann","views":2}
	// bots: {"user":"crawler-7","page":"/home","agent":"googlebot"}
}

// produce writes views to topic, keyed by user, as Kafka's Java producer
// places them.
func produce(ctx context.Context, c *kordtest.Cluster, topic string, views ...View) {
	p, err := producer.New(serde.String(), serde.JSON[View](), producer.Brokers(c.Brokers()...))
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()
	for _, v := range views {
		if err := p.Produce(ctx, producer.Record[string, View]{Topic: topic, Key: v.User, Value: v}, nil); err != nil {
			log.Fatal(err)
		}
	}
	if err := p.Flush(ctx); err != nil {
		log.Fatal(err)
	}
}

// Order and Payment are the two inputs of the interval join.
type Order struct {
	User string    `json:"user"`
	ID   string    `json:"id"`
	At   time.Time `json:"at"`
}

type Payment struct {
	User  string    `json:"user"`
	Order string    `json:"order"`
	Cents int64     `json:"cents"`
	At    time.Time `json:"at"`
}

// Orders and the payments of the same user within ten minutes after them.
func Example_intervalJoin() {
	// snippet:interval
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	orderSrc := keyed.NewMemorySource[Order]("orders", 1, true)
	orderSrc.Append(0, nil, Order{User: "ann", ID: "o1", At: t0})
	orderSrc.Append(0, nil, Order{User: "bob", ID: "o2", At: t0.Add(time.Minute)})
	paymentSrc := keyed.NewMemorySource[Payment]("payments", 1, true)
	paymentSrc.Append(0, nil, Payment{User: "ann", Order: "o1", Cents: 1250, At: t0.Add(4 * time.Minute)})
	paymentSrc.Append(0, nil, Payment{User: "bob", Order: "o2", Cents: 900, At: t0.Add(30 * time.Minute)}) // 29 minutes on: no pair

	job := keyed.NewJob("paid-orders", keyed.FS(vfs.NewMem()), keyed.Dir("/ckpt"))
	orders := keyed.FromSource[Order](job, "orders", 0, orderSrc).
		Timestamps(func(o Order, _ time.Time) time.Time { return o.At }).
		Watermarks(time.Minute)
	payments := keyed.FromSource[Payment](job, "payments", 0, paymentSrc).
		Timestamps(func(p Payment, _ time.Time) time.Time { return p.At }).
		Watermarks(time.Minute)

	// Both inputs keyed by user with one hash: co-partitioned whatever
	// their topics.
	paid := keyed.IntervalJoin(
		keyed.KeyByString("user", func(o Order) string { return o.User }, orders),
		keyed.KeyByString("user", func(p Payment) string { return p.User }, payments),
		"paid", 0, 0, 10*time.Minute, // order.time+0 <= payment.time <= order.time+10m
		serde.JSON[Order](), serde.JSON[Payment](),
		func(user string, o Order, p Payment) string {
			return fmt.Sprintf("%s paid %s: %d cents after %v", user, o.ID, p.Cents, p.At.Sub(o.At))
		})
	// snippet:end
	sink := keyed.NewMemorySink[string]()
	keyed.ToSink(paid, "out", sink)
	if err := job.Run(context.Background()); err != nil {
		log.Fatal(err)
	}
	for _, r := range sink.Committed() {
		fmt.Println(r)
	}
	// Output:
	// ann paid o1: 1250 cents after 4m0s
}

// Click and Profile are the stream and the table of the table join.
type Click struct {
	User string    `json:"user"`
	Page string    `json:"page"`
	At   time.Time `json:"at"`
}

type Profile struct {
	Tier string `json:"tier"`
}

// Each click with its user's profile as it was at the click's time, from
// a changelog of profiles (a nil profile deletes the user's row).
func Example_tableJoin() {
	// snippet:table
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	clickSrc := keyed.NewMemorySource[Click]("clicks", 1, true)
	clickSrc.Append(0, []byte("ann"), Click{User: "ann", Page: "/a", At: t0})
	clickSrc.Append(0, []byte("ann"), Click{User: "ann", Page: "/b", At: t0.Add(2 * time.Minute)})
	clickSrc.Append(0, []byte("ann"), Click{User: "ann", Page: "/c", At: t0.Add(4 * time.Minute)})
	clickSrc.Append(0, []byte("bob"), Click{User: "bob", Page: "/a", At: t0})
	profileSrc := keyed.NewMemorySource[*Profile]("profiles", 1, true)
	profileSrc.AppendAt(0, []byte("ann"), &Profile{Tier: "free"}, t0.Add(-time.Hour))
	profileSrc.AppendAt(0, []byte("ann"), &Profile{Tier: "gold"}, t0.Add(time.Minute))
	profileSrc.AppendAt(0, []byte("ann"), nil, t0.Add(3*time.Minute)) // a tombstone: ann's row is deleted

	job := keyed.NewJob("enrich", keyed.FS(vfs.NewMem()), keyed.Dir("/ckpt"))
	clicks := keyed.FromSource[Click](job, "clicks", 0, clickSrc).
		Timestamps(func(c Click, _ time.Time) time.Time { return c.At }).
		Watermarks(time.Minute)
	// With Kafka: kafkaio.NewSource(client, "profiles", serde.Nullable(serde.JSON[Profile]())),
	// a compacted topic whose tombstones read as nil. Its time is the Kafka timestamp.
	profiles := keyed.FromSource[*Profile](job, "profiles", 0, profileSrc).Watermarks(0)

	// KeyBy, not KeyByString: both sides' keys are []byte, as KeyByRecordKey's.
	enriched := keyed.TableJoin(
		keyed.KeyBy("user", func(c Click) []byte { return []byte(c.User) }, clicks),
		keyed.KeyByRecordKey("user", profiles), // a tombstone has no value to key by
		"enrich", 0, serde.JSON[Click](), serde.JSON[Profile](),
		func(user []byte, c Click, p Profile, found bool) (string, bool) {
			if !found {
				return fmt.Sprintf("%s %s: no profile", user, c.Page), true
			}
			return fmt.Sprintf("%s %s: %s", user, c.Page, p.Tier), true
		})
	// snippet:end
	sink := keyed.NewMemorySink[string]()
	keyed.ToSink(enriched, "enriched", sink)
	if err := job.Run(context.Background()); err != nil {
		log.Fatal(err)
	}
	for _, r := range slices.Sorted(slices.Values(sink.Committed())) {
		fmt.Println(r)
	}
	// Output:
	// ann /a: free
	// ann /b: gold
	// ann /c: no profile
	// bob /a: no profile
}

// Rule is a blocked page, or (Blocked false) one unblocked again.
type Rule struct {
	Page    string
	Blocked bool
}

// snippet:broadcast
// checker drops views of blocked pages.
type checker struct {
	blocked *keyed.BroadcastState[string, bool]
}

func (c *checker) Open(b *keyed.Backend) (err error) {
	c.blocked, err = keyed.BroadcastMap(b, "blocked", serde.String(), serde.JSON[bool]())
	return err
}

// ProcessBroadcast runs on every task, for each rule.
func (c *checker) ProcessBroadcast(r Rule, out *keyed.Collector[string]) error {
	if r.Blocked {
		c.blocked.Put(r.Page, true)
	} else {
		c.blocked.Delete(r.Page)
	}
	return nil
}

// Process runs for each view, on the task that owns its key.
func (c *checker) Process(user []byte, v View, out *keyed.Collector[string]) error {
	if _, blocked := c.blocked.Get(v.Page); !blocked {
		out.Emit(v.User + " " + v.Page)
	}
	return nil
}

// snippet:end

// Rules every task applies, read before the events.
func Example_broadcast() {
	viewSrc := keyed.NewMemorySource[View]("views", 2, true)
	viewSrc.Append(0, []byte("ann"), View{User: "ann", Page: "/home"})
	viewSrc.Append(0, []byte("ann"), View{User: "ann", Page: "/admin"})
	viewSrc.Append(1, []byte("bob"), View{User: "bob", Page: "/old"})
	ruleSrc := keyed.NewMemorySource[Rule]("rules", 1, true)
	ruleSrc.Append(0, nil, Rule{Page: "/admin", Blocked: true})
	ruleSrc.Append(0, nil, Rule{Page: "/old", Blocked: true})

	// snippet:broadcastjob
	job := keyed.NewJob("checked-views", keyed.FS(vfs.NewMem()), keyed.Dir("/ckpt"))
	views := keyed.FromSource[View](job, "views", 0, viewSrc)
	rules := keyed.FromSource[Rule](job, "rules", 1, ruleSrc).Auxiliary() // read first, not waited for
	checked := keyed.ProcessBroadcast(keyed.ByPartition(views), keyed.Broadcast(rules), "check", 0,
		func() keyed.BroadcastOperator[View, Rule, string] { return &checker{} })
	// snippet:end
	sink := keyed.NewMemorySink[string]()
	keyed.ToSink(checked, "checked", sink)
	if err := job.Run(context.Background()); err != nil {
		log.Fatal(err)
	}
	fmt.Println(sink.Committed())
	// Output: [ann /home]
}

// Validate reports every declaration error at once, before anything runs.
func Example_validate() {
	// snippet:validate
	src := keyed.NewMemorySource[View]("views", 1, true)
	job := keyed.NewJob("broken", keyed.FS(vfs.NewMem()), keyed.Dir("/ckpt"))
	bots := keyed.NewSideOutput[View]("bots")
	counts := keyed.Process(keyed.ByPartition(keyed.FromSource[View](job, "views", 0, src)), "count", 0,
		func() keyed.Operator[View, UserCount] { return &counter{bots: bots} })
	keyed.Side(counts, bots) // taken, but sent nowhere
	keyed.ToSink(counts, "counts", keyed.NewMemorySink[UserCount]())
	keyed.ToSink(counts, "again", keyed.NewMemorySink[UserCount]()) // a second sink that commits apart
	fmt.Println(job.Validate())
	// snippet:end

	// Output:
	// keyed: job "broken": stage "count": its side output "bots" (Side) goes nowhere: send it to a sink or key it into a further stage
	// keyed: sinks "counts" and "again" would commit apart: a job commits through its first sink, and a further sink must write inside that commit (connector.Participant: kafkaio.Output of the first Kafka sink, keyed.MemoryOutput of a MemorySink) or finish after it (connector.Follower: filesink)
}
