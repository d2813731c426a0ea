package kafkaconf

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// The classes of a call that reached for the cluster and failed, besides
// ErrAuth. Every kord client (admin, consumer, producer) sorts its
// failures into them with Conn.Classify, through Conn.Do.
var (
	// ErrUnreachable is a cluster no broker of which answered: the
	// connection was refused, the host not found, or the connect timed
	// out. It names the bootstrap servers and the cause. It may pass (a
	// broker starting), so it is retryable.
	ErrUnreachable = errors.New("cannot reach the cluster")
	// ErrDenied is a request the cluster's authorizer refused: the client
	// is in, but its principal may not use the resource named.
	ErrDenied = errors.New("the cluster denied the request (authorization failed)")
	// ErrUnknownTopic is a topic that does not exist.
	ErrUnknownTopic = errors.New("unknown topic")
	// ErrUnknownGroup is a consumer group that does not exist.
	ErrUnknownGroup = errors.New("unknown group")
)

// DefaultTimeout is the request timeout of kord's clients (admin.Client,
// consumer.Source and consumer.Member's requests, the producer's metadata
// requests) unless their RequestTimeout or MetadataTimeout option says
// otherwise: the bound within which a call that reaches for the cluster
// succeeds or fails, classified.
const DefaultTimeout = 10 * time.Second

// who names the client to the cluster for an error: the bootstrap
// servers, the security protocol, and for SASL the mechanism and user.
// Never a secret.
func (c *Conn) who() string {
	parts := []string{"bootstrap.servers " + c.settings["bootstrap.servers"]}
	proto := strings.ToUpper(c.settings["security.protocol"])
	if proto == "" {
		proto = "PLAINTEXT"
	}
	parts = append(parts, "security.protocol "+proto)
	if strings.HasPrefix(proto, "SASL") {
		mech := c.settings["sasl.mechanisms"]
		if mech == "" {
			mech = c.settings["sasl.mechanism"]
		}
		if mech == "" {
			mech = "GSSAPI" // librdkafka's default
		}
		parts = append(parts, "SASL mechanism "+mech)
		if u := c.settings["sasl.username"]; u != "" {
			parts = append(parts, fmt.Sprintf("user %q", u))
		}
	}
	return strings.Join(parts, ", ")
}

// Brokers returns the bootstrap servers the client was given.
func (c *Conn) Brokers() string { return c.settings["bootstrap.servers"] }

// Classify sorts the error of a failed call that reached for the cluster
// into kord's classes, and explains it (Explain): the client's ErrAuth
// once it has one; an authorization refusal (ErrDenied); a topic or group
// that does not exist (ErrUnknownTopic, ErrUnknownGroup); a call that
// timed out while the client's last error was a failed connect
// (ErrUnreachable, naming the bootstrap servers and why); anything else
// explained as it is. It is the one place kord classifies such errors.
func (c *Conn) Classify(err error) error {
	if err == nil {
		return nil
	}
	if f := c.Failed(); f != nil {
		return f
	}
	var kerr kafka.Error
	if errors.As(err, &kerr) {
		switch kerr.Code() {
		case kafka.ErrTopicAuthorizationFailed, kafka.ErrGroupAuthorizationFailed, kafka.ErrClusterAuthorizationFailed,
			kafka.ErrTransactionalIDAuthorizationFailed, kafka.ErrDelegationTokenAuthorizationFailed:
			return fmt.Errorf("%w (%s): %w", ErrDenied, c.who(), err)
		case kafka.ErrUnknownTopicOrPart, kafka.ErrUnknownTopic:
			return fmt.Errorf("%w: %w", ErrUnknownTopic, err)
		case kafka.ErrGroupIDNotFound:
			return fmt.Errorf("%w: %w", ErrUnknownGroup, err)
		}
	}
	if why := c.unreachable(); why != "" && timedOut(err) {
		return fmt.Errorf("%w at %s (%s): %w", ErrUnreachable, c.Brokers(), why, c.Explain(err))
	}
	return c.Explain(err)
}

// unreachable returns why no broker answered, when the client's last
// error was a failed connect and it has never been served; else "".
func (c *Conn) unreachable() string {
	c.mu.Lock()
	last := c.last
	c.mu.Unlock()
	if c.connected.Load() {
		return ""
	}
	switch {
	case strings.Contains(last, "Connection refused"):
		return "connection refused"
	case strings.Contains(last, "Failed to resolve") || strings.Contains(last, "resolution failure"):
		return "host not found"
	case strings.Contains(last, "in state CONNECT"):
		return "connect failed"
	case last == "" || strings.Contains(last, "brokers are down"):
		return "no broker answered"
	}
	return ""
}

// timedOut reports whether err is a wait that ran out: librdkafka's
// timeout or a slice's deadline (Do).
func timedOut(err error) bool {
	var kerr kafka.Error
	if errors.As(err, &kerr) {
		return kerr.Code() == kafka.ErrTimedOut || kerr.Code() == kafka.ErrTimedOutQueue || kerr.Code() == kafka.ErrTransport ||
			kerr.Code() == kafka.ErrAllBrokersDown
	}
	var te *timeoutError
	return errors.As(err, &te) || errors.Is(err, context.DeadlineExceeded)
}

// Transient reports whether a failed call may succeed when made again:
// librdkafka's retriable errors, a partition leader or coordinator
// moving, a timeout, and a dropped connection (__TRANSPORT: the broker
// restarting, or too slow to answer under load; librdkafka reconnects,
// but a metadata call made meanwhile returns it unmarked as retriable,
// which failed a job in CI), and the errors Kafka's Java client retries
// that admin results carry unmarked: no controller (a broker just
// started; NotControllerException is a RetriableException in
// kafka-clients), a request timed out on the broker, and a group
// coordinator still loading its partition of __consumer_offsets or not
// yet elected (CoordinatorLoadInProgressException and
// CoordinatorNotAvailableException are retriable there too; a DeleteGroups
// on a broker just started met the first in CI).
func Transient(err error) bool {
	var kerr kafka.Error
	if !errors.As(err, &kerr) {
		return false
	}
	switch kerr.Code() {
	case kafka.ErrNotLeaderForPartition, kafka.ErrLeaderNotAvailable, kafka.ErrNotCoordinator, kafka.ErrTimedOut, kafka.ErrTransport,
		kafka.ErrNotController, kafka.ErrRequestTimedOut, kafka.ErrCoordinatorLoadInProgress, kafka.ErrCoordinatorNotAvailable:
		return true
	}
	return kerr.IsRetriable()
}

// timeoutError is a call that found no answer within the request
// timeout; it wraps the last slice's error.
type timeoutError struct {
	d   time.Duration
	err error
}

func (e *timeoutError) Error() string {
	if e.err == nil || errors.Is(e.err, context.DeadlineExceeded) {
		return fmt.Sprintf("no answer within %v", e.d)
	}
	return fmt.Sprintf("no answer within %v: %v", e.d, e.err)
}

func (e *timeoutError) Unwrap() error { return e.err }

// Do makes a call that reaches for the cluster, bounded by timeout (the
// client's request timeout) and ctx, and returns nil or its error
// classified (Classify). It calls call in growing slices of the timeout
// (1 s, 2 s, 4 s, ...): each call gets a context bounded by its slice,
// cancelled as soon as the cluster refuses the client (ErrAuth), and the
// slice itself (for librdkafka calls that take a timeout instead). Between
// calls it runs poll (nil for clients whose events are read elsewhere),
// which hands the client's pending errors to Event. A call fails for good
// on ErrAuth, on an error that is not Transient, at the timeout, or when
// ctx ends; a transient error is tried again after a short pause, a
// timed-out slice at once.
func (c *Conn) Do(ctx context.Context, timeout time.Duration, poll func(), call func(ctx context.Context, slice time.Duration) error) error {
	if err := c.Failed(); err != nil {
		return err
	}
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	deadline := time.Now().Add(timeout)
	for step := time.Second; ; step *= 2 {
		slice := max(min(step, time.Until(deadline)), time.Millisecond)
		sctx, cancel := context.WithTimeout(ctx, slice)
		go func() {
			select {
			case <-c.refused:
				cancel()
			case <-sctx.Done():
			}
		}()
		err := call(sctx, slice)
		sliceOver := sctx.Err() != nil && ctx.Err() == nil
		cancel()
		if err == nil {
			c.Served()
			return nil
		}
		if poll != nil {
			poll()
		}
		if f := c.Failed(); f != nil {
			return f
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%w (after %w)", context.Cause(ctx), c.Classify(err))
		}
		waited := sliceOver && errors.Is(err, context.DeadlineExceeded)
		if kerr := (kafka.Error{}); errors.As(err, &kerr) && kerr.Code() == kafka.ErrTimedOut {
			waited = true
		}
		if !waited && !Transient(err) {
			return c.Classify(err)
		}
		if !time.Now().Before(deadline) {
			return c.Classify(&timeoutError{d: timeout, err: err})
		}
		if waited {
			continue // the slice was the wait
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (after %w)", context.Cause(ctx), c.Classify(err))
		case <-time.After(100 * time.Millisecond):
		}
	}
}
