//go:build kordfailpoints

package kafkaio

import (
	"context"

	"github.com/kordproject/kord/internal/failpoint"
)

// pointsOf returns the failure hook of a test build: the environment's
// armed crashes (KORD_FAILPOINTS) and the hook ctx carries.
func pointsOf(ctx context.Context) points {
	h := failpoint.HookOf(ctx)
	return func(name string) error { return h.Point(name) }
}

// simulated reports whether the armed simulated fault name fires now.
func simulated(name string) bool { return failpoint.Active(name) }
