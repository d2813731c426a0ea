package files_test

import (
	"context"
	"fmt"
	"io/fs"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/parquet-go/parquet-go"
	"gocloud.dev/blob/memblob"

	"github.com/kordproject/kord/filesink"
	"github.com/kordproject/kord/filesink/hive"
	"github.com/kordproject/kord/kafkaio"
	"github.com/kordproject/kord/keyed"
	"github.com/kordproject/kord/kordtest"
	"github.com/kordproject/kord/producer"
	"github.com/kordproject/kord/serde"
	"github.com/kordproject/kord/vfs"
)

// snippet:stage
// View is one page view, the row a file holds.
type View struct {
	User   string `json:"user" parquet:"user"`
	Page   string `json:"page" parquet:"page"`
	Action string `json:"action" parquet:"action"`
	TimeMs int64  `json:"time_ms" parquet:"time_ms"` // event time, Unix ms
	N      int64  `json:"n" parquet:"n"`             // the user's nth view
}

// numbered is the job's keyed stage: each user's views numbered in keyed
// state, by partition (the source's records are keyed by user).
func numbered(views *keyed.Stream[View]) *keyed.Stream[View] {
	return keyed.ProcessValue(keyed.ByPartition(views), "number", 0, serde.Int64(),
		func(_ []byte, v View, n *keyed.ValueState[int64], out *keyed.Collector[View]) error {
			c, _ := n.Get()
			n.Set(c + 1)
			v.N = c + 1
			out.Emit(v)
			return nil
		})
}

// snippet:end

var hour8 = time.Date(2026, 12, 3, 8, 0, 0, 0, time.UTC)

// viewList is the input: five views of two users.
func viewList() []View {
	return []View{
		{User: "ann", Page: "/home", Action: "view"},
		{User: "bob", Page: "/cart", Action: "view"},
		{User: "ann", Page: "/cart", Action: "buy"},
		{User: "bob", Page: "/home", Action: "view"},
		{User: "ann", Page: "/home", Action: "view"},
	}
}

// views is a bounded in-memory source of page views on two partitions,
// keyed by user, over two hours of event time.
func views() *keyed.MemorySource[View] {
	src := keyed.NewMemorySource[View]("views", 2, true) // bounded: Run returns at its end
	for i, v := range viewList() {
		t := hour8.Add(time.Duration(i) * 25 * time.Minute) // 08:00, 08:25, 08:50, 09:15, 09:40
		v.TimeMs = t.UnixMilli()
		part := int32(0)
		if v.User == "bob" {
			part = 1
		}
		src.AppendAt(part, []byte(v.User), v, t)
	}
	return src
}

// A job whose only sink is a file sink: page views land in a directory as
// JSON lines, one bucket (a subdirectory) per action. The source is
// bounded, so Run returns after the final checkpoint committed; the file
// sink, as the job's only sink, decided that commit itself.
func Example_jsonLines() {
	ctx := context.Background()
	// snippet:jsonlines
	lake, ckpt := tempDir("lake"), tempDir("ckpt") // the files; the job's checkpoints
	defer os.RemoveAll(lake)
	defer os.RemoveAll(ckpt)

	job := keyed.NewJob("views", keyed.Dir(ckpt))
	views := numbered(keyed.FromSource[View](job, "views", 1, views()))
	keyed.ToSink(views, "lake", filesink.New(
		filesink.Dir(vfs.Default(), lake),               // the operating system's file system
		filesink.JSONLines[View](filesink.Uncompressed), // .jsonl; Snappy or Zstd compress it
		filesink.BucketBy(func(v View) string { return "action=" + v.Action })))
	if err := job.Run(ctx); err != nil {
		log.Fatal(err)
	}
	// snippet:end

	for _, f := range files(lake) {
		fmt.Println(mask(f))
	}
	rows, err := os.ReadFile(filepath.Join(lake, "action=buy", only(lake, "action=buy")))
	must(err)
	fmt.Print(string(rows))
	// Output:
	// _kord/views.commit
	// action=buy/part-views-RUN-N.jsonl
	// action=view/part-views-RUN-N.jsonl
	// {"user":"ann","page":"/cart","action":"buy","time_ms":1796287800000,"n":2}
}

// The file sink beside a Kafka sink, on kordtest's in-process cluster:
// the Kafka sink, the job's first, decides each commit (its transaction
// carries the commit record), and the file sink publishes the files of a
// checkpoint once that commit succeeded. The files and the Kafka output
// of a checkpoint land together or not at all.
func Example_besideKafka() {
	ctx := context.Background()
	ckpt := tempDir("views-ckpt")
	defer os.RemoveAll(ckpt)
	lake := tempDir("lake")
	defer os.RemoveAll(lake)
	cluster, err := kordtest.NewCluster(kordtest.Topic("views", 2), kordtest.Topic("numbered", 2))
	must(err)
	defer cluster.Close()
	client, err := cluster.Client()
	must(err)
	produce(ctx, cluster, "views")

	// snippet:kafka
	job := keyed.NewJob("views-kafka", keyed.Dir(ckpt))
	views := numbered(keyed.FromSource(job, "views", 0,
		kafkaio.NewSource(client, "views", serde.JSON[View](), kafkaio.Bounded())))
	keyed.ToSink(views, "kafka", kafkaio.NewSink(client, "numbered", serde.JSON[View]())) // first: decides each commit
	keyed.ToSink(views, "lake", filesink.New(filesink.Dir(vfs.Default(), lake),           // follows it
		filesink.Parquet[View](filesink.Snappy),
		filesink.BucketBy(func(v View) string { return "action=" + v.Action })))
	if err := job.Run(ctx); err != nil {
		log.Fatal(err)
	}
	// snippet:end

	recs, err := kordtest.ReadCommitted(ctx, client, "numbered")
	must(err)
	fmt.Println("records in the topic:", len(recs))
	show(lake)
	// Output:
	// records in the topic: 5
	// action=buy/part-views-kafka-RUN-N.parquet rows: 1
	// action=view/part-views-kafka-RUN-N.parquet rows: 4
}

// The same views as Parquet, partitioned by event hour as Hive lays out
// a table (dt=.../hr=...). An hour is committed, here with a _SUCCESS
// file, once the watermark has passed its end; the end of a bounded input
// passes every hour.
func Example_parquetHourly() {
	ctx := context.Background()
	ckpt := tempDir("views-ckpt")
	defer os.RemoveAll(ckpt)
	lake := tempDir("lake")
	defer os.RemoveAll(lake)
	// snippet:hourly
	job := keyed.NewJob("views-hourly", keyed.Dir(ckpt))
	views := keyed.FromSource[View](job, "views", 1, views()).
		Timestamps(func(v View, _ time.Time) time.Time { return time.UnixMilli(v.TimeMs) }).
		Watermarks(5 * time.Second) // out-of-order records allowed, per input partition
	keyed.ToSink(numbered(views), "lake", filesink.New(
		filesink.Dir(vfs.Default(), lake),
		filesink.Parquet[View](filesink.Zstd),
		filesink.PartitionBy(filesink.Hourly[View]()...),             // dt=2026-12-03/hr=08, by event time
		filesink.CommitPartitions(time.Hour, filesink.SuccessFile()), // once the watermark passed the hour
		filesink.Late(filesink.LateInto("_late"))))                   // late rows never join a committed hour
	if err := job.Run(ctx); err != nil {
		log.Fatal(err)
	}
	// snippet:end

	show(lake)
	// Output:
	// _kord/views-hourly.commit
	// dt=2026-12-03/hr=08/_SUCCESS
	// dt=2026-12-03/hr=08/part-views-hourly-RUN-N.parquet rows: 3
	// dt=2026-12-03/hr=09/_SUCCESS
	// dt=2026-12-03/hr=09/part-views-hourly-RUN-N.parquet rows: 2
}

// The same job writing to an object store through gocloud.dev/blob:
// here its in-memory driver, in production s3blob, gcsblob or azureblob
// (the program imports the driver it opens).
func Example_bucket() {
	ctx := context.Background()
	ckpt := tempDir("views-ckpt")
	defer os.RemoveAll(ckpt)
	// snippet:bucket
	bucket := memblob.OpenBucket(nil) // or blob.OpenBucket(ctx, "s3://my-bucket?region=eu-west-1")
	defer bucket.Close()              // the bucket stays the caller's to close

	job := keyed.NewJob("views-bucket", keyed.Dir(ckpt))
	views := numbered(keyed.FromSource[View](job, "views", 1, views()))
	keyed.ToSink(views, "lake", filesink.New(
		filesink.Bucket(bucket, "lake/views/"),
		filesink.JSONLines[View](filesink.Zstd), // .jsonl.zst
		filesink.BucketBy(func(v View) string { return "action=" + v.Action })))
	if err := job.Run(ctx); err != nil {
		log.Fatal(err)
	}
	// snippet:end

	it := bucket.List(nil)
	var keys []string
	for {
		obj, err := it.Next(ctx)
		if err != nil {
			break
		}
		keys = append(keys, mask(obj.Key))
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Println(k)
	}
	// Output:
	// lake/views/_kord/views-bucket.commit
	// lake/views/action=buy/part-views-bucket-RUN-N.jsonl.zst
	// lake/views/action=view/part-views-bucket-RUN-N.jsonl.zst
}

// Hourly partitions registered in a Hive Metastore. It needs a Metastore
// (scripts/hive-metastore.sh starts one), so go test compiles it and does
// not run it.
func Example_hive() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	client, err := kafkaio.NewClient(kafkaio.Brokers("broker1:9092"))
	must(err)
	job := keyed.NewJob("views-hive")
	views := keyed.FromSource(job, "views", 0, kafkaio.NewSource(client, "views", serde.JSON[View]())).
		Timestamps(func(v View, _ time.Time) time.Time { return time.UnixMilli(v.TimeMs) }).
		Watermarks(5 * time.Second)
	// snippet:hive
	table := hive.Table[View]("metastore:9083", "kord", "views", "file:///data/lake/views")
	lake := filesink.New(filesink.Dir(vfs.Default(), "/data/lake/views"), filesink.Parquet[View](filesink.Zstd),
		filesink.PartitionBy(filesink.Hourly[View]()...),
		filesink.CommitPartitions(time.Hour, filesink.SuccessFile(), table), // _SUCCESS, then the Metastore
		filesink.Late(filesink.LateInto("_late")))
	keyed.ToSink(numbered(views), "lake", lake)
	// snippet:end
	must(job.Run(ctx)) // until SIGTERM
	parts, err := table.Partitions(ctx)
	must(err)
	fmt.Println(parts)
}

// produce writes the views to topic, keyed by user, with kord's producer
// (Java's placement: a user's views in one partition).
func produce(ctx context.Context, c *kordtest.Cluster, topic string) {
	p, err := producer.New(serde.String(), serde.JSON[View](), producer.Brokers(c.Brokers()...))
	must(err)
	defer p.Close()
	for i, v := range viewList() {
		v.TimeMs = hour8.Add(time.Duration(i) * 25 * time.Minute).UnixMilli()
		must(p.Produce(ctx, producer.Record[string, View]{Topic: topic, Key: v.User, Value: v}, nil))
	}
	must(p.Flush(ctx))
}

// files lists what a reader sees under dir: every file whose name does
// not start with a dot.
func files(dir string) []string {
	var out []string
	must(filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasPrefix(d.Name(), ".") {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		out = append(out, filepath.ToSlash(rel))
		return nil
	}))
	sort.Strings(out)
	return out
}

// show prints what a reader sees under dir, with the rows of each Parquet
// file.
func show(dir string) {
	for _, f := range files(dir) {
		if !strings.HasSuffix(f, ".parquet") {
			fmt.Println(mask(f))
			continue
		}
		rows, err := parquet.ReadFile[View](filepath.Join(dir, f))
		must(err)
		fmt.Println(mask(f), "rows:", len(rows))
	}
}

// only is the one visible file in dir/bucket.
func only(dir, bucket string) string {
	var names []string
	entries, err := os.ReadDir(filepath.Join(dir, bucket))
	must(err)
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), ".") {
			names = append(names, e.Name())
		}
	}
	if len(names) != 1 {
		log.Fatalf("%s: %d files, want 1", bucket, len(names))
	}
	return names[0]
}

// partName is a published part's name: part-<job>-<run>-<n><ext>.
var partName = regexp.MustCompile(`-[0-9a-f]{12}-[0-9]+\.`)

func mask(name string) string { return partName.ReplaceAllString(name, "-RUN-N.") }

func tempDir(prefix string) string {
	d, err := os.MkdirTemp("", prefix)
	must(err)
	return d
}

func must(err error) {
	if err != nil {
		log.Fatal(err)
	}
}
