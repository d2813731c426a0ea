package keyed_test

import (
	"context"
	"fmt"
	"os"
	"sort"

	"github.com/kordproject/kord/keyed"
	"github.com/kordproject/kord/keyed/connector"
	"github.com/kordproject/kord/serde"
)

// clicks counts each user's clicks in keyed state.
type clicks struct{ n *keyed.ValueState[int64] }

func (c *clicks) Open(b *keyed.Backend) (err error) {
	c.n, err = keyed.Value(b, "clicks", serde.Int64())
	return err
}

func (c *clicks) Process(key []byte, page string, out *keyed.Collector[string]) error {
	n, _ := c.n.Get()
	c.n.Set(n + 1)
	out.Emit(fmt.Sprintf("%s clicked %s (click %d)", key, page, n+1))
	return nil
}

// A keyed job over an in-memory source: each user's events are counted by
// the one task that owns the user's key group, in order, and the results
// become visible when the checkpoint carrying them commits.
func Example() {
	dir, _ := os.MkdirTemp("", "kord-example")
	defer os.RemoveAll(dir)

	src := keyed.NewMemorySource[string]("clicks", 2, true)
	src.Append(0, []byte("ana"), "/home")
	src.Append(1, []byte("bo"), "/cart")
	src.Append(0, []byte("ana"), "/pay")

	j := keyed.NewJob("click-counts", keyed.Dir(dir))
	s := keyed.FromSource(j, "clicks", 1, connector.Source[string](src))
	out := keyed.Process(keyed.ByPartition(s), "count", 2, func() keyed.Operator[string, string] { return &clicks{} })
	sink := keyed.NewMemorySink[string]()
	keyed.ToSink(out, "results", connector.Sink[string](sink))
	if err := j.Run(context.Background()); err != nil {
		fmt.Println(err)
		return
	}
	res := sink.Committed()
	sort.Strings(res)
	for _, r := range res {
		fmt.Println(r)
	}
	// Output:
	// ana clicked /home (click 1)
	// ana clicked /pay (click 2)
	// bo clicked /cart (click 1)
}
