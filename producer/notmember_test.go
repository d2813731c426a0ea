package producer

import (
	"errors"
	"fmt"
	"testing"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/stretchr/testify/require"
)

// TestNotMemberCode: the group coordinator's refusals of a transactional
// offset commit for a member no longer in the group are told apart, as
// librdkafka returns them (a kafka.Error inside the TxnError), from other
// transactional errors, fencing included (a fenced static instance's
// refusal too: its member reports that itself).
func TestNotMemberCode(t *testing.T) {
	wrap := func(c kafka.ErrorCode) error {
		return &TxnError{Op: "send offsets to transaction", Abortable: true, Err: kafka.NewError(c, "Failed to commit offsets to transaction", false)}
	}
	for _, c := range []kafka.ErrorCode{kafka.ErrUnknownMemberID, kafka.ErrIllegalGeneration} {
		require.True(t, notMemberCode(wrap(c)), "%v", c)
		err := fmt.Errorf("%w: %w", ErrNotMember, wrap(c))
		require.True(t, errors.Is(err, ErrNotMember))
		require.True(t, RequiresAbort(err), "still an abortable transactional error: %v", c)
	}
	for _, c := range []kafka.ErrorCode{kafka.ErrFencedInstanceID, kafka.ErrProducerFenced, kafka.ErrCoordinatorNotAvailable, kafka.ErrRebalanceInProgress, kafka.ErrTimedOut} {
		require.False(t, notMemberCode(wrap(c)), "%v", c)
	}
	require.False(t, notMemberCode(errors.New("not a kafka error")))
}
