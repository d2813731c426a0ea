package kafkaio

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/kordproject/kord/admin"
	"github.com/kordproject/kord/checkpoint"
)

// What an operator reads and does to a job from outside it (the kord
// command): its commit record in Kafka, and forgetting it.

// Commit is what Kafka's commit group holds for a job.
type Commit struct {
	// Group is the job's commit group (CommitGroup).
	Group string
	// Checkpoint is the checkpoint the commit record names, on a job of
	// one process; nil on one of several (each partition names its own)
	// and when the group holds no record.
	Checkpoint *checkpoint.Ref
	// Partitions are the partitions of the topics the group holds offsets
	// of, every partition of those topics, sorted.
	Partitions []CommittedPartition
}

// CommittedPartition is one input partition in a commit group.
type CommittedPartition struct {
	Topic     string
	Partition int32
	// Offset is the committed offset, -1 when the group holds none.
	Offset int64
	// End is the partition's last stable offset, and Lag the offsets from
	// Offset (from the log's start when the group holds none) to it.
	End, Lag int64
	// Checkpoint is the checkpoint the partition's record names, and
	// Instance the process (keyed.Instance) whose transaction wrote it.
	Checkpoint checkpoint.Ref
	Instance   string
}

// ReadCommit reads job's commit group: its records, with stable offsets
// (waiting for a commit in flight), and each partition's lag against its
// topic's last stable offsets.
func ReadCommit(ctx context.Context, c *Client, job string) (*Commit, error) {
	a, err := c.admin(nil)
	if err != nil {
		return nil, err
	}
	defer a.Close()
	group := CommitGroup(job)
	offs, err := a.GroupOffsets(ctx, group, nil)
	if err != nil {
		return nil, err
	}
	out := &Commit{Group: group}
	by := map[admin.TopicPartition]admin.Committed{}
	var metadata []string
	topics := map[string]bool{}
	for _, o := range offs {
		by[admin.TopicPartition{Topic: o.Topic, Partition: o.Partition}] = o
		topics[o.Topic] = true
		if o.Offset >= 0 {
			metadata = append(metadata, o.Metadata)
		}
	}
	names := make([]string, 0, len(topics))
	for t := range topics {
		names = append(names, t)
	}
	sort.Strings(names)
	for _, topic := range names {
		ends, err := a.ListOffsets(ctx, topic)
		if err != nil {
			return nil, fmt.Errorf("kafkaio: commit group %s: topic %s: %w", group, topic, err)
		}
		for _, e := range ends {
			p := CommittedPartition{Topic: topic, Partition: e.Partition, Offset: -1, End: e.Stable}
			from := e.Start
			if o, ok := by[admin.TopicPartition{Topic: topic, Partition: e.Partition}]; ok && o.Offset >= 0 {
				p.Offset, from = o.Offset, o.Offset
				rec, err := parseCommitRecord(o.Metadata)
				if err != nil {
					return nil, fmt.Errorf("kafkaio: commit group %s: %s[%d] offset %d: %w", group, topic, e.Partition, o.Offset, err)
				}
				p.Checkpoint, p.Instance = checkpoint.Ref{Run: rec.Run, ID: rec.Checkpoint}, rec.Instance
			}
			p.Lag = max(0, e.Stable-from)
			out.Partitions = append(out.Partitions, p)
		}
	}
	if rec, err := commitRecordOf(metadata); err == nil && rec != nil && rec.Instance == "" {
		out.Checkpoint = &checkpoint.Ref{Run: rec.Run, ID: rec.Checkpoint}
	}
	return out, nil
}

// ForgetJob forgets job from outside it, as Job.Forget does through its
// sink: its commit group, and every record of its hop topics
// (kord.<job>.<stage>.repartition). First it fences the job's
// transactional id on one process (TransactionalID), so that a copy of
// the job still running somewhere is stopped by its next transactional
// call (producer.ErrFenced, which fails the job: it does not restart),
// instead of committing on a record that is gone. A job on several
// processes is not fenced (its processes' ids are their own), but Kafka
// refuses to delete a commit group with members, and ForgetJob fails
// then, naming it. A group that does not exist is not an error.
func ForgetJob(ctx context.Context, c *Client, job string) error {
	if err := fenceTransactionalID(ctx, c, c.logger(nil), nil, TransactionalID(job)); err != nil {
		return fmt.Errorf("kafkaio: fencing transactional id %s: %w", TransactionalID(job), err)
	}
	a, err := c.admin(nil)
	if err != nil {
		return err
	}
	defer a.Close()
	group := CommitGroup(job)
	if err := a.DeleteGroup(ctx, group); err != nil && !errors.Is(err, admin.ErrUnknownGroup) {
		return fmt.Errorf("kafkaio: deleting commit group %s (a job on several processes must be stopped first: Kafka keeps a group with members): %w", group, err)
	}
	all, err := a.Topics(ctx)
	if err != nil {
		return err
	}
	var hops []string
	for _, t := range all {
		// A stage's name has no dot: kord.<job>.<stage>.repartition is
		// this job's, and not one of a job named <job>.<more>.
		stage, ok := strings.CutPrefix(t, "kord."+job+".")
		if stage, ok2 := strings.CutSuffix(stage, ".repartition"); ok && ok2 && stage != "" && !strings.Contains(stage, ".") {
			hops = append(hops, t)
		}
	}
	return deleteAllRecords(ctx, a, hops)
}
