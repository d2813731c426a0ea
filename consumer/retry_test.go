package consumer

import (
	"errors"
	"fmt"
	"testing"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/stretchr/testify/require"
)

// TestTransient: what retry tries again. A dropped connection is
// transient (a CI run's job once failed on "Local: Broker transport
// failure" from a metadata call while the broker was slow); an unknown
// topic, a refused authentication and a plain error are not.
func TestTransient(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{kafka.NewError(kafka.ErrTransport, "Local: Broker transport failure", false), true},
		{fmt.Errorf("wrapped: %w", kafka.NewError(kafka.ErrTransport, "x", false)), true},
		{kafka.NewError(kafka.ErrTimedOut, "x", false), true},
		{kafka.NewError(kafka.ErrLeaderNotAvailable, "x", false), true},
		{kafka.NewError(kafka.ErrNotCoordinator, "x", false), true},
		{kafka.NewError(kafka.ErrNotController, "x", false), true},
		{kafka.NewError(kafka.ErrRequestTimedOut, "x", false), true},
		{kafka.NewError(kafka.ErrPolicyViolation, "x", false), false},
		{kafka.NewError(kafka.ErrUnknownTopicOrPart, "x", false), false},
		{kafka.NewError(kafka.ErrSaslAuthenticationFailed, "x", false), false},
		{errors.New("plain"), false},
	} {
		require.Equal(t, c.want, transient(c.err), "%v", c.err)
	}
}
