package producer

// SetTxnCallHook makes every transactional call that is bounded by its
// context (InitTransactions, SendOffsetsToTransaction, CommitTransaction,
// AbortTransaction) run fn with its operation's name on the call's
// goroutine, holding the handle, before librdkafka is called: a stand-in
// for a librdkafka call that does not return. nil: no hook. For tests; not
// safe to call while a producer is in use.
func SetTxnCallHook(fn func(op string)) { testHookTxnCall = fn }
