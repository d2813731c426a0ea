package keyed

import (
	"time"

	"github.com/kordproject/kord/keyed/internal/channel"
)

// Collector sends an operator's results downstream, and tells it about the
// record it is processing (its context, as Flink's ProcessFunction.Context
// and Kafka Streams' ProcessorContext do).
type Collector[O any] struct {
	emit   emit[O]
	one    [1]channel.Element[O] // Emit's batch
	direct *channel.Outbox[O]    // instead of emit: to the sink alone
	sides  map[any]any           // side outputs' emit functions (emit[S]), by tag
	err    error
	key    []byte
	ts     int64
	wm     int64
	timers *timers // nil unless the operator is a TimerOperator
	n      int64   // records emitted, for the stage's figures (opTask.counted)
}

// Emit sends v on, with the time of the record being processed (or of the
// timer firing). It blocks while downstream is backpressured, until the
// run stops.
func (c *Collector[O]) Emit(v O) {
	if c.err != nil {
		return
	}
	c.n++
	if c.direct != nil {
		c.err = c.direct.Add(0, channel.Element[O]{V: v, TS: c.ts})
		return
	}
	c.one[0] = channel.Element[O]{V: v, TS: c.ts}
	c.err = c.emit(c.one[:])
	var zero channel.Element[O]
	c.one[0] = zero
}

// Timestamp is the time of the record being processed, at millisecond
// precision (Kafka's): its Kafka timestamp, or what Stream.Timestamps
// extracted; the zero time if it has none.
func (c *Collector[O]) Timestamp() time.Time {
	if c.ts == channel.NoTime {
		return time.Time{}
	}
	return time.UnixMilli(c.ts)
}

// Watermark is the operator task's event-time watermark: the minimum of
// the watermarks its inputs sent (Stream.Watermarks), so that a record
// older than it is late. The zero time while some input has sent none (or
// none of the job's sources makes watermarks); far in the future once
// every bounded input ended. It never goes backwards within a run.
func (c *Collector[O]) Watermark() time.Time {
	if c.wm == channel.NoTime {
		return time.Time{}
	}
	return time.UnixMilli(c.wm)
}

// Key is the key of the record being processed, as Process gets it:
// read-only and valid only during the call.
func (c *Collector[O]) Key() []byte { return c.key }
