// Package align is the barrier handling of one operator instance as a
// pure state machine (Aligner): package keyed feeds it what each input
// channel delivers and carries out the effects it returns (Block,
// Snapshot, Unblock, ...). Its transcripts are in testdata; regenerate
// their expectations with
//
//	go test ./internal/align/ -run Transcripts -rewrite
//
// and review the diff.
package align
