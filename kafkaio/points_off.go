//go:build !kordfailpoints

package kafkaio

import "context"

// pointsOf returns no hook: failure points exist only in builds with the
// kordfailpoints tag (the crash tests').
func pointsOf(context.Context) points { return nil }

// simulated reports no simulated fault: there are none outside tagged
// builds.
func simulated(string) bool { return false }
