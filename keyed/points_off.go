//go:build !kordfailpoints

package keyed

import "context"

// pointsOf returns no hook: failure points exist only in builds with the
// kordfailpoints tag (the crash tests').
func pointsOf(context.Context) points { return nil }

func pointsErr() error { return nil }

func crashed(error) bool { return false }
