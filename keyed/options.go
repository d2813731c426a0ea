package keyed

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/kordproject/kord/checkpoint"
	"github.com/kordproject/kord/internal/lifecycle"
	"github.com/kordproject/kord/keyed/internal/keygroup"
	"github.com/kordproject/kord/vfs"
)

// Opt configures a Job (NewJob). Each option's doc gives its default and
// the Flink or Kafka Streams setting it corresponds to.
type Opt func(*config)

// config is a job's configuration, set by options.
type config struct {
	name                  string
	MaxParallelism        int
	Mode                  checkpoint.Mode
	Checkpoint            lifecycle.Config
	FS                    vfs.FS
	Dir                   string
	Storage               checkpoint.Storage
	Restart               Restart
	BatchSize             int
	BufferTimeout         time.Duration
	PartitionDisc         time.Duration
	Credits               int
	AcceptDuplicates      bool
	Failover              bool
	AllowNonRestoredState bool
	Instance              string
	OnCommit              func(checkpoint uint64) error
	Logger                *slog.Logger
	// warnLog receives what a user must see even with no Logger given:
	// a restore that had to guess, a bounded run that read nothing. The
	// Logger when given, else slog.Default().
	warnLog     *slog.Logger
	StopTimeout time.Duration
	errs        []error

	// TransactionMaxTimeout caps the transaction timeout
	// (transactionTimeout): the brokers' transaction.max.timeout.ms.
	TransactionMaxTimeout time.Duration
}

func (c config) withDefaults() config {
	if c.Mode == 0 {
		c.Mode = checkpoint.ExactlyOnce
	}
	if c.FS == nil {
		c.FS = vfs.Default()
	}
	if c.Dir == "" {
		c.Dir = DefaultDir(c.name)
	}
	if c.BatchSize <= 0 {
		c.BatchSize = 512
	}
	if c.BufferTimeout <= 0 {
		c.BufferTimeout = 5 * time.Millisecond
	}
	if c.Credits <= 0 {
		c.Credits = 4
	}
	if c.PartitionDisc == 0 {
		c.PartitionDisc = 30 * time.Second
	}
	if c.Logger == nil {
		c.warnLog = slog.Default()
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	} else {
		c.warnLog = c.Logger
	}
	c.Checkpoint = c.Checkpoint.WithDefaults()
	if c.TransactionMaxTimeout == 0 {
		c.TransactionMaxTimeout = 15 * time.Minute
	}
	if c.StopTimeout <= 0 {
		c.StopTimeout = c.Checkpoint.Timeout
	}
	return c
}

// EnvStateDir names the environment variable that moves every job's
// default checkpoint directory (DefaultDir).
const EnvStateDir = "KORD_STATE_DIR"

// DefaultDir is where a job named name keeps its checkpoints unless Dir
// says otherwise: $KORD_STATE_DIR/<name> when KORD_STATE_DIR is set, else
// $XDG_STATE_HOME/kord/<name>, else ~/.local/state/kord/<name> (the XDG
// base directory for state that outlives a restart; Kafka Streams keeps
// its state.dir under java.io.tmpdir, which a reboot may empty). It is ""
// when none of these can be found; Validate then asks for Dir.
//
// The directory must survive restarts: in exactly-once mode Kafka records
// which checkpoint committed, and a job whose directory lost that
// checkpoint stops with checkpoint.ErrCommittedMissing. To start a job
// over from nothing, see Job.Forget.
//
// The directory belongs to the job's name, not to a cluster: a job run
// with the same name against another cluster, or after its input topic was
// deleted and created again, finds the old checkpoints here. Each
// checkpoint records the cluster id and the topic ids it read (connector.Identified
// sources), and such a restore is refused with checkpoint.ErrProvenance
// rather than read the new topic from the old offsets; see Failover.
func DefaultDir(name string) string {
	if d := os.Getenv(EnvStateDir); d != "" {
		return filepath.Join(d, name)
	}
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "kord", name)
	}
	if h, err := os.UserHomeDir(); err == nil && h != "" {
		return filepath.Join(h, ".local", "state", "kord", name)
	}
	return ""
}

// Dir puts the job's checkpoints in dir (Flink state.checkpoints.dir;
// Kafka Streams state.dir). The job locks it while it runs. Default
// DefaultDir(name).
func Dir(dir string) Opt { return func(c *config) { c.Dir = dir } }

// CheckpointStorage keeps the job's checkpoints in s instead of a
// directory (Dir and FS are then unused): object storage through
// checkpoint/blobstore, say, which the processes of one job share (Flink
// state.checkpoints.dir with an s3:// or gs:// URI). The job neither locks
// nor closes s: one process at a time runs a job on it, unless the job is
// one of several processes (Instance), whose runs keep their
// objects apart. Default: the directory Dir, through FS.
func CheckpointStorage(s checkpoint.Storage) Opt { return func(c *config) { c.Storage = s } }

// Instance makes this process one instance, id, of a job that runs on
// several processes (a pod name, a StatefulSet ordinal: stable across
// restarts, unique among the running processes). The job's sink assigns
// the input partitions (connector.Membership; kafkaio's sink joins the
// job's commit group, and Kafka assigns them), and each run covers the
// partitions this process holds, restores each from the checkpoint its
// own record names, and ends with a final checkpoint when they change.
// A stage keyed by partition (ByPartition) keeps its state with its
// partition; one keyed by a field reads its records from the job's hop
// topic by partition, so its state follows the hop's partitions. Every
// process uses one checkpoint storage they all share (Dir
// on a shared volume, or CheckpointStorage). Default: the job runs whole
// in this process (Kafka Streams: one application.id on several
// instances; Flink: a job's parallel subtasks on several TaskManagers).
func Instance(id string) Opt { return func(c *config) { c.Instance = id } }

// AllowNonRestoredState lets a restore drop the state of a keyed stage the
// job no longer has (Flink's allowNonRestoredState, the savepoint option of
// the same name). Default: such a restore is refused, naming the stage, so
// that renaming a stage never starts it empty by mistake. A stage the
// checkpoint does not know starts empty either way.
func AllowNonRestoredState() Opt { return func(c *config) { c.AllowNonRestoredState = true } }

// FS is the file system the checkpoints are written through. Default the
// operating system's (vfs.Default); vfs.NewMem keeps them in memory, for
// tests.
func FS(fs vfs.FS) Opt { return func(c *config) { c.FS = fs } }

// AtLeastOnce runs the job at least once (Flink CheckpointingMode.
// AT_LEAST_ONCE; Kafka Streams processing.guarantee=at_least_once):
// barriers are tracked but never block an input, and a Kafka sink writes
// at once instead of in transactions, so after a failure some output is
// written again. Default exactly once.
func AtLeastOnce() Opt { return func(c *config) { c.Mode = checkpoint.AtLeastOnce } }

// CheckpointInterval is the time between checkpoint triggers (Flink
// execution.checkpointing.interval; Kafka Streams commit.interval.ms).
// Exactly-once output becomes visible when its checkpoint commits: about
// half to one interval of latency. Default 1 s.
func CheckpointInterval(d time.Duration) Opt {
	return func(c *config) { c.Checkpoint.Interval = d }
}

// CheckpointTimeout aborts a checkpoint that has not reached its commit
// within d, and bounds each commit (Flink
// execution.checkpointing.timeout). Default 60 s.
func CheckpointTimeout(d time.Duration) Opt {
	return func(c *config) { c.Checkpoint.Timeout = d }
}

// MinPause is the least time between the end of one checkpoint and the
// next trigger (Flink execution.checkpointing.min-pause). Default 0.
func MinPause(d time.Duration) Opt { return func(c *config) { c.Checkpoint.MinPause = d } }

// TolerableFailures is how many checkpoints in a row may abort before the
// job fails (Flink execution.checkpointing.tolerable-failed-checkpoints).
// A checkpoint aborts when its storage fails a write (a full disk, a failed
// fsync, a bucket's error) or it outlasts CheckpointTimeout (a slow disk, a
// bucket that does not answer). An aborted checkpoint's output commits
// with the next one. The failure past them wraps the last abort's cause,
// which names the file or object key: errors.Is(err, syscall.ENOSPC) for
// a full disk. Default 0.
func TolerableFailures(n int) Opt {
	return func(c *config) { c.Checkpoint.TolerableFailures = n }
}

// TransactionMaxTimeout is the brokers' transaction.max.timeout.ms: the
// transaction timeout, derived from the checkpoint settings, is capped at
// it. Set it only for brokers configured otherwise. Default 15 minutes,
// Kafka's default.
func TransactionMaxTimeout(d time.Duration) Opt {
	return func(c *config) { c.TransactionMaxTimeout = d }
}

// transactionTimeout derives the Kafka transaction timeout from the
// checkpoint settings: a transaction stays open from one commit to the
// next, across up to TolerableFailures aborted checkpoints, each lasting
// at most Interval plus Timeout plus MinPause; plus a 10 s margin. It is
// capped at TransactionMaxTimeout, by default 15 minutes, the broker's
// default transaction.max.timeout.ms (a longer chain ends in an abort and
// a replay, never in loss). Flink's 1 h default against the broker's
// 15 min maximum is the classic failure this avoids. The job hands it to
// its sink (connector.SinkInfo.TransactionTimeout) and ages other runs' checkpoints
// by it (sweepAge). c has its defaults (withDefaults).
func (c config) transactionTimeout() time.Duration {
	k := c.Checkpoint
	d := time.Duration(k.TolerableFailures+1)*(k.Interval+k.Timeout+k.MinPause) + 10*time.Second
	return min(d, c.TransactionMaxTimeout)
}

// MaxParallelism is the number of key groups of a KeyBy job, the most
// operator instances it can ever be rescaled to (Flink maxParallelism).
// Default: the restored checkpoint's, else DefaultMaxParallelism; an
// explicit value that differs from a checkpoint's is refused. A
// ByPartition job takes it from the partition count: leave it unset.
func MaxParallelism(n int) Opt {
	return func(c *config) {
		if err := keygroup.ValidateParallelism(1, n); err != nil {
			c.errs = append(c.errs, fmt.Errorf("keyed: MaxParallelism: %w", err))
		}
		c.MaxParallelism = n
	}
}

// RestartStrategy says what the job does when a task fails (Flink
// restart-strategy): FixedDelay or ExponentialBackoff. Default: no
// restart, Run returns the failure. Unknown outcomes of a commit are
// recovered from at once whatever the strategy (ErrOutcomeUnknown).
func RestartStrategy(r Restart) Opt { return func(c *config) { c.Restart = r } }

// AcceptDuplicates lets an exactly-once job restore an older checkpoint
// when the one Kafka recorded as committed is missing or corrupt, or when
// nothing says which checkpoint committed: the output after the restored
// checkpoint is then written again. Default off: such a job stops with
// checkpoint.ErrCommittedMissing or checkpoint.ErrAmbiguous.
func AcceptDuplicates() Opt { return func(c *config) { c.AcceptDuplicates = true } }

// Failover lets a job restore a checkpoint taken on another cluster, or
// before a source topic was deleted and created again (a restore that is
// otherwise refused with checkpoint.ErrProvenance): the keyed state and
// operator state are restored, but every source is read from its start
// (its own start setting, kafkaio.StartFrom, as on a fresh start) instead
// of from the checkpoint's offsets, which mean nothing on the new topic.
// For a planned move to a replica cluster, where state is worth keeping:
// the input the new start covers is applied on top of the old state, so
// choose the start to meet the old offsets (MirrorMaker's translated
// offsets, a time with kafkaio.StartFrom(consumer.AtTime)). Until the
// first checkpoint on the new cluster commits, a restart resolves the
// start again. The move is logged at WARN; once the job has committed on
// the new cluster the option does nothing there, and may be removed. Not
// for a job on several processes: their checkpoints are named by records
// that live on the cluster. Default off. Flink has no such switch: its
// Kafka source restores the old offsets as they are.
func Failover() Opt { return func(c *config) { c.Failover = true } }

// OnCommit calls f with each checkpoint's id once the checkpoint has
// committed (the transaction carrying it committed, with a Kafka sink):
// the output and state up to it are then final. Checkpoint 0 of a fresh
// start is one. f runs on the checkpoint coordinator: keep it short. An
// error from f fails the run as a task's failure does, after the commit,
// and the restart strategy applies: the next run restores that checkpoint.
// The examples count commits with it and fail a run on purpose to show a
// recovery. Default none.
func OnCommit(f func(checkpoint uint64) error) Opt { return func(c *config) { c.OnCommit = f } }

// StopTimeout bounds a graceful stop (the context given to Run done): the
// final checkpoint, and any recovery it needs, must commit within d, or
// Run returns ErrStopTimeout. Every wait of the job is cancelled at the
// deadline; a commit cut short has an unknown outcome, which the next
// start settles from what the sink's system recorded. Not cancellable, and
// so added to the bound: a checkpoint file write already under way in a
// directory (a request to object storage is cancelled), and closing the
// sink's and sources' clients. Default the checkpoint timeout.
func StopTimeout(d time.Duration) Opt { return func(c *config) { c.StopTimeout = d } }

// PartitionDiscovery is how often each source's partitions are listed
// again while the job runs (Flink's Kafka source
// partition.discovery.interval.ms). In KeyBy mode a new partition is read
// from its earliest offset and enters the next checkpoint; in ByPartition
// mode a change of partition count cannot be followed and fails the job.
// Default 30 s; negative turns discovery off.
func PartitionDiscovery(d time.Duration) Opt { return func(c *config) { c.PartitionDisc = d } }

// BatchSize is the most records sent between tasks in one message.
// Default 512.
func BatchSize(n int) Opt { return func(c *config) { c.BatchSize = n } }

// BufferTimeout bounds how long a record waits in a partial batch between
// tasks (Flink execution.buffer-timeout). Default 5 ms. Tasks wake this
// often only while a partial batch waits: an idle source task waits for
// input up to a quarter of the checkpoint interval (at most 100 ms), so
// that an idle job costs next to no CPU.
func BufferTimeout(d time.Duration) Opt { return func(c *config) { c.BufferTimeout = d } }

// Credits is how many messages an upstream task may have outstanding to
// one downstream task (Flink's credit-based flow control): a blocked input
// backpressures only its own upstream. Default 4.
func Credits(n int) Opt { return func(c *config) { c.Credits = n } }

// Logger receives the job's log, and its sink's and sources' unless they
// are given their own. Default: nothing is logged.
func Logger(l *slog.Logger) Opt { return func(c *config) { c.Logger = l } }
