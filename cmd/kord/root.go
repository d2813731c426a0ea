package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"gocloud.dev/blob"
	_ "gocloud.dev/blob/fileblob" // file:// checkpoint buckets
	_ "gocloud.dev/blob/memblob"  // mem://

	"github.com/kordproject/kord/checkpoint"
	"github.com/kordproject/kord/checkpoint/blobstore"
	"github.com/kordproject/kord/kafkaio"
	"github.com/kordproject/kord/keyed"
	"github.com/kordproject/kord/vfs"
)

// cli is one invocation: its streams and the flags every subcommand has.
type cli struct {
	in       io.Reader
	out, err io.Writer
	json     bool

	// The job, and its checkpoint storage.
	job, checkpoints, prefix string
	// The cluster.
	brokers, properties string
	set                 []string
}

// exitError is an error with the exit code it asks for: 1 for a finding
// (verify found a bad file), 2 for a usage or access error.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// run runs the command line args and returns its exit code.
func run(ctx context.Context, args []string, in io.Reader, out, errOut io.Writer) int {
	c := &cli{in: in, out: out, err: errOut}
	root := c.root()
	root.SetArgs(args)
	root.SetIn(in)
	root.SetOut(out)
	root.SetErr(errOut)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	fmt.Fprintln(errOut, "kord:", err)
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return 2
}

func (c *cli) root() *cobra.Command {
	root := &cobra.Command{
		Use:   "kord",
		Short: "Look inside kord jobs: their checkpoints, their state, their commit in Kafka",
		Long: `kord looks inside kord jobs from the outside.

Checkpoints (--checkpoints: the job's directory, or a bucket URL with --prefix):
  checkpoints  each checkpoint, its status (committed, durable, orphaned,
               incomplete), time, size, source offsets, cluster and topic ids
  inspect      one checkpoint's stages, states and key groups, with sizes
  verify       every file's checksum and format; names each bad file
  state        one key's value in one state of one stage, as JSON

Kafka (--brokers, --properties, -X name=value):
  commit       the commit record Kafka holds for a job, and its lag
  reset        forget a job (its commit record and checkpoints), safely
  partition    which partition Java's producer gives each key`,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return cmd.Help()
		},
	}
	root.PersistentFlags().BoolVar(&c.json, "json", false, "print JSON, for scripts")
	root.AddCommand(c.checkpointsCmd(), c.inspectCmd(), c.verifyCmd(), c.stateCmd(), c.commitCmd(), c.resetCmd(), c.partitionCmd())
	root.CompletionOptions.DisableDefaultCmd = true
	return root
}

// storageCmd is a subcommand over the job's checkpoint storage: run gets
// it opened (without a lock: a running job's directory is read beside it).
func (c *cli) storageCmd(use, short string, run func(ctx context.Context, s checkpoint.Storage) error) *cobra.Command {
	cmd := &cobra.Command{Use: use, Short: short, Args: cobra.NoArgs, RunE: func(cmd *cobra.Command, _ []string) error {
		ctx := cmd.Context()
		s, done, err := c.storage(ctx, false)
		if err != nil {
			return err
		}
		defer done()
		return run(ctx, s)
	}}
	c.storageFlags(cmd)
	return cmd
}

// storageFlags adds the checkpoint storage flags to cmd.
func (c *cli) storageFlags(cmd *cobra.Command) {
	cmd.Flags().StringVar(&c.job, "job", "", "the job's name (keyed.NewJob)")
	cmd.Flags().StringVar(&c.checkpoints, "checkpoints", "", "the job's checkpoints: a directory (keyed.Dir), or a bucket URL (file:///dir, mem://); default with --job: keyed.DefaultDir(job)")
	cmd.Flags().StringVar(&c.prefix, "prefix", "", "with a bucket URL: the job's prefix in it (keyed.CheckpointStorage's blobstore prefix)")
}

// clusterFlags adds the cluster flags to cmd.
func (c *cli) clusterFlags(cmd *cobra.Command) {
	cmd.Flags().StringVar(&c.brokers, "brokers", "", "Kafka bootstrap servers, host:port,...")
	cmd.Flags().StringVar(&c.properties, "properties", "", "a Java client.properties file (security.protocol, sasl.jaas.config, ...)")
	cmd.Flags().StringArrayVarP(&c.set, "set", "X", nil, "a librdkafka setting, name=value (repeatable)")
}

// storage opens the checkpoint storage --checkpoints names. With lock, a
// directory is locked as a running job locks it: a job that runs on it
// makes this fail, naming the lock.
func (c *cli) storage(ctx context.Context, lock bool) (checkpoint.Storage, func(), error) {
	loc := c.checkpoints
	if loc == "" && c.job != "" {
		loc = keyed.DefaultDir(c.job)
	}
	if loc == "" {
		return nil, nil, usagef("--checkpoints is required: the job's checkpoint directory (keyed.Dir, or keyed.DefaultDir(job): $KORD_STATE_DIR/<job>), or a bucket URL")
	}
	if strings.Contains(loc, "://") {
		b, err := blob.OpenBucket(ctx, loc)
		if err != nil {
			return nil, nil, usagef("--checkpoints %s: %v (kord knows file:// and mem:// buckets)", loc, err)
		}
		return inBucket{blobstore.New(b, c.prefix), loc}, func() { b.Close() }, nil
	}
	if c.prefix != "" {
		return nil, nil, usagef("--prefix %s: only with a bucket URL", c.prefix)
	}
	if _, err := os.Stat(loc); err != nil {
		return nil, nil, usagef("--checkpoints %s: %v", loc, err)
	}
	open := checkpoint.OpenSharedStore
	if lock {
		open = checkpoint.OpenStore
	}
	s, err := open(vfs.Default(), loc)
	if err != nil {
		return nil, nil, &exitError{2, err}
	}
	return s, func() { s.Close() }, nil
}

// inBucket names its objects with the bucket's URL, for messages.
type inBucket struct {
	checkpoint.Storage
	url string
}

func (b inBucket) Where(name string) string { return b.url + " key " + b.Storage.Where(name) }

// client returns a client of the cluster the flags name.
func (c *cli) client() (*kafkaio.Client, error) {
	var opts []kafkaio.Opt
	if c.brokers != "" {
		opts = append(opts, kafkaio.Brokers(strings.Split(c.brokers, ",")...))
	}
	if c.properties != "" {
		opts = append(opts, kafkaio.Properties(c.properties))
	}
	for _, kv := range c.set {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, usagef("-X %s: want name=value", kv)
		}
		opts = append(opts, kafkaio.Set(k, v))
	}
	cl, err := kafkaio.NewClient(opts...)
	if err != nil {
		return nil, usagef("%v (give the cluster with --brokers, or --properties)", err)
	}
	return cl, nil
}

func usagef(format string, args ...any) error {
	return &exitError{2, fmt.Errorf(format, args...)}
}

// emit prints v as JSON with --json, else calls text.
func (c *cli) emit(v any, text func(w io.Writer)) error {
	if c.json {
		enc := json.NewEncoder(c.out)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	text(c.out)
	return nil
}
