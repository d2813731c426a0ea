package concepts_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"sort"
	"time"

	"gocloud.dev/blob/memblob"

	"github.com/kordproject/kord/checkpoint"
	"github.com/kordproject/kord/checkpoint/blobstore"
	"github.com/kordproject/kord/keyed"
	"github.com/kordproject/kord/keyed/connector"
	"github.com/kordproject/kord/serde"
	"github.com/kordproject/kord/vfs"
)

// Event is one visit of a user to a page.
type Event struct {
	User string `json:"user"`
	Page string `json:"page"`
}

// Visit is what the operator emits for each event.
type Visit struct {
	User          string
	Page          string
	Total, OfPage int64
}

// snippet:operator
// visits keeps two states per user: a value (all the user's visits) and a
// map (the user's visits per page, each entry kept a day after its last write).
type visits struct {
	total *keyed.ValueState[int64]
	pages *keyed.MapState[string, int64]
}

func (v *visits) Open(b *keyed.Backend) (err error) {
	if v.total, err = keyed.Value(b, "total", serde.Int64()); err != nil {
		return err
	}
	v.pages, err = keyed.Map(b, "pages", serde.String(), serde.Int64(), keyed.TTL(24*time.Hour))
	return err
}

func (v *visits) Process(user []byte, e Event, out *keyed.Collector[Visit]) error {
	n, _ := v.total.Get() // the state of user, the record's key
	v.total.Set(n + 1)
	p, _ := v.pages.Get(e.Page)
	v.pages.Put(e.Page, p+1)
	out.Emit(Visit{User: string(user), Page: e.Page, Total: n + 1, OfPage: p + 1})
	return nil
}

// snippet:end

// check ends the example on an error.
func check(err error) {
	if err != nil {
		log.Fatal(err)
	}
}

// newJob declares the job on an in-memory source and sink.
func newJob(src *keyed.MemorySource[Event], sink *keyed.MemorySink[Visit], opts ...keyed.Opt) *keyed.Job {
	job := keyed.NewJob("visits", opts...)
	events := keyed.FromSource(job, "events", 0, connector.Source[Event](src))
	byUser := keyed.KeyByString("user", func(e Event) string { return e.User }, events)
	out := keyed.Process(byUser, "visits", 2, func() keyed.Operator[Event, Visit] { return &visits{} })
	keyed.ToSink(out, "out", connector.Sink[Visit](sink))
	return job
}

// printVisits prints visits grouped by user, users sorted, each user's in the
// order they were committed.
func printVisits(vs []Visit) {
	byUser := map[string][]Visit{}
	var users []string
	for _, v := range vs {
		if byUser[v.User] == nil {
			users = append(users, v.User)
		}
		byUser[v.User] = append(byUser[v.User], v)
	}
	sort.Strings(users)
	for _, u := range users {
		for _, v := range byUser[u] {
			fmt.Printf("%s #%d %s (page #%d)\n", v.User, v.Total, v.Page, v.OfPage)
		}
	}
}

// A job in memory, run twice on one checkpoint directory: each user's
// events are processed in order with the user's state, and the second run
// restores the state and offsets the first one committed.
func Example_restore() {
	dir, err := os.MkdirTemp("", "visits")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()

	// snippet:restore
	src := keyed.NewMemorySource[Event]("events", 2, true) // 2 partitions, bounded
	src.Append(0, nil, Event{"ann", "/home"})              // each user's events in one partition
	src.Append(1, nil, Event{"bob", "/home"})
	src.Append(0, nil, Event{"ann", "/cart"})
	sink := keyed.NewMemorySink[Visit]()
	job := newJob(src, sink, keyed.Dir(dir))
	check(job.Run(ctx))
	fmt.Println("first run:")
	printVisits(sink.Committed())

	first := len(sink.Committed())
	src.Append(0, nil, Event{"ann", "/home"})
	src.Append(1, nil, Event{"cy", "/help"})
	check(job.Run(ctx)) // restores the checkpoint the first run committed
	fmt.Println("second run:")
	printVisits(sink.Committed()[first:])
	// snippet:end

	// Output:
	// first run:
	// ann #1 /home (page #1)
	// ann #2 /cart (page #1)
	// bob #1 /home (page #1)
	// second run:
	// ann #3 /home (page #2)
	// cy #1 /help (page #1)
}

// Reading the committed checkpoint of a job that ran, as a tool would.
func Example_readCheckpoint() {
	dir, err := os.MkdirTemp("", "visits")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()
	src := keyed.NewMemorySource[Event]("events", 2, true)
	src.Append(0, nil, Event{"ann", "/home"})
	src.Append(1, nil, Event{"bob", "/home"})
	src.Append(0, nil, Event{"ann", "/cart"})
	if err := newJob(src, keyed.NewMemorySink[Visit](), keyed.Dir(dir)).Run(ctx); err != nil {
		log.Fatal(err)
	}

	// snippet:read
	store, err := checkpoint.OpenStore(vfs.Default(), dir) // locks dir; beside a running job: OpenSharedStore
	check(err)
	defer store.Close()
	ref, _, err := checkpoint.ReadCommitted(ctx, store) // the local marker; Kafka's record: kafkaio.ReadCommit
	check(err)
	m, files, err := checkpoint.ReadCheckpoint(ctx, store, ref.Run, ref.ID) // sizes and CRC32C checked
	check(err)
	fmt.Println("key groups:", m.MaxParallelism)
	for _, o := range m.Offsets {
		fmt.Printf("next offset of %s[%d]: %d\n", o.Topic, o.Partition, o.Offset)
	}
	for _, op := range m.Operators {
		fmt.Printf("operator %s: %s %s\n", op.Name, op.Type, op.SchemaFingerprint)
	}
	for _, f := range m.Files {
		fmt.Printf("file of %s from key group %d: %q...\n", f.Operator, f.KeyGroup, files[f.Name][:4])
	}
	// snippet:end

	// Output:
	// key groups: 128
	// next offset of events[0]: 2
	// next offset of events[1]: 1
	// operator visits: keyed.keyby key=user;maxParallelism=128
	// operator visits.pages: keyed.map key=string;value=ttl(int64-be)
	// operator visits.total: keyed.value int64-be
	// file of visits.pages from key group 0: "Obj\x01"...
	// file of visits.total from key group 0: "Obj\x01"...
}

// Checkpoints in a bucket: memblob here, S3, GCS or Azure with their
// gocloud.dev drivers.
func Example_bucket() {
	ctx := context.Background()
	src := keyed.NewMemorySource[Event]("events", 2, true)
	src.Append(0, nil, Event{"ann", "/home"})
	sink := keyed.NewMemorySink[Visit]()

	// snippet:bucket
	bucket := memblob.OpenBucket(nil) // or blob.OpenBucket(ctx, "s3://my-bucket?region=eu-west-1")
	defer bucket.Close()
	job := newJob(src, sink, keyed.CheckpointStorage(blobstore.New(bucket, "jobs/visits/")))
	// snippet:end
	if err := job.Run(ctx); err != nil {
		log.Fatal(err)
	}
	keys, err := blobstore.New(bucket, "jobs/visits/").List(ctx, "")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(len(keys) > 0)
	printVisits(sink.Committed())

	// Output:
	// true
	// ann #1 /home (page #1)
}
