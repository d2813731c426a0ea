package keyed

// The engine's failure points: where the crash tests stop or kill a job,
// one per step of the checkpoint lifecycle. In a build with the
// kordfailpoints tag, tests arm them (internal/failpoint, which names
// them the same); in any other build, passing one does nothing. A tagged
// test checks that the two lists agree.
const (
	pointAfterBarrier        = "after-barrier"
	pointDuringSnapshotWrite = "during-snapshot-write"
	pointAfterSnapshots      = "after-snapshots-durable"
	pointAfterMetadata       = "after-metadata-durable"
	pointBeforeCommit        = "before-commit"
	pointAfterCommit         = "after-commit"
	pointAfterMarker         = "after-committed-marker"
	pointDuringRestore       = "during-restore"
	pointAfterFreshCommitted = "after-fresh-start-committed"
)

// points is a job's failure hook: nil, or, in a tagged build, the one a
// test put in Run's context. An error stops the job at once.
type points func(name string) error

// point passes a failure point.
func (p points) point(name string) error {
	if p == nil {
		return nil
	}
	return p(name)
}
