package checkpoint

import (
	"errors"
	"fmt"
)

// Where a checkpoint's offsets came from (DESIGN.md, "Start",
// Provenance). An offset is a position in one incarnation of
// one topic on one cluster: the same numbers on a topic deleted and created
// again, or on another cluster, name other records, and restoring them
// would skip or repeat input without a word (a fresh topic's end is often
// at or below the old offsets, and a bounded job then reads nothing).

// ErrProvenance means a checkpoint's source offsets belong to another
// cluster, or to an earlier incarnation of a source topic, than the job
// reads now. Every *ProvenanceError matches it.
var ErrProvenance = errors.New("checkpoint: the checkpoint's offsets belong to another cluster or topic")

// ProvenanceError is one source topic a checkpoint read elsewhere.
type ProvenanceError struct {
	Checkpoint CheckpointRef
	// Recorded is where the checkpoint read the topic; Current is where
	// the job reads it now.
	Recorded, Current SourceRef
}

// OtherCluster reports whether the cluster differs (else the topic id
// does, on the same cluster or on clusters of unknown id).
func (e *ProvenanceError) OtherCluster() bool {
	return e.Recorded.Cluster != "" && e.Current.Cluster != "" && e.Recorded.Cluster != e.Current.Cluster
}

func (e *ProvenanceError) Error() string {
	if e.OtherCluster() {
		return fmt.Sprintf("checkpoint: checkpoint %s read topic %q on cluster %q (topic id %s), but the job now reads it on cluster %q (topic id %s): the checkpoint was taken on another cluster",
			e.Checkpoint, e.Recorded.Topic, e.Recorded.Cluster, orNone(e.Recorded.TopicID), e.Current.Cluster, orNone(e.Current.TopicID))
	}
	return fmt.Sprintf("checkpoint: checkpoint %s read topic %q with topic id %s, but topic %q now has topic id %s (on cluster %s): the topic was deleted and created again since",
		e.Checkpoint, e.Recorded.Topic, orNone(e.Recorded.TopicID), e.Current.Topic, orNone(e.Current.TopicID), orNone(e.Current.Cluster))
}

func (e *ProvenanceError) Unwrap() error { return ErrProvenance }

func orNone(s string) string {
	if s == "" {
		return "(unknown)"
	}
	return fmt.Sprintf("%q", s)
}

// CheckProvenance compares where checkpoint m read its sources with where
// the job reads them now (current: one per source topic whose connector
// knows its cluster and topic id). A topic m holds offsets for, recorded
// on another cluster or with another topic id, is a *ProvenanceError (all
// of them, joined). A topic m holds offsets for but records no provenance
// of (metadata older than format 3, or a connector that had none then) is
// returned in unknown, for the caller to warn about: it restores as
// before. A topic m holds no offsets for is a new source: nothing to
// compare. An id missing on either side is not compared.
func CheckProvenance(m *Metadata, current []SourceRef) (unknown []string, err error) {
	read := make(map[string]bool, len(m.Offsets))
	for _, o := range m.Offsets {
		read[o.Topic] = true
	}
	recorded := make(map[string]SourceRef, len(m.Sources))
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
			errs = append(errs, &ProvenanceError{Checkpoint: m.Ref(), Recorded: rec, Current: cur})
		}
	}
	return unknown, errors.Join(errs...)
}
