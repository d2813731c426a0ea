package readme_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"sort"

	"github.com/kordproject/kord/kafkaio"
	"github.com/kordproject/kord/keyed"
	"github.com/kordproject/kord/kordtest"
	"github.com/kordproject/kord/producer"
	"github.com/kordproject/kord/serde"
)

// The README's first job, whole: it runs on kordtest's in-process cluster
// (go test ./docs/snippets/readme/ runs it).
func Example() {
	// snippet:job
	ctx := context.Background()
	cluster, err := kordtest.NewCluster(kordtest.Topic("clicks", 4), kordtest.Topic("counts", 4))
	must(err)
	defer cluster.Close()
	client, err := cluster.Client() // against a real cluster: kafkaio.NewClient(kafkaio.Brokers("host:9092"))
	must(err)

	// Input: clicks keyed by user, placed as Java's producer places them.
	p, err := producer.New(serde.String(), serde.String(), producer.Brokers(cluster.Brokers()...))
	must(err)
	for _, c := range [][2]string{{"ann", "/home"}, {"bob", "/cart"}, {"ann", "/cart"}} {
		must(p.Produce(ctx, producer.Record[string, string]{Topic: "clicks", Key: c[0], Value: c[1]}, nil))
	}
	must(p.Flush(ctx))
	p.Close()

	// The job: count each user's clicks in keyed state, exactly once.
	dir, err := os.MkdirTemp("", "click-counts")
	must(err)
	defer os.RemoveAll(dir)
	job := keyed.NewJob("click-counts", keyed.Dir(dir)) // the name: transactional id, commit group
	clicks := keyed.FromSource(job, "clicks", 2,
		kafkaio.NewSource(client, "clicks", serde.String(), kafkaio.Bounded())) // Bounded: Run returns at the end
	counts := keyed.ProcessValue(keyed.ByPartition(clicks), "count", 2, serde.Int64(),
		func(user []byte, page string, n *keyed.ValueState[int64], out *keyed.Collector[string]) error {
			c, _ := n.Get()
			n.Set(c + 1)
			out.Emit(fmt.Sprintf("%s: %d (%s)", user, c+1, page))
			return nil
		})
	keyed.ToSink(counts, "counts", kafkaio.NewSink(client, "counts", serde.String()))
	must(job.Run(ctx))

	// What a read_committed consumer sees.
	out, err := kordtest.ReadCommitted(ctx, client, "counts")
	must(err)
	var lines []string
	for _, r := range out {
		lines = append(lines, string(r.Value))
	}
	sort.Strings(lines)
	fmt.Println(lines)
	// snippet:end

	// Output: [ann: 1 (/home) ann: 2 (/cart) bob: 1 (/cart)]
}

func must(err error) {
	if err != nil {
		log.Fatal(err)
	}
}
