// Package rdkbatch reads a confluent-kafka-go consumer's queue in batches:
// one cgo call takes up to N events off the queue that Consumer.Poll
// reads, and the records' keys, values and header values are copied into
// one Go allocation per batch. It calls the librdkafka that
// confluent-kafka-go already links (the static bundle, or the system's
// with -tags dynamic): its C preamble declares the few public functions
// and types it needs, and it links nothing itself.
//
// # What it reads, and why not rd_kafka_consume_batch_queue
//
// A batch is exactly what as many consecutive Consumer.Poll calls would
// have returned, without the Go objects. Its C loop calls
// rd_kafka_queue_poll on confluent-kafka-go's own queue handle (the
// consumer group queue, rd_kafka_queue_get_consumer, into which
// rd_kafka_poll_set_consumer forwards the main queue; consumer.go,
// NewConsumer), the function Poll calls (event.go, _rk_queue_poll), so
// librdkafka treats each event as it does under Poll:
//
//   - a message is taken with rd_kafka_event_message_next, which advances
//     the partition's application position past it
//     (rdkafka_event.c, rd_kafka_event_message_next, calling
//     rd_kafka_fetch_op_app_prepare);
//   - transaction control records never leave the queue as events:
//     rd_kafka_op_handle_std advances the position past them and destroys
//     them (rdkafka_op.c);
//   - records of an older assignment or seek (an older op version) are
//     dropped by rd_kafka_op_filter before they are returned
//     (rdkafka_queue.c, rd_kafka_q_pop_serve0);
//   - partition ends and consumer errors (RD_KAFKA_OP_CONSUMER_ERR: an
//     offset out of range with auto.offset.reset=error, say) and client
//     errors (RD_KAFKA_OP_ERR: a broker down, an authentication failure,
//     which reach this queue because confluent-kafka-go enables
//     RD_KAFKA_EVENT_ERROR) come as error events with their codes
//     (rdkafka_event.h, rd_kafka_op2event and rd_kafka_event_setup, which
//     also turns RD_KAFKA_RESP_ERR__FATAL into the underlying fatal error).
//
// rd_kafka_consume_batch_queue on the same queue would serve the non-fetch
// ops with RD_KAFKA_Q_CB_RETURN instead (rdkafka_queue.c,
// rd_kafka_q_serve_rkmessages, calling rd_kafka_poll_cb): a client error
// there goes to an error_cb, which confluent-kafka-go does not set, so
// librdkafka only logs it (rdkafka.c, rd_kafka_poll_cb, case
// RD_KAFKA_OP_ERR), and its code, which kord's sources sort into ErrAuth
// and the passing kind, is lost; and an op it passes that is neither a
// fetch nor a consumer error (an offset commit result while
// RD_KAFKA_EVENT_OFFSET_COMMIT is enabled, as confluent-kafka-go enables
// it) reaches rd_kafka_message_get, which asserts (rdkafka_msg.c). rdkafka.h
// also documents it for queues of the legacy consumer
// (rd_kafka_consume_start_queue) only. librdkafka's author advises
// iterating the single-message API instead, since the messages are already
// queued (librdkafka issues #1271 and #793): this package does that in C.
//
// A batch ends after max events, when the queue is empty (only the first
// poll waits), or after a client error, so that nothing is read past an
// error: the caller sees the error after exactly the records before it, as
// with Poll.
//
// Build with the kordnobatch tag for the per-record path only: New then
// fails with ErrUnsupported, and Enabled is false.
package rdkbatch

import (
	"errors"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// ErrUnsupported means the batch path is not built in (the kordnobatch
// tag), or this confluent-kafka-go or librdkafka is not one it knows: the
// caller reads with Consumer.Poll.
var ErrUnsupported = errors.New("rdkbatch: the batch read path is not available")

// ErrClosed means the consumer was closed.
var ErrClosed = errors.New("rdkbatch: consumer closed")

// Message is one record, its bytes copied into Go memory. The fields are
// what Consumer.Poll's *kafka.Message carries: Key and Value are nil for a
// null key or value and empty (not nil) for an empty one; a header's Value
// likewise; Timestamp is zero and TimestampType TimestampNotAvailable when
// the record has no timestamp.
type Message struct {
	Topic         string
	Partition     int32
	Offset        int64
	Key           []byte
	Value         []byte
	Headers       []kafka.Header
	Timestamp     time.Time
	TimestampType kafka.TimestampType
	// LeaderEpoch is the partition leader epoch of the record's batch, -1
	// when unknown.
	LeaderEpoch int32
}

// EOF is the consumer reaching the end of a partition
// (enable.partition.eof): Offset is the partition's end then, At the
// number of the batch's Messages read before it.
type EOF struct {
	Topic     string
	Partition int32
	Offset    int64
	At        int
}

// Batch is what one Read took off the queue, in order: Messages, the EOFs
// among them, and at most one client error, after all of them.
type Batch struct {
	Messages []Message
	EOFs     []EOF
	// Err is the error event that ended the batch, a kafka.Error as
	// Consumer.Poll returns it (its code, its string, IsFatal), or nil.
	Err error
	// ErrTopic, ErrPartition and ErrOffset name the partition and offset
	// Err is about, when librdkafka says (ErrTopic is then not empty):
	// Consumer.Poll does not pass them on.
	ErrTopic     string
	ErrPartition int32
	ErrOffset    int64
	// ErrOnMessage says Err came on a message, not as an error event:
	// where Consumer.Poll returns a *kafka.Message whose
	// TopicPartition.Error is set (to the code alone, which Err then
	// holds as Poll does, without a string), naming its partition. Not
	// seen on this queue, where librdkafka passes consumer errors as
	// error events; kept so that a caller can treat it as it treats
	// Poll's.
	ErrOnMessage bool
	// Ignored counts the events of other types taken off the queue and
	// dropped (statistics, offset commit results, token refresh requests),
	// as consumer.Source's Poll loop drops them.
	Ignored int
	// Reuse lets Read overwrite the previous batch's bytes and headers:
	// set it only when nothing holds on to the last batch's Messages.
	// Otherwise each Read allocates them afresh (one allocation each).
	Reuse bool

	buf  []byte
	hdrs []kafka.Header
}

// reset empties b for a new Read.
func (b *Batch) reset() {
	clear(b.Messages) // let the previous batch's bytes go
	b.Messages = b.Messages[:0]
	b.EOFs = b.EOFs[:0]
	b.Err, b.ErrTopic, b.ErrPartition, b.ErrOffset, b.ErrOnMessage = nil, "", 0, 0, false
	b.Ignored = 0
}

// Len is how many events the batch holds: messages, EOFs and the error.
func (b *Batch) Len() int {
	n := len(b.Messages) + len(b.EOFs)
	if b.Err != nil {
		n++
	}
	return n
}

// empty is the value of an empty, not null, key, value or header value
// when the batch has no bytes to slice it from.
var empty = []byte{}
