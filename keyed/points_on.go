//go:build kordfailpoints

package keyed

import (
	"context"
	"errors"

	"github.com/kordproject/kord/internal/failpoint"
)

// pointsOf returns the failure hook of a test build: the environment's
// armed crashes (KORD_FAILPOINTS) and the hook ctx carries
// (failpoint.WithHook).
func pointsOf(ctx context.Context) points {
	h := failpoint.HookOf(ctx)
	return func(name string) error { return h.Point(name) }
}

// pointsErr reports a malformed KORD_FAILPOINTS.
func pointsErr() error { return failpoint.Err() }

// crashed reports whether err is a failure point's simulated crash: the
// job then ends as if its process had died, with nothing closed.
func crashed(err error) bool { return errors.Is(err, failpoint.ErrCrashed) }
