// Package connector is what a source or a sink of a kord job implements,
// and the records and descriptions it exchanges with the engine: a
// partitioned, replayable [Source] and its [Reader], a transactional
// [Sink], and the optional interfaces either may add (dead letters,
// provenance, operator state, several processes).
//
// The engine (package keyed) takes a Source with keyed.FromSource and a
// Sink with keyed.ToSink. kafkaio implements them for Kafka, and
// keyed.MemorySource and keyed.MemorySink in memory; examples/toysink is a
// sink written elsewhere against this package only. A connector marks its
// errors with keyed.Permanent or keyed.OutcomeUnknown when the engine must
// know their class.
//
// connector imports nothing of keyed and no Kafka client: a connector
// depends on it, and keyed on it, not the other way round.
package connector
