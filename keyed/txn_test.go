package keyed

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kordproject/kord/internal/lifecycle"
)

func TestTransactionTimeout(t *testing.T) {
	txn := func(c config) time.Duration { return c.withDefaults().transactionTimeout() }
	require.Equal(t, 71*time.Second, txn(config{}))
	require.Equal(t, 3*(2*time.Second+30*time.Second)+10*time.Second, txn(config{Checkpoint: lifecycle.Config{Interval: 2 * time.Second, Timeout: 30 * time.Second, TolerableFailures: 2}}))
	require.Equal(t, 15*time.Minute, txn(config{Checkpoint: lifecycle.Config{Timeout: time.Hour}}), "capped under the broker's default maximum")
	require.Equal(t, 30*time.Minute, txn(config{Checkpoint: lifecycle.Config{Timeout: time.Hour}, TransactionMaxTimeout: 30 * time.Minute}), "capped at the brokers' maximum set")
	j := NewJob("txn", TransactionMaxTimeout(time.Millisecond))
	require.ErrorContains(t, j.Validate(), "keyed: transaction max timeout 1ms below 1s")
}
