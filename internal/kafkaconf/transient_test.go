package kafkaconf

import (
	"errors"
	"fmt"
	"testing"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// TestTransient: the errors a call may meet while a broker or a
// coordinator moves or starts are retried; a refusal is not.
func TestTransient(t *testing.T) {
	for code, want := range map[kafka.ErrorCode]bool{
		kafka.ErrCoordinatorLoadInProgress: true, // a group coordinator loading __consumer_offsets (a broker just started)
		kafka.ErrCoordinatorNotAvailable:   true,
		kafka.ErrNotCoordinator:            true,
		kafka.ErrNotController:             true,
		kafka.ErrLeaderNotAvailable:        true,
		kafka.ErrTransport:                 true,
		kafka.ErrGroupIDNotFound:           false,
		kafka.ErrTopicAuthorizationFailed:  false,
		kafka.ErrPolicyViolation:           false,
	} {
		err := fmt.Errorf("admin: delete group %q: %w", "g", kafka.NewError(code, code.String(), false))
		if got := Transient(err); got != want {
			t.Errorf("Transient(%v) = %v, want %v", code, got, want)
		}
	}
	if Transient(errors.New("not a kafka error")) {
		t.Error("a plain error is transient")
	}
}
