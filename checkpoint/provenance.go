package checkpoint

import (
	"fmt"
)

// Where a checkpoint's offsets came from (DESIGN.md, "Start",
// Provenance). An offset is a position in one incarnation of
// one topic on one cluster: the same numbers on a topic deleted and created
// again, or on another cluster, name other records, and restoring them
// would skip or repeat input without a word (a fresh topic's end is often
// at or below the old offsets, and a bounded job then reads nothing).

// ProvenanceError is one source topic a checkpoint read elsewhere.
type ProvenanceError struct {
	Checkpoint Ref
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
