// Package rdkproduce enqueues a batch of records on a confluent-kafka-go
// producer in one cgo call: a C loop calls rd_kafka_producev once per
// record, as kafka.Producer.Produce does once per cgo call. It calls the
// librdkafka confluent-kafka-go already links (the static bundle, or the
// system's with -tags dynamic): its C preamble declares the few public
// functions and constants of librdkafka's API it needs (rdkafka.h, v2.11.1)
// and includes no librdkafka header.
//
// producer.Producer.ProduceBatch uses it on a producer without delivery
// reports (the exactly-once sink's).
//
// # Why not rd_kafka_produce_batch
//
// rd_kafka_produce_batch (rdkafka_msg.c) takes one topic handle per call,
// creates every message with no headers (it passes NULL headers to
// rd_kafka_msg_new0) and with the time of the call as its timestamp
// (utc_now), whatever the record had. kord writes headers and event times,
// to many topics.
//
// # What Write keeps, by librdkafka's source (v2.11.1)
//
// Each record goes through rd_kafka_producev, the function
// kafka.Producer.Produce calls (confluent-kafka-go kafka/producer.go,
// do_produce), with the same arguments but the opaque: the topic handle,
// an explicit partition (RD_KAFKA_V_PARTITION: the partitioner of kord is
// the one that decides, and librdkafka only checks the partition exists,
// rd_kafka_msg_partitioner), RD_KAFKA_MSG_F_COPY, the value, the key, the
// timestamp in milliseconds (0 when the record has none: librdkafka then
// stamps the time of the call, rd_kafka_msg_new0, as it does for Produce),
// and a header list built with rd_kafka_header_add. So:
//
//   - Order: rd_kafka_msg_partitioner hands each message to
//     rd_kafka_toppar_enq_msg (rdkafka_partition.c), which, under the
//     partition's lock, numbers it with the partition's next msgid and
//     appends it to the partition's queue (FIFO queuing, the default; the
//     sorted queue sorts by that msgid). The idempotent producer's sequence
//     numbers come from that msgid (rdkafka_msg.c,
//     rd_kafka_msgbatch_set_first_msg). One thread
//     enqueuing in a given order is the order written, per partition, as
//     with Produce.
//   - Idempotence and transactions: rd_kafka_producev first calls
//     rd_kafka_check_produce (a fatal error refuses the record with
//     RD_KAFKA_RESP_ERR__FATAL; a transactional state that does not allow
//     producing refuses it with RD_KAFKA_RESP_ERR__STATE), and
//     rd_kafka_msg_partitioner adds the partition to the open transaction
//     (rd_kafka_txn_add_partition): nothing differs from Produce.
//   - Nulls: a NULL key or value pointer is a null key or value; a non-NULL
//     pointer with length 0 an empty one (rd_kafka_msg_new00 copies the key
//     only when the pointer is not NULL; the value likewise under
//     RD_KAFKA_MSG_F_COPY). A header whose value pointer is NULL is a null
//     header value (rd_kafka_header_add).
//   - A full queue: rd_kafka_msg_new0 fails with
//     RD_KAFKA_RESP_ERR__QUEUE_FULL before it allocates the message
//     (rd_kafka_curr_msgs_add, rdkafka_int.h), so a refused record is not
//     enqueued. Write stops at the first refused record and returns how
//     many went before it: the caller waits (Flush, or the events it
//     serves) and writes the rest, in order.
//
// # Delivery reports
//
// The records carry no opaque (msg_opaque NULL), as Produce's do when it is
// given neither a delivery channel nor an Opaque (it then passes cgoid 0).
// confluent-kafka-go's delivery report handler (kafka/event.go, eventPoll,
// RD_KAFKA_EVENT_DR) looks the opaque up in its cgo map only when it is not
// NULL; otherwise it sends the report to Producer.Events when
// go.delivery.reports is on (a *kafka.Message with no Opaque) and drops it
// when it is off. So a Write record is reported exactly as such a Produce
// record is: nothing crashes, and nothing is left in the cgo map.
//
// # Handles
//
// New reads the rd_kafka_t of the producer (the unexported handle.rk of
// kafka.Producer) by reflection, and fails with ErrUnsupported when the
// layout is not the one it knows. The Writer holds its own reference to
// each topic's handle (rd_kafka_topic_new returns the producer's existing
// one, counted); Close releases them: close the Writer before the
// producer, and never write while the producer closes.
//
// Build with the kordnobatch tag for the per-record path only: New then
// fails with ErrUnsupported.
package rdkproduce

import (
	"errors"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// ErrUnsupported means the batch produce path is not built in (the
// kordnobatch tag, or no cgo), or this confluent-kafka-go or librdkafka is
// not one it knows: the caller produces with kafka.Producer.Produce.
var ErrUnsupported = errors.New("rdkproduce: the batch produce path is not available")

// ErrClosed means the Writer or its producer was closed.
var ErrClosed = errors.New("rdkproduce: closed")

// Record is one record to enqueue: what Produce takes of a *kafka.Message
// with no Opaque. Partition is explicit (0 or more): kord's partitioner
// chooses it. Key and Value are null when nil and empty when empty but not
// nil; a header's Value likewise. A zero Timestamp lets librdkafka stamp
// the time of the enqueue, as Produce does.
type Record struct {
	Topic     string
	Partition int32
	Key       []byte
	Value     []byte
	Headers   []kafka.Header
	Timestamp time.Time
}
