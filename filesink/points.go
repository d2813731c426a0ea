package filesink

// The file sink's crash points (internal/failpoint names them the same):
// in a build with the kordfailpoints tag, the crash tests arm them by the
// environment and the process dies there; in any other build they do
// nothing.
const (
	pointAfterClose = "file-after-close" // at a barrier, the parts closed and durable
	pointMidPublish = "file-mid-publish" // at a commit, after each file published
	pointAfterMerge = "file-after-merge" // with compaction, a merged file durable
	// before each partition commit (its policies), the files visible
	pointBeforePartitionCommit = "partition-commit"
)
