package checkpoint

import (
	"errors"
	"fmt"
)

// What recovery found, and what it decided (DESIGN.md, "Start").

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
	// ErrRecordsDisagree means the commit group's partitions carry
	// different commit records.
	ErrRecordsDisagree = errors.New("checkpoint: commit group partitions carry different commit records")
)

// Action is what recovery decided.
type Action int

const (
	// Fresh: no record and no checkpoint: resolve the start offsets, write
	// checkpoint 0 and commit a transaction carrying only those offsets.
	Fresh Action = iota + 1
	// Restore: restore Decision.Ref.
	Restore
)

// Decision is the outcome of Decide.
type Decision struct {
	Action Action
	Ref    CheckpointRef
	// Fallback: Ref is not what Kafka recorded; the operator accepted
	// duplicates (exactly-once) or the job runs at-least-once.
	Fallback bool
	Note     string // what led here, for the log
}

// RecoveryInput is what Decide looks at.
type RecoveryInput struct {
	// Record is the commit record Kafka holds, nil if none.
	Record *CommitRecord
	// Local lists the checkpoints on disk, ascending (ListCheckpoints).
	Local []CheckpointRef
	// Marker is the local committed marker, nil if none or unreadable.
	Marker *CheckpointRef
	// Valid reports whether a checkpoint reads back intact (every file's
	// size and checksum), and the error naming the file when not.
	Valid func(CheckpointRef) error
	// AcceptDuplicates lets exactly-once mode restore an older checkpoint
	// when the committed one is missing or corrupt, or restore the local
	// marker's checkpoint when Kafka holds no record and a newer durable
	// checkpoint may have committed; the output after the restored
	// checkpoint may then be emitted again.
	AcceptDuplicates bool
}

// Decide applies DESIGN.md's start rules. It is pure apart from in.Valid.
func Decide(in RecoveryInput) (Decision, error) {
	if in.Record != nil {
		ref := CheckpointRef{Run: in.Record.Run, ID: in.Record.Checkpoint}
		err := in.Valid(ref)
		if err == nil {
			return Decision{Action: Restore, Ref: ref, Note: "Kafka's commit record"}, nil
		}
		if !in.AcceptDuplicates {
			return Decision{}, fmt.Errorf("%w: %s: %w", ErrCommittedMissing, ref, err)
		}
		for i := len(in.Local) - 1; i >= 0; i-- {
			old := in.Local[i]
			if old.ID < ref.ID && in.Valid(old) == nil {
				return Decision{Action: Restore, Ref: old, Fallback: true,
					Note: fmt.Sprintf("committed checkpoint %s unusable (%v); duplicates accepted, restoring older %s", ref, err, old)}, nil
			}
		}
		return Decision{}, fmt.Errorf("%w: %s: %w; and no older valid checkpoint", ErrCommittedMissing, ref, err)
	}
	if len(in.Local) == 0 {
		return Decision{Action: Fresh, Note: "no commit record and no checkpoint: fresh start"}, nil
	}
	if in.Marker == nil && onlyFreshStarts(in.Local) {
		// A crash during a fresh start, before its commit: checkpoint 0
		// holds no state and no output was ever written before it, so
		// starting fresh again loses and repeats nothing.
		return Decision{Action: Fresh, Note: "only uncommitted fresh-start checkpoints on disk: fresh start"}, nil
	}
	if in.Marker != nil {
		m := *in.Marker
		if err := in.Valid(m); err != nil {
			return Decision{}, fmt.Errorf("%w: marker names %s: %w", ErrAmbiguous, m, err)
		}
		if newer := newerThan(in.Local, m); newer != nil {
			// The marker is written after the commit, so a crash between
			// the two leaves it one checkpoint behind what Kafka committed;
			// with Kafka's record since expired, nothing says whether the
			// newer checkpoint committed. Restoring the marker would then
			// emit the newer one's output again.
			if !in.AcceptDuplicates {
				return Decision{}, fmt.Errorf("%w: the local marker names %s, but the newer checkpoint %s is durable on disk and may have committed before Kafka's record expired; "+
					"to restore %s anyway and possibly repeat the output after it, accept duplicates (AcceptDuplicates)", ErrAmbiguous, m, *newer, m)
			}
			return Decision{Action: Restore, Ref: m, Fallback: true,
				Note: fmt.Sprintf("no commit record in Kafka (expired?); local committed marker %s, newer checkpoint %s may have committed; duplicates accepted", m, *newer)}, nil
		}
		return Decision{Action: Restore, Ref: m, Note: "no commit record in Kafka (expired?); local committed marker, nothing newer on disk"}, nil
	}
	return Decision{}, fmt.Errorf("%w (%d checkpoints, newest %s)", ErrAmbiguous, len(in.Local), in.Local[len(in.Local)-1])
}

// CommitRecordOf extracts the one commit record from the metadata of a
// commit group's partitions ("" = no offset). Partitions without an offset
// are ignored; if none has one, it returns nil.
func CommitRecordOf(metadata []string) (*CommitRecord, error) {
	var rec *CommitRecord
	for _, m := range metadata {
		if m == "" {
			continue
		}
		r, err := ParseCommitRecord(m)
		if err != nil {
			return nil, err
		}
		if rec != nil && *rec != r {
			return nil, fmt.Errorf("%w: %s and %s", ErrRecordsDisagree, rec, r)
		}
		rec = &r
	}
	return rec, nil
}

// newerThan returns the newest checkpoint in local (ascending) that may have
// committed after marker, or nil. That is one with a larger ID: a run
// numbers its checkpoints on from the one it restored, which is the newest
// committed (Kafka's record, or the marker), so along the committed history
// IDs only grow, and a checkpoint committed after the marker's has a larger
// ID. Run ids are random and order nothing; a checkpoint's Created time is
// a wall clock that can step back (and, on shared storage, comes from
// another host), so neither is used. A checkpoint with the marker's ID from
// another run is not newer: the marker's run began with InitTransactions,
// which fenced that run (or completed its commit, and then the marker's run
// would have restored it and numbered on from it). The rule errs on the safe
// side: a zombie's or an abandoned run's higher checkpoint, which never
// committed, also counts as newer and makes recovery stop.
func newerThan(local []CheckpointRef, marker CheckpointRef) *CheckpointRef {
	if n := len(local); n > 0 && local[n-1].ID > marker.ID {
		return &local[n-1]
	}
	return nil
}

func onlyFreshStarts(refs []CheckpointRef) bool {
	for _, r := range refs {
		if r.ID != 0 {
			return false
		}
	}
	return true
}

// CheckOffsets checks that the offsets recorded with a commit record
// (recorded: a commit group's committed offsets, one per partition that has
// one) are exactly the restored checkpoint's (ckpt): anything else means
// the two were not written together. where names the record ("commit group
// kord.x.commit"). Both directions count:
//   - a partition in the checkpoint must have the same offset recorded
//     (every commit sends the offsets of every partition its checkpoint
//     lists, so a missing one is a mismatch too);
//   - a partition with a recorded offset must be in the checkpoint. A
//     partition added to the topic after the checkpoint was taken is not in
//     it, but no commit of the checkpoint's ever named it either, so nothing
//     is recorded for it and it passes; an offset recorded there was written
//     by something other than this checkpoint's commit.
func CheckOffsets(where string, ref CheckpointRef, ckpt, recorded []PartitionOffset) error {
	type tp struct {
		topic     string
		partition int32
	}
	want := make(map[tp]int64, len(ckpt))
	for _, o := range ckpt {
		want[tp{o.Topic, o.Partition}] = o.Offset
	}
	got := make(map[tp]int64, len(recorded))
	for _, o := range recorded {
		got[tp{o.Topic, o.Partition}] = o.Offset
	}
	var errs []error
	for _, o := range ckpt {
		if g, ok := got[tp{o.Topic, o.Partition}]; !ok {
			errs = append(errs, fmt.Errorf("%w: %s[%d] has no offset in %s, %d in checkpoint %s", ErrOffsetsDiffer, o.Topic, o.Partition, where, o.Offset, ref))
		} else if g != o.Offset {
			errs = append(errs, fmt.Errorf("%w: %s[%d] is at %d in %s, %d in checkpoint %s", ErrOffsetsDiffer, o.Topic, o.Partition, g, where, o.Offset, ref))
		}
	}
	for _, o := range recorded {
		if _, ok := want[tp{o.Topic, o.Partition}]; !ok {
			errs = append(errs, fmt.Errorf("%w: %s[%d] is at %d in %s but not in checkpoint %s", ErrOffsetsDiffer, o.Topic, o.Partition, o.Offset, where, ref))
		}
	}
	return errors.Join(errs...)
}
