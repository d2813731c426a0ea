package keyed

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// What the engine does after a source's or sink's error depends on its
// class. A connector (kafkaio, say) wraps its errors with Permanent or
// OutcomeUnknown; any other error is retryable: the job restarts from the
// last committed checkpoint as RestartStrategy allows.
var (
	// ErrPermanent marks an error no restart can mend: Run returns it at
	// once. A fenced producer (a newer copy of the job owns its
	// transactional id, and restarting would fence that copy in turn) and
	// a configuration the system refuses are permanent.
	ErrPermanent = errors.New("keyed: permanent failure")
	// ErrOutcomeUnknown marks a step whose outcome the sink cannot know (a
	// commit that timed out may or may not have landed). The run ends, and
	// a new one starts at once from what the sink's system recorded as
	// committed, with a new sink incarnation (Reset): RestartStrategy does
	// not count it, but more than ten in a row without a committed
	// checkpoint end the job.
	ErrOutcomeUnknown = errors.New("keyed: outcome unknown")
	// ErrStopTimeout means a graceful stop did not commit its final
	// checkpoint within StopTimeout.
	ErrStopTimeout = errors.New("keyed: graceful stop timed out")
)

// maxRecoveries bounds the recoveries from unknown outcomes in a row, with
// no checkpoint committed between them.
const maxRecoveries = 10

// classified is an error with its class: errors.Is finds both the class
// and everything err wraps; the message is err's.
type classified struct {
	class error
	err   error
}

func (c *classified) Error() string   { return c.err.Error() }
func (c *classified) Unwrap() []error { return []error{c.err, c.class} }

// Permanent marks err as permanent (ErrPermanent); nil stays nil.
func Permanent(err error) error {
	if err == nil || errors.Is(err, ErrPermanent) {
		return err
	}
	return &classified{class: ErrPermanent, err: err}
}

// OutcomeUnknown marks err as an unknown outcome (ErrOutcomeUnknown); nil
// stays nil. A permanent error stays permanent only.
func OutcomeUnknown(err error) error {
	if err == nil || errors.Is(err, ErrPermanent) || errors.Is(err, ErrOutcomeUnknown) {
		return err
	}
	return &classified{class: ErrOutcomeUnknown, err: err}
}

// TaskError is a task's failure: an operator's error or panic, a source's
// or sink's error.
type TaskError struct {
	Task string // e.g. "count[1]"
	Err  error
}

func (e *TaskError) Error() string { return fmt.Sprintf("keyed: task %s: %v", e.Task, e.Err) }
func (e *TaskError) Unwrap() error { return e.Err }

// jobError is an error of a job's Run, Forget or Validate: its message
// names the job once, at the front ("keyed: job \"counts\": source
// \"events\": ..."), in place of the "keyed: " of err's own; errors.Is
// and errors.As see err and all it wraps.
type jobError struct {
	job string
	err error
}

func (e *jobError) Error() string {
	return "keyed: job " + strconv.Quote(e.job) + ": " + strings.TrimPrefix(e.err.Error(), "keyed: ")
}

func (e *jobError) Unwrap() error { return e.err }

// named returns err naming job j, once; nil stays nil.
func (j *Job) named(err error) error {
	var je *jobError
	if err == nil || errors.As(err, &je) && je.job == j.name {
		return err
	}
	return &jobError{job: j.name, err: err}
}
