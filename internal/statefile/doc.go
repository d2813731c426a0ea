// Package statefile is the format of a checkpoint's keyed-state files:
// Avro object container files of keys and values, one key group each
// (EncodeKeyGroup, DecodeKeyGroup) or many with an index of them
// (EncodeKeyGroups, OpenKeyGroups, DecodeKeyGroups). package keyed writes
// and reads them; package checkpoint stores them without reading them.
// A malformed file is a *checkpoint.CorruptError naming it.
package statefile
