package kafkaio

// SetEpochBufferHook makes every Sink call fn with its epoch buffer's
// length after each record it buffers (nil: no hook). For tests; not safe
// to call while a sink is in use.
func SetEpochBufferHook(fn func(n int)) { testHookBuffered = fn }
