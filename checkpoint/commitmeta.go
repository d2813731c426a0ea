package checkpoint

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// CommitRecord is what kord writes into the offset metadata of its commit
// group, inside the transaction that commits a checkpoint's output, so that
// Kafka itself records which checkpoint is committed:
//
//	kord1;run=<run id>;ckpt=<checkpoint id>[;job=<job name>]
//
// Fields after the version are key=value pairs separated by ';'; unknown keys
// are kept out of the way of future versions (ignored on parse). Kafka caps
// offset metadata at offset.metadata.max.bytes (4096 by default).
type CommitRecord struct {
	Run        string
	Checkpoint uint64
	Job        string
}

const commitRecordVersion = "kord1"

// ErrNotCommitRecord means offset metadata was not written by kord (or by a
// newer, incompatible kord).
var ErrNotCommitRecord = errors.New("checkpoint: offset metadata is not a kord commit record")

// String encodes r.
func (r CommitRecord) String() string {
	s := commitRecordVersion + ";run=" + r.Run + ";ckpt=" + strconv.FormatUint(r.Checkpoint, 10)
	if r.Job != "" {
		s += ";job=" + r.Job
	}
	return s
}

// validField reports whether v can stand in a commit record field.
func validField(v string) bool {
	return v != "" && !strings.ContainsAny(v, ";=") && len(v) <= 255
}

// Validate checks that r encodes unambiguously.
func (r CommitRecord) Validate() error {
	if !validField(r.Run) {
		return fmt.Errorf("checkpoint: invalid run id %q in commit record", r.Run)
	}
	if r.Job != "" && !validField(r.Job) {
		return fmt.Errorf("checkpoint: invalid job name %q in commit record", r.Job)
	}
	return nil
}

// ParseCommitRecord decodes offset metadata written by String.
func ParseCommitRecord(s string) (CommitRecord, error) {
	parts := strings.Split(s, ";")
	if parts[0] != commitRecordVersion {
		return CommitRecord{}, fmt.Errorf("%w: %q", ErrNotCommitRecord, s)
	}
	var r CommitRecord
	var haveRun, haveCkpt bool
	for _, p := range parts[1:] {
		k, v, ok := strings.Cut(p, "=")
		if !ok {
			return CommitRecord{}, fmt.Errorf("%w: field %q in %q", ErrNotCommitRecord, p, s)
		}
		switch k {
		case "run":
			if haveRun || !validField(v) {
				return CommitRecord{}, fmt.Errorf("%w: run in %q", ErrNotCommitRecord, s)
			}
			r.Run, haveRun = v, true
		case "ckpt":
			n, err := strconv.ParseUint(v, 10, 64)
			if haveCkpt || err != nil || strconv.FormatUint(n, 10) != v {
				return CommitRecord{}, fmt.Errorf("%w: ckpt in %q", ErrNotCommitRecord, s)
			}
			r.Checkpoint, haveCkpt = n, true
		case "job":
			if !validField(v) {
				return CommitRecord{}, fmt.Errorf("%w: job in %q", ErrNotCommitRecord, s)
			}
			r.Job = v
		}
	}
	if !haveRun || !haveCkpt {
		return CommitRecord{}, fmt.Errorf("%w: missing run or ckpt in %q", ErrNotCommitRecord, s)
	}
	return r, nil
}
