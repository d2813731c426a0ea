// Package recovery is what a restore decides: which checkpoint to
// restore, or none (Decide, DESIGN.md's start rules), and the checks the
// restored checkpoint must pass against what Kafka recorded (CheckOffsets)
// and where the job reads now (CheckProvenance).
package recovery

import (
	"errors"
	"fmt"

	"github.com/kordproject/kord/checkpoint"
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
	Ref    checkpoint.Ref
	// Fallback: Ref is not what Kafka recorded; the operator accepted
	// duplicates (exactly-once) or the job runs at-least-once.
	Fallback bool
	Note     string // what led here, for the log
}

// Input is what Decide looks at.
type Input struct {
	// Recorded is the checkpoint Kafka's commit record names, nil if
	// Kafka holds none.
	Recorded *checkpoint.Ref
	// Local lists the checkpoints on disk, ascending (checkpoint.ListCheckpoints).
	Local []checkpoint.Ref
	// Marker is the local committed marker, nil if none or unreadable.
	Marker *checkpoint.Ref
	// Valid reports whether a checkpoint reads back intact (every file's
	// size and checksum), and the error naming the file when not. An
	// error that is not Unusable (the storage failed to read) decides
	// nothing: Decide returns it.
	Valid func(checkpoint.Ref) error
	// AcceptDuplicates lets exactly-once mode restore an older checkpoint
	// when the committed one is missing or corrupt, or restore the local
	// marker's checkpoint when Kafka holds no record and a newer durable
	// checkpoint may have committed; the output after the restored
	// checkpoint may then be emitted again.
	AcceptDuplicates bool
}

// Unusable reports whether err, from reading a checkpoint, says the
// checkpoint itself is bad: missing, corrupt, or of a newer format, which
// no retry mends. Any other error is the storage failing to read it (an
// EIO, a bucket that did not answer): it may pass, and says nothing of the
// checkpoint, so that neither a stop as ErrCommittedMissing nor a fallback
// to an older checkpoint (duplicates) follows from it.
func Unusable(err error) bool {
	var corrupt *checkpoint.CorruptError
	return errors.Is(err, checkpoint.ErrMissing) || errors.As(err, &corrupt) || errors.Is(err, checkpoint.ErrUnsupportedVersion)
}

// valid is in.Valid, with the failures to read apart: usable reports
// whether ref reads back intact; bad is why it does not, when it is
// Unusable; fail is a failure to read it, which Decide returns.
func (in Input) valid(ref checkpoint.Ref) (usable bool, bad, fail error) {
	err := in.Valid(ref)
	switch {
	case err == nil:
		return true, nil, nil
	case Unusable(err):
		return false, err, nil
	}
	return false, nil, fmt.Errorf("reading checkpoint %s: %w", ref, err)
}

// Decide applies DESIGN.md's start rules. It is pure apart from in.Valid.
// Its error satisfies errors.Is with checkpoint.ErrCommittedMissing or
// checkpoint.ErrAmbiguous, or is a failure to read a checkpoint (see
// Unusable).
func Decide(in Input) (Decision, error) {
	if in.Recorded != nil {
		ref := *in.Recorded
		ok, err, fail := in.valid(ref)
		if fail != nil {
			return Decision{}, fail
		}
		if ok {
			return Decision{Action: Restore, Ref: ref, Note: "Kafka's commit record"}, nil
		}
		if !in.AcceptDuplicates {
			return Decision{}, fmt.Errorf("%w: %s: %w", checkpoint.ErrCommittedMissing, ref, err)
		}
		for i := len(in.Local) - 1; i >= 0; i-- {
			old := in.Local[i]
			if old.ID >= ref.ID {
				continue
			}
			if ok, _, fail := in.valid(old); fail != nil {
				return Decision{}, fail
			} else if ok {
				return Decision{Action: Restore, Ref: old, Fallback: true,
					Note: fmt.Sprintf("committed checkpoint %s unusable (%v); duplicates accepted, restoring older %s", ref, err, old)}, nil
			}
		}
		return Decision{}, fmt.Errorf("%w: %s: %w; and no older valid checkpoint", checkpoint.ErrCommittedMissing, ref, err)
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
		if ok, err, fail := in.valid(m); fail != nil {
			return Decision{}, fail
		} else if !ok {
			return Decision{}, fmt.Errorf("%w: marker names %s: %w", checkpoint.ErrAmbiguous, m, err)
		}
		if newer := newerThan(in.Local, m); newer != nil {
			// The marker is written after the commit, so a crash between
			// the two leaves it one checkpoint behind what Kafka committed;
			// with Kafka's record since expired, nothing says whether the
			// newer checkpoint committed. Restoring the marker would then
			// emit the newer one's output again.
			if !in.AcceptDuplicates {
				return Decision{}, fmt.Errorf("%w: the local marker names %s, but the newer checkpoint %s is durable on disk and may have committed before Kafka's record expired; "+
					"to restore %s anyway and possibly repeat the output after it, accept duplicates (AcceptDuplicates)", checkpoint.ErrAmbiguous, m, *newer, m)
			}
			return Decision{Action: Restore, Ref: m, Fallback: true,
				Note: fmt.Sprintf("no commit record in Kafka (expired?); local committed marker %s, newer checkpoint %s may have committed; duplicates accepted", m, *newer)}, nil
		}
		return Decision{Action: Restore, Ref: m, Note: "no commit record in Kafka (expired?); local committed marker, nothing newer on disk"}, nil
	}
	return Decision{}, fmt.Errorf("%w (%d checkpoints, newest %s)", checkpoint.ErrAmbiguous, len(in.Local), in.Local[len(in.Local)-1])
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
func newerThan(local []checkpoint.Ref, marker checkpoint.Ref) *checkpoint.Ref {
	if n := len(local); n > 0 && local[n-1].ID > marker.ID {
		return &local[n-1]
	}
	return nil
}

func onlyFreshStarts(refs []checkpoint.Ref) bool {
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
func CheckOffsets(where string, ref checkpoint.Ref, ckpt, recorded []checkpoint.PartitionOffset) error {
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
			errs = append(errs, fmt.Errorf("%w: %s[%d] has no offset in %s, %d in checkpoint %s", checkpoint.ErrOffsetsDiffer, o.Topic, o.Partition, where, o.Offset, ref))
		} else if g != o.Offset {
			errs = append(errs, fmt.Errorf("%w: %s[%d] is at %d in %s, %d in checkpoint %s", checkpoint.ErrOffsetsDiffer, o.Topic, o.Partition, g, where, o.Offset, ref))
		}
	}
	for _, o := range recorded {
		if _, ok := want[tp{o.Topic, o.Partition}]; !ok {
			errs = append(errs, fmt.Errorf("%w: %s[%d] is at %d in %s but not in checkpoint %s", checkpoint.ErrOffsetsDiffer, o.Topic, o.Partition, o.Offset, where, ref))
		}
	}
	return errors.Join(errs...)
}

// CheckProvenance compares where checkpoint m read its sources with where
// the job reads them now (current: one per source topic whose connector
// knows its cluster and topic id). A topic m holds offsets for, recorded
// on another cluster or with another topic id, is a *checkpoint.ProvenanceError (all
// of them, joined). A topic m holds offsets for but records no provenance
// of (metadata older than format 3, or a connector that had none then) is
// returned in unknown, for the caller to warn about: it restores as
// before. A topic m holds no offsets for is a new source: nothing to
// compare. An id missing on either side is not compared.
func CheckProvenance(m *checkpoint.Metadata, current []checkpoint.SourceRef) (unknown []string, err error) {
	read := make(map[string]bool, len(m.Offsets))
	for _, o := range m.Offsets {
		read[o.Topic] = true
	}
	recorded := make(map[string]checkpoint.SourceRef, len(m.Sources))
	for _, s := range m.Sources {
		recorded[s.Topic] = s
	}
	var errs []error
	for _, cur := range current {
		if !read[cur.Topic] {
			continue
		}
		rec, ok := recorded[cur.Topic]
		if !ok {
			unknown = append(unknown, cur.Topic)
			continue
		}
		otherCluster := rec.Cluster != "" && cur.Cluster != "" && rec.Cluster != cur.Cluster
		otherTopic := rec.TopicID != "" && cur.TopicID != "" && rec.TopicID != cur.TopicID
		if otherCluster || otherTopic {
			errs = append(errs, &checkpoint.ProvenanceError{Checkpoint: m.Ref(), Recorded: rec, Current: cur})
		}
	}
	return unknown, errors.Join(errs...)
}
