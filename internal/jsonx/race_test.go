//go:build race

package jsonx_test

// raceEnabled: this test binary runs under the race detector, where
// sync.Pool drops items on purpose and allocation counts mean nothing.
const raceEnabled = true
