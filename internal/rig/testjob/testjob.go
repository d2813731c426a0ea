// Package testjob is the counting job the engine's and the Kafka edge's
// tests share: events numbered per user, a keyed counter that refuses an
// event out of order, and one result per event.
package testjob

import (
	"fmt"

	"github.com/kordproject/kord/keyed"
	"github.com/kordproject/kord/serde"
)

// Event is one user's event, numbered per user from 0.
type Event struct {
	UUID string `json:"uuid"`
	Seq  int64  `json:"seq"`
}

// Result answers one event with the user's count after it.
type Result struct {
	UUID  string `json:"uuid"`
	Seq   int64  `json:"seq"`
	Count int64  `json:"count"`
}

// Counter counts each key's events in keyed state and refuses an event out
// of order.
type Counter struct {
	count *keyed.ValueState[int64]
}

// Open implements keyed.Operator.
func (c *Counter) Open(b *keyed.Backend) (err error) {
	c.count, err = keyed.Value(b, "count", serde.Int64())
	return err
}

// Process implements keyed.Operator.
func (c *Counter) Process(_ []byte, e Event, out *keyed.Collector[Result]) error {
	n, _ := c.count.Get()
	if e.Seq != n {
		return fmt.Errorf("key %s: event seq %d after %d events: out of order", e.UUID, e.Seq, n)
	}
	c.count.Set(n + 1)
	out.Emit(Result{UUID: e.UUID, Seq: e.Seq, Count: n + 1})
	return nil
}

// TolerantCounter accepts the duplicates at-least-once mode replays
// (barriers are not aligned, so restored state may be ahead of the
// restored offsets): an event already counted is answered again with its
// own count.
type TolerantCounter struct{ Counter }

// Process implements keyed.Operator.
func (c *TolerantCounter) Process(key []byte, e Event, out *keyed.Collector[Result]) error {
	if string(key) != e.UUID {
		return fmt.Errorf("key %q for event of %s", key, e.UUID)
	}
	n, _ := c.count.Get()
	switch {
	case e.Seq < n: // a replayed duplicate
		out.Emit(Result{UUID: e.UUID, Seq: e.Seq, Count: e.Seq + 1})
		return nil
	case e.Seq > n:
		return fmt.Errorf("key %s: seq %d after %d: lost or reordered", e.UUID, e.Seq, n)
	}
	return c.Counter.Process(key, e, out)
}
