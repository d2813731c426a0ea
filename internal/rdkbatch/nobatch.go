//go:build !cgo || kordnobatch

package rdkbatch

import (
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// Enabled reports whether the batch path is built in: not with the
// kordnobatch tag.
const Enabled = false

// Reader is the batch reader; with the kordnobatch tag New never returns
// one.
type Reader struct{}

// New fails with ErrUnsupported: the kordnobatch tag leaves the batch path
// out, and the caller reads with Consumer.Poll.
func New(c *kafka.Consumer, max int) (*Reader, error) { return nil, ErrUnsupported }

// Close does nothing.
func (r *Reader) Close() {}

// Read fails with ErrUnsupported.
func (r *Reader) Read(b *Batch, timeout time.Duration) error {
	b.reset()
	return ErrUnsupported
}

// ReadN fails with ErrUnsupported.
func (r *Reader) ReadN(b *Batch, max int, timeout time.Duration) error {
	b.reset()
	return ErrUnsupported
}
