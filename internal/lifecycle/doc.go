// Package lifecycle is a job's checkpoint lifecycle as a pure state
// machine (Lifecycle): trigger, task acknowledgements, durable metadata,
// commit, committed, or abort, with the settings that pace it (Config).
// Package keyed feeds it events and time and carries out the effects it
// returns. Its transcripts are in testdata; regenerate their expectations
// with
//
//	go test ./internal/lifecycle/ -run Transcripts -rewrite
//
// and review the diff.
package lifecycle
