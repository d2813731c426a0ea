package checkpoint

// SetEpochBufferHook makes CountJob call fn with its epoch buffer's length
// after each read while a checkpoint is in flight (nil: no hook). For
// tests; not safe to call while a job runs.
func SetEpochBufferHook(fn func(n int)) { testHookBuffered = fn }
