//go:build race

package keyed_test

// raceEnabled: the race detector slows the engine about tenfold, so the
// seeded failure test runs fewer seeds under it; scripts/test.sh runs the
// full count without it.
const raceEnabled = true
