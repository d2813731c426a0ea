//go:build !cgo || kordnobatch

package rdkproduce

import "github.com/confluentinc/confluent-kafka-go/v2/kafka"

// Enabled reports whether the batch produce path is built in: not with the
// kordnobatch tag.
const Enabled = false

// Writer is the batch writer; with the kordnobatch tag New never returns
// one.
type Writer struct{}

// New fails with ErrUnsupported: the kordnobatch tag leaves the batch path
// out, and the caller produces with kafka.Producer.Produce.
func New(p *kafka.Producer) (*Writer, error) { return nil, ErrUnsupported }

// Close does nothing.
func (w *Writer) Close() {}

// Write fails with ErrUnsupported.
func (w *Writer) Write(recs []Record) (int, error) { return 0, ErrUnsupported }
