// Command toysink runs a kord job into a toy sink written outside kord's
// module against its public connector interface only (connector.Sink): each
// user's events are counted exactly once and every result is appended to
// a text file as a line, committed with kord's checkpoints.
//
//	go run . -out /tmp/counts.txt -events 10000
//
// Run it twice with the same -out and -checkpoints: the second run
// restores what the first committed, so with the same input it adds
// nothing, and with more -events it appends only the results of the new
// events.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/kordproject/kord/keyed"
	"github.com/kordproject/kord/keyed/connector"
	"github.com/kordproject/kord/serde"
)

// Event is one user's action; Count is how many of the user's events the
// job has seen, this one included.
type Event struct {
	User string
	Seq  int
}

func main() {
	out := flag.String("out", "counts.txt", "the file the sink appends to")
	dir := flag.String("checkpoints", "toysink-checkpoints", "the checkpoint directory")
	events := flag.Int("events", 10_000, "events in the input")
	flag.Parse()
	n, err := run(context.Background(), *out, *dir, *events)
	if err != nil {
		fmt.Fprintln(os.Stderr, "toysink:", err)
		os.Exit(1)
	}
	fmt.Printf("%d committed lines in %s\n", n, *out)
}

// run counts the events of 100 users, events of them, into the line sink
// at out, and returns how many lines the file has committed.
func run(ctx context.Context, out, dir string, events int) (int, error) {
	src := keyed.NewMemorySource[Event]("events", 4, true)
	for i := 0; i < events; i++ {
		u := fmt.Sprintf("user-%02d", i%100)
		src.Append(int32(i%100%4), []byte(u), Event{User: u, Seq: i / 100})
	}
	j := keyed.NewJob("toysink", keyed.Dir(dir), keyed.CheckpointInterval(5*time.Millisecond))
	counts := keyed.ProcessValue(keyed.ByPartition(keyed.FromSource(j, "events", 2, connector.Source[Event](src))), "count", 2, serde.Int64(),
		func(_ []byte, e Event, n *keyed.ValueState[int64], out *keyed.Collector[string]) error {
			c, _ := n.Get()
			c++
			n.Set(c)
			out.Emit(fmt.Sprintf("%s %d %d", e.User, e.Seq, c))
			return nil
		})
	keyed.ToSink(counts, "lines", connector.Sink[string](NewLineSink(out, func(s string) string { return s })))
	if err := j.Run(ctx); err != nil {
		return 0, err
	}
	lines, err := Lines(out)
	return len(lines), err
}
