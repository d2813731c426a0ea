package kafkaio

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// commitRecord is what kord writes into the offset metadata of its commit
// group, inside the transaction that commits a checkpoint's output, so that
// Kafka itself records which checkpoint is committed:
//
//	kord1;run=<run id>;ckpt=<checkpoint id>[;job=<job name>][;inst=<instance>]
//
// inst is the instance (keyed.Instance) of a job on several processes
// whose transaction committed it: what a survivor reads to find the
// transactional id of a process that left the group (fenceDeparted).
//
// Fields after the version are key=value pairs separated by ';'; unknown keys
// are kept out of the way of future versions (ignored on parse). Kafka caps
// offset metadata at offset.metadata.max.bytes (4096 by default).
type commitRecord struct {
	Run        string
	Checkpoint uint64
	Job        string
	Instance   string
}

const commitRecordVersion = "kord1"

var (
	// errNotCommitRecord means offset metadata was not written by kord (or
	// by a newer, incompatible kord).
	errNotCommitRecord = errors.New("kafkaio: offset metadata is not a kord commit record")
	// errRecordsDisagree means the commit group's partitions carry
	// different commit records.
	errRecordsDisagree = errors.New("kafkaio: commit group partitions carry different commit records")
)

// String encodes r.
func (r commitRecord) String() string {
	s := commitRecordVersion + ";run=" + r.Run + ";ckpt=" + strconv.FormatUint(r.Checkpoint, 10)
	if r.Job != "" {
		s += ";job=" + r.Job
	}
	if r.Instance != "" {
		s += ";inst=" + r.Instance
	}
	return s
}

// validField reports whether v can stand in a commit record field.
func validField(v string) bool {
	return v != "" && !strings.ContainsAny(v, ";=") && len(v) <= 255
}

// validate checks that r encodes unambiguously.
func (r commitRecord) validate() error {
	if !validField(r.Run) {
		return fmt.Errorf("kafkaio: invalid run id %q in commit record", r.Run)
	}
	if r.Job != "" && !validField(r.Job) {
		return fmt.Errorf("kafkaio: invalid job name %q in commit record", r.Job)
	}
	if r.Instance != "" && !validField(r.Instance) {
		return fmt.Errorf("kafkaio: invalid instance %q in commit record", r.Instance)
	}
	return nil
}

// parseCommitRecord decodes offset metadata written by String.
func parseCommitRecord(s string) (commitRecord, error) {
	parts := strings.Split(s, ";")
	if parts[0] != commitRecordVersion {
		return commitRecord{}, fmt.Errorf("%w: %q", errNotCommitRecord, s)
	}
	var r commitRecord
	var haveRun, haveCkpt bool
	for _, p := range parts[1:] {
		k, v, ok := strings.Cut(p, "=")
		if !ok {
			return commitRecord{}, fmt.Errorf("%w: field %q in %q", errNotCommitRecord, p, s)
		}
		switch k {
		case "run":
			if haveRun || !validField(v) {
				return commitRecord{}, fmt.Errorf("%w: run in %q", errNotCommitRecord, s)
			}
			r.Run, haveRun = v, true
		case "ckpt":
			n, err := strconv.ParseUint(v, 10, 64)
			if haveCkpt || err != nil || strconv.FormatUint(n, 10) != v {
				return commitRecord{}, fmt.Errorf("%w: ckpt in %q", errNotCommitRecord, s)
			}
			r.Checkpoint, haveCkpt = n, true
		case "job":
			if !validField(v) {
				return commitRecord{}, fmt.Errorf("%w: job in %q", errNotCommitRecord, s)
			}
			r.Job = v
		case "inst":
			if !validField(v) {
				return commitRecord{}, fmt.Errorf("%w: inst in %q", errNotCommitRecord, s)
			}
			r.Instance = v
		}
	}
	if !haveRun || !haveCkpt {
		return commitRecord{}, fmt.Errorf("%w: missing run or ckpt in %q", errNotCommitRecord, s)
	}
	return r, nil
}

// commitRecordOf extracts the one commit record from the metadata of a
// commit group's partitions ("" = no offset). Partitions without an offset
// are ignored; if none has one, it returns nil.
func commitRecordOf(metadata []string) (*commitRecord, error) {
	var rec *commitRecord
	for _, m := range metadata {
		if m == "" {
			continue
		}
		r, err := parseCommitRecord(m)
		if err != nil {
			return nil, err
		}
		if rec != nil && *rec != r {
			return nil, fmt.Errorf("%w: %s and %s", errRecordsDisagree, rec, r)
		}
		rec = &r
	}
	return rec, nil
}
