package kafkaconf

import "sync/atomic"

// handles counts the librdkafka handles kord's clients hold open in this
// process: each kafka.NewProducer and kafka.NewConsumer of producer/,
// consumer/ and admin/ adds one, its Close takes it away (an admin client
// made from another client shares that client's handle). A soak checks
// that it stays flat; cluster.OpenHandles shows it.
var handles atomic.Int64

// HandleOpened counts a librdkafka handle made.
func HandleOpened() { handles.Add(1) }

// HandleClosed counts a librdkafka handle closed.
func HandleClosed() { handles.Add(-1) }

// Handles is the number of librdkafka handles open now.
func Handles() int64 { return handles.Load() }
