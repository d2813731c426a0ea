package main

import (
	"bufio"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/kordproject/kord/checkpoint"
	"github.com/kordproject/kord/internal/layout"
	"github.com/kordproject/kord/kafkaio"
	"github.com/kordproject/kord/partitioner"
	"github.com/kordproject/kord/vfs"
)

// commitStatus reads job's commit group, naming the cluster in errors.
func commitStatus(ctx context.Context, cl *kafkaio.Client, job string) (*kafkaio.Commit, error) {
	st, err := kafkaio.ReadCommit(ctx, cl, job)
	if err != nil {
		return nil, &exitError{2, fmt.Errorf("cluster %s: job %s: %w (check --brokers and the cluster's settings)", cl.BrokerList(), job, err)}
	}
	return st, nil
}

func (c *cli) commitCmd() *cobra.Command {
	var job string
	cmd := &cobra.Command{
		Use:   "commit",
		Short: "Show the commit record Kafka holds for a job, and its lag against the topics' ends",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if job == "" {
				return usagef("--job is required: the job's name (keyed.NewJob)")
			}
			cl, err := c.client()
			if err != nil {
				return err
			}
			st, err := commitStatus(cmd.Context(), cl, job)
			if err != nil {
				return err
			}
			var lag int64
			for _, p := range st.Partitions {
				lag += p.Lag
			}
			out := map[string]any{"job": job, "group": st.Group, "lag": lag, "partitions": st.Partitions}
			if st.Checkpoint != nil {
				out["checkpoint"] = refText(*st.Checkpoint)
			}
			err = c.emit(out, func(w io.Writer) {
				switch {
				case len(st.Partitions) == 0:
					fmt.Fprintf(w, "commit group %s holds no offsets: the job never committed on %s (or was reset)\n", st.Group, cl.BrokerList())
					return
				case st.Checkpoint != nil:
					fmt.Fprintf(w, "commit group %s: checkpoint %s, lag %d\n", st.Group, refText(*st.Checkpoint), lag)
				default:
					fmt.Fprintf(w, "commit group %s: lag %d\n", st.Group, lag)
				}
				tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "TOPIC\tPARTITION\tCOMMITTED\tEND\tLAG\tCHECKPOINT\tINSTANCE")
				for _, p := range st.Partitions {
					ck := "-"
					if p.Offset >= 0 {
						ck = refText(p.Checkpoint)
					}
					fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%s\t%s\n", p.Topic, p.Partition, p.Offset, p.End, p.Lag, ck, orDash(p.Instance))
				}
				tw.Flush()
			})
			return err
		},
	}
	c.clusterFlags(cmd)
	cmd.Flags().StringVar(&job, "job", "", "the job's name (keyed.NewJob)")
	return cmd
}

func (c *cli) resetCmd() *cobra.Command {
	var yes bool
	cmd := &cobra.Command{
		Use:   "reset",
		Short: "Forget a job: its commit record in Kafka, its hop topics' records and its checkpoints, so that it starts over",
		Long: `reset forgets a job, as keyed.Job.Forget does: its next run starts over
from its sources' start. It must not race a running job, and does not:

  1. it locks the checkpoint directory as a running job does, and refuses
     while the job holds it (a job whose checkpoints are in a bucket holds
     no lock: step 2 covers it);
  2. it fences the job's transactional id (kord.<job>): a copy of the job
     still running anywhere fails at its next commit with a fenced producer,
     and stops (it does not restart), before it could commit on a record
     that is gone. A job on several processes is refused by Kafka instead:
     its commit group has members;
  3. it deletes the commit group and the hop topics' records, then the
     checkpoint files (the record first: a reset cut short can be run again).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			job := c.job
			if job == "" {
				return usagef("--job is required: the job's name (keyed.NewJob)")
			}
			cl, err := c.client()
			if err != nil {
				return err
			}
			s, done, err := c.storage(ctx, true)
			if err != nil {
				if errors.Is(err, vfs.ErrLocked) {
					return &exitError{1, fmt.Errorf("job %s is running on %s: stop it first (%w)", job, c.checkpoints, err)}
				}
				return err
			}
			defer done()
			if !yes {
				fmt.Fprintf(c.err, "reset forgets job %s: its commit record on %s and the checkpoints in %s; it starts over from its sources' start.\ntype the job's name to go on: ", job, cl.BrokerList(), s.Where(""))
				line, _ := bufio.NewReader(c.in).ReadString('\n')
				if strings.TrimSpace(line) != job {
					return &exitError{1, errors.New("not confirmed: nothing was changed")}
				}
			}
			if err := kafkaio.ForgetJob(ctx, cl, job); err != nil {
				return &exitError{1, fmt.Errorf("cluster %s: %w", cl.BrokerList(), err)}
			}
			deleted, err := deleteCheckpoints(ctx, s)
			if err != nil {
				return &exitError{1, fmt.Errorf("the commit record is gone, but deleting the checkpoints failed (run reset again): %w", err)}
			}
			// A copy of the job that was running (on a bucket, which has no
			// lock) may still land the checkpoint it had in flight when it
			// was fenced, before its commit fails and it stops: delete
			// until nothing more comes.
			for round := 0; ; round++ {
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(settle):
				}
				n, err := deleteCheckpoints(ctx, s)
				if err != nil {
					return &exitError{1, fmt.Errorf("the commit record is gone, but deleting the checkpoints failed (run reset again): %w", err)}
				}
				if n == 0 {
					break
				}
				deleted += n
				if round == 10 {
					return &exitError{1, fmt.Errorf("checkpoints keep appearing in %s after the job was fenced: a process of it still writes there; stop it and run reset again", s.Where(""))}
				}
			}
			return c.emit(map[string]any{"job": job, "group": kafkaio.CommitGroup(job), "filesDeleted": deleted}, func(w io.Writer) {
				fmt.Fprintf(w, "job %s forgotten: commit group %s deleted, transactional id %s fenced, %d checkpoint files deleted from %s\n",
					job, kafkaio.CommitGroup(job), kafkaio.TransactionalID(job), deleted, s.Where(""))
			})
		},
	}
	c.storageFlags(cmd)
	c.clusterFlags(cmd)
	cmd.Flags().BoolVar(&yes, "yes", false, "do not ask for confirmation")
	return cmd
}

// settle is how long reset waits for a fenced job's last checkpoint.
var settle = time.Second

// deleteCheckpoints deletes every checkpoint object in s (what
// layout.ParseName knows; anything else is left alone).
func deleteCheckpoints(ctx context.Context, s checkpoint.Storage) (int, error) {
	names, err := s.List(ctx, "")
	if err != nil {
		return 0, err
	}
	n := 0
	for _, name := range names {
		if pn, ok := layout.ParseName(name); !ok || pn.Kind == layout.KindUnknown {
			continue
		}
		if err := s.Delete(ctx, name); err != nil {
			return n, fmt.Errorf("%s: %w", s.Where(name), err)
		}
		n++
	}
	return n, nil
}

func (c *cli) partitionCmd() *cobra.Command {
	var partitions int
	var hexKeys bool
	var ruleName string
	cmd := &cobra.Command{
		Use:   "partition [KEY...]",
		Short: "Print the partition a client's rule gives each key (Java's murmur2 by default; --rule for sarama's or librdkafka's), for a partition count; keys from the arguments or stdin, one a line",
		RunE: func(cmd *cobra.Command, args []string) error {
			if partitions < 1 {
				return usagef("--partitions must be at least 1")
			}
			rule, ok := partitioner.RuleNamed(ruleName)
			if !ok {
				return usagef("--rule %q: want one of %s", ruleName, strings.Join(partitioner.RuleNames(), ", "))
			}
			keys := args
			if len(keys) == 0 {
				sc := bufio.NewScanner(c.in)
				sc.Buffer(make([]byte, 1<<20), 1<<20)
				for sc.Scan() {
					keys = append(keys, sc.Text())
				}
				if err := sc.Err(); err != nil {
					return usagef("stdin: %v", err)
				}
			}
			type row struct {
				Key       string `json:"key"`
				Partition int32  `json:"partition"`
			}
			rows := make([]row, len(keys))
			for i, k := range keys {
				b := []byte(k)
				if hexKeys {
					var err error
					if b, err = hex.DecodeString(k); err != nil {
						return usagef("key %q (line %d): not hex: %v", k, i+1, err)
					}
				}
				rows[i] = row{k, rule.Partition(b, partitions)}
			}
			return c.emit(rows, func(w io.Writer) {
				for _, r := range rows {
					fmt.Fprintf(w, "%s\t%d\n", r.Key, r.Partition)
				}
			})
		},
	}
	cmd.Flags().IntVar(&partitions, "partitions", 0, "the topic's partition count")
	cmd.Flags().BoolVar(&hexKeys, "hex", false, "the keys are hex (for keys that are not text)")
	cmd.Flags().StringVar(&ruleName, "rule", "murmur2", "the placement rule: "+strings.Join(partitioner.RuleNames(), ", ")+" (partitioner.RuleNamed)")
	return cmd
}
