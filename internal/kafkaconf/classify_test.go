package kafkaconf

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/stretchr/testify/require"
)

// TestClassify: each kind of failure gets its class and the words that
// name its cause, and no secret.
func TestClassify(t *testing.T) {
	sasl := map[string]string{"bootstrap.servers": "127.0.0.1:9093", "security.protocol": "SASL_SSL", "sasl.mechanisms": "SCRAM-SHA-512",
		"sasl.username": "kord", "sasl.password": "kordpw-secret"}
	timeout := kafka.NewError(kafka.ErrTimedOut, "Local: Timed out", false)

	conn := NewConn(sasl)
	err := conn.Event(kafka.NewError(kafka.ErrAuthentication, "sasl_ssl://127.0.0.1:9093/bootstrap: SASL authentication error: Authentication failed", false))
	require.ErrorIs(t, err, ErrAuth)
	require.ErrorContains(t, err, `SASL mechanism SCRAM-SHA-512, user "kord"`)
	require.ErrorContains(t, err, "bootstrap.servers 127.0.0.1:9093")
	require.NotContains(t, err.Error(), "kordpw-secret")
	require.ErrorIs(t, conn.Classify(timeout), ErrAuth, "once refused, every failure is the refusal")
	select {
	case <-conn.refused:
	default:
		t.Fatal("the refusal is signalled")
	}

	conn = NewConn(map[string]string{"bootstrap.servers": "127.0.0.1:1"})
	conn.Log("FAIL", "[thrd:127.0.0.1:1/bootstrap]: 127.0.0.1:1/bootstrap: Connect to ipv4#127.0.0.1:1 failed: Connection refused (after 0ms in state CONNECT)")
	err = conn.Classify(timeout)
	require.ErrorIs(t, err, ErrUnreachable)
	require.ErrorContains(t, err, "cannot reach the cluster at 127.0.0.1:1 (connection refused)")
	plain := errors.New("plain")
	require.ErrorIs(t, conn.Classify(plain), plain, "not a timeout: explained only")
	require.NotErrorIs(t, conn.Classify(plain), ErrUnreachable)
	conn.Served()
	require.NotErrorIs(t, conn.Classify(timeout), ErrUnreachable, "served once: the cluster was reachable")

	conn = NewConn(sasl)
	err = conn.Classify(kafka.NewError(kafka.ErrTopicAuthorizationFailed, "Broker: Topic authorization failed", false))
	require.ErrorIs(t, err, ErrDenied)
	require.ErrorContains(t, err, `user "kord"`)
	require.ErrorIs(t, conn.Classify(kafka.NewError(kafka.ErrUnknownTopicOrPart, "x", false)), ErrUnknownTopic)
	require.ErrorIs(t, conn.Classify(kafka.NewError(kafka.ErrGroupIDNotFound, "x", false)), ErrUnknownGroup)
}

// TestDo: Do retries transient failures and timed-out slices, stops at
// the timeout with the class, and at once on a refusal, cancelling the
// call's wait.
func TestDo(t *testing.T) {
	conn := NewConn(map[string]string{"bootstrap.servers": "127.0.0.1:1"})
	calls := 0
	err := conn.Do(context.Background(), time.Second, nil, func(ctx context.Context, slice time.Duration) error {
		calls++
		if calls < 3 {
			return kafka.NewError(kafka.ErrLeaderNotAvailable, "x", false)
		}
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, 3, calls)

	start := time.Now()
	err = conn.Do(context.Background(), 1500*time.Millisecond, nil, func(ctx context.Context, slice time.Duration) error {
		<-ctx.Done()
		return ctx.Err()
	})
	require.Less(t, time.Since(start), 2500*time.Millisecond)
	require.ErrorContains(t, err, "no answer within 1.5s")
	require.NotErrorIs(t, err, ErrUnreachable, "served above")

	conn = NewConn(map[string]string{"bootstrap.servers": "127.0.0.1:1"})
	start = time.Now()
	err = conn.Do(context.Background(), time.Minute, nil, func(ctx context.Context, slice time.Duration) error {
		go func() {
			time.Sleep(100 * time.Millisecond)
			conn.Event(kafka.NewError(kafka.ErrSaslAuthenticationFailed, "refused", false))
		}()
		<-ctx.Done()
		return ctx.Err()
	})
	require.ErrorIs(t, err, ErrAuth)
	require.Less(t, time.Since(start), time.Second, "the refusal cancels the wait")

	conn = NewConn(map[string]string{"bootstrap.servers": "127.0.0.1:1"})
	err = conn.Do(context.Background(), time.Minute, nil, func(ctx context.Context, slice time.Duration) error {
		return kafka.NewError(kafka.ErrPolicyViolation, "no", false)
	})
	require.ErrorContains(t, err, "no")
	require.NotErrorIs(t, err, ErrUnreachable)
}
