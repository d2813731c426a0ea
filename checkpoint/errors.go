package checkpoint

import "errors"

// The errors reading or restoring a checkpoint can stop with (DESIGN.md,
// "Start"), besides a *CorruptError and a *ProvenanceError.
var (
	// ErrCommittedMissing means Kafka recorded checkpoint (run, id) as
	// committed but it is missing or corrupt on disk. Exactly-once mode
	// stops; restoring an older checkpoint would emit its output again.
	ErrCommittedMissing = errors.New("checkpoint: the checkpoint Kafka recorded as committed is missing or corrupt")
	// ErrAmbiguous means checkpoints exist on disk but Kafka holds no commit
	// record (group offsets expire after offsets.retention.minutes) and no
	// valid local committed marker says which one committed, or a durable
	// checkpoint newer than the marker may have committed after it.
	ErrAmbiguous = errors.New("checkpoint: checkpoints exist but neither Kafka nor a valid local marker records which one committed")
	// ErrOffsetsDiffer means the offsets recorded with a commit record (a
	// commit group's) are not the restored checkpoint's offsets.
	ErrOffsetsDiffer = errors.New("checkpoint: recorded offsets differ from the restored checkpoint's")
	// ErrProvenance means a checkpoint's source offsets belong to another
	// cluster, or to an earlier incarnation of a source topic, than the job
	// reads now. Every *ProvenanceError matches it.
	ErrProvenance = errors.New("checkpoint: the checkpoint's offsets belong to another cluster or topic")
	// ErrMissing is returned, wrapped with the path, when a checkpoint's
	// metadata object does not exist.
	ErrMissing = errors.New("checkpoint: missing")
	// ErrUnsupportedVersion is returned, wrapped with the path and the
	// versions, for an object written in a newer format than this build
	// reads.
	ErrUnsupportedVersion = errors.New("checkpoint: unsupported format version")
)
