package producer

import (
	"errors"
	"fmt"

	"github.com/kordproject/kord/internal/kafkaconf"
)

var (
	// ErrClosed is returned by calls on a closed producer.
	ErrClosed = errors.New("producer: closed")
	// ErrUnknownTopic means the topic does not exist. kord never asks the
	// broker to create topics. The same value as consumer.ErrUnknownTopic
	// and admin.ErrUnknownTopic.
	ErrUnknownTopic = kafkaconf.ErrUnknownTopic
	// ErrUnreachable means no broker of the cluster answered within the
	// metadata timeout (MetadataTimeout): the connection was refused, the
	// host not found, or the connect timed out. The error names the
	// bootstrap servers and the cause. The same value as
	// consumer.ErrUnreachable.
	ErrUnreachable = kafkaconf.ErrUnreachable
	// ErrDenied means the cluster's authorizer refused a request. The
	// same value as consumer.ErrDenied.
	ErrDenied = kafkaconf.ErrDenied
	// ErrFailed means an earlier delivery failed in ordered mode: the
	// producer stopped so that no later record of a key could be written
	// after a gap. The error that stopped it is wrapped alongside.
	ErrFailed = errors.New("producer: stopped after a delivery failure")
	// ErrReordering means a setting would let one key's records be written
	// out of order; AllowReordering accepts such settings.
	ErrReordering = errors.New("producer: setting can reorder a key's records")
	// ErrConfig is a configuration error.
	ErrConfig = errors.New("producer: invalid configuration")
	// ErrRecordTooLarge means the record is larger than message.max.bytes
	// allows (librdkafka refuses it when Produce is called, counting key,
	// value, headers and the record batch overhead). It was not queued and
	// the producer carries on: retrying it can never succeed.
	ErrRecordTooLarge = errors.New("producer: record too large")
	// ErrAuth means the cluster refused the producer: its credentials
	// (SASL) were refused, or the TLS handshake failed (an untrusted or
	// expired certificate, a host name the certificate does not name).
	// Every call fails with it from then on; waiting would not help. The
	// same value as consumer.ErrAuth.
	ErrAuth = kafkaconf.ErrAuth
	// ErrNotMember means the group coordinator refused a transactional
	// offset commit (SendOffsetsToTransactionFor) because the member whose
	// group metadata it carried is no longer in the group, or is of an
	// older generation (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION; not
	// FENCED_INSTANCE_ID, which the member's own client reports). The
	// transaction must be aborted, and the member's offsets cannot commit
	// until it joins the group again.
	ErrNotMember = errors.New("producer: the consumer group member is not in the group")
)

// Error is a failure tied to one record: its topic, the partition kord chose
// (or -1 before one was chosen) and the offset when the broker assigned one
// (or -1).
type Error struct {
	Op        string // "encode key", "encode value", "metadata", "partition", "produce", "deliver"
	Topic     string
	Partition int32
	Offset    int64
	Err       error
}

func (e *Error) Error() string {
	s := fmt.Sprintf("producer: %s: topic %q", e.Op, e.Topic)
	if e.Partition >= 0 {
		s += fmt.Sprintf(" partition %d", e.Partition)
	}
	if e.Offset >= 0 {
		s += fmt.Sprintf(" offset %d", e.Offset)
	}
	return s + ": " + e.Err.Error()
}

func (e *Error) Unwrap() error { return e.Err }
