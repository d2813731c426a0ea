package kafkaio

import (
	"time"

	"github.com/kordproject/kord/keyed/connector"
)

// SetEpochBufferHook makes every Sink call fn with its epoch buffer's
// length and bytes (EpochBufferBytes's count) after each record it buffers
// (nil: no hook). For tests; not safe to call while a sink is in use.
func SetEpochBufferHook(fn func(n, bytes int)) { testHookBuffered = fn }

// BreakRetrySameProducer makes every Sink retry a failed commit on the same
// producer and go on with it: the protocol broken on purpose, to show the
// network-fault tests catch it.
func BreakRetrySameProducer(on bool) { testRetrySameProducer = on }

// BreakSocketGuard makes every Sink take socket.timeout.ms as given, even
// below the commit timeout: the protocol broken on purpose.
func BreakSocketGuard(on bool) { testNoSocketGuard = on }

// Sink and Source are NewSink's and NewSource's types, for tests that look
// inside them (BufferLen, TooLarge).
type (
	Sink[T any]   = sink[T]
	Source[T any] = source[T]
)

// SetPurgeInterval sets how often sinks delete hop records below their
// committed offsets, and returns the interval it replaced. For tests; not
// safe while a sink is in use.
func SetPurgeInterval(d time.Duration) time.Duration {
	old := purgeInterval
	purgeInterval = d
	return old
}

// ProducerSettings returns the settings the sink's producer gets from the
// sink for info (checkSettings: its own, the derived ones and the
// defaults), before they are fitted to the topics' max.message.bytes.
func (s *sink[T]) ProducerSettings(info connector.SinkInfo) (map[string]string, error) {
	out, _, err := s.checkSettings(info)
	return out, err
}
