package kafkaio

import (
	"context"
	"fmt"

	"github.com/kordproject/kord/keyed"
	"github.com/kordproject/kord/keyed/connector"
	"github.com/kordproject/kord/serde"
)

// Keying by a field on several processes (DESIGN.md, "Several processes"):
// Kafka Streams' shape. A job on one process shuffles records to the task
// that owns their key group through in-process channels. Processes have no
// channels between them, so a job on several processes keys by a field in
// two stages, two jobs in each process:
//
//  1. the repartition stage reads the input partitions assigned to the
//     process and writes every record, keyed by the field, to the
//     repartition topic kord.<job>.<stage>.repartition, placed by kord's
//     Java-exact partitioner (murmur2 of the key), in the same
//     transaction as the input offsets it consumed;
//  2. the job proper reads the repartition topic by partition
//     (keyed.ByPartition: the key group is the partition), so each key's
//     records and state live in one partition, which moves between
//     processes with its state like any input partition.
//
// Each stage is exactly-once on its own (its own transactional producer,
// kord.<stage job>.<instance>, and commit group), and the second reads
// the first's output read_committed, so the pair is exactly-once.

// RepartitionTopic is the repartition topic of stage of job:
// kord.<job>.<stage>.repartition (Kafka Streams names its own
// <application.id>-<name>-repartition).
func RepartitionTopic(job, stage string) string { return "kord." + job + "." + stage + ".repartition" }

// Repartition is the repartition stage of a job keyed by a field on
// several processes: a job of its own (Job), named <job>.<stage>, that
// reads the input and writes the repartition topic (Topic), which the job
// proper reads (Source) by partition. Run both in every process with
// keyed.RunAll.
type Repartition[T any] struct {
	c          *Client
	job        *keyed.Job
	topic      string
	input      connector.Source[T]
	values     serde.Serde[T]
	partitions int32
}

// NewRepartition declares the repartition stage named stage of job: it
// reads input, and writes each record v to the repartition topic with key
// key(v) and its value encoded by values. The job proper reads it back
// with Source. Options: Partitions, Parallelism and JobOptions configure
// the stage; Set, Logger, EpochBuffer, InitTimeout, Instance and
// SessionTimeout its sink, as they would the job proper's.
func NewRepartition[T any](c *Client, job, stage string, input connector.Source[T], key func(T) []byte, values serde.Serde[T], opts ...Opt) *Repartition[T] {
	o := apply(toRepartition, opts)
	parallelism := o.parallelism
	if parallelism == 0 {
		parallelism = 2
	}
	r := &Repartition[T]{c: c, topic: RepartitionTopic(job, stage), input: input, values: values, partitions: o.partitions}
	r.job = keyed.NewJob(job+"."+stage, o.jobOpts...)
	o.key = func(v T) ([]byte, error) { return key(v), nil }
	s := keyed.FromSource(r.job, "input", parallelism, input)
	out := keyed.Process(keyed.ByPartition(s), "repartition", parallelism, func() keyed.Operator[T, T] { return forward[T]{} })
	keyed.ToSink(out, "repartition-topic", connector.Sink[T](newSink(c, r.topic, values, o)))
	return r
}

// forward passes every record on unchanged: the repartition stage keeps no
// state.
type forward[T any] struct{}

func (forward[T]) Open(*keyed.Backend) error { return nil }

func (forward[T]) Process(_ []byte, v T, out *keyed.Collector[T]) error {
	out.Emit(v)
	return nil
}

// Job is the repartition stage's job.
func (r *Repartition[T]) Job() *keyed.Job { return r.job }

// Topic is the repartition topic.
func (r *Repartition[T]) Topic() string { return r.topic }

// Source returns a source of the repartition topic for the job proper
// (read with keyed.ByPartition), decoding values with the stage's serde.
// Options: those of NewSource.
func (r *Repartition[T]) Source(opts ...Opt) connector.Source[T] {
	return NewSource(r.c, r.topic, r.values, opts...)
}

// CreateTopic creates the repartition topic if it does not exist, with
// Partitions partitions (default: the input topic's), and
// checks an existing one's partition count: it is the job proper's key
// group count, which cannot change under its state.
func (r *Repartition[T]) CreateTopic(ctx context.Context) error {
	c, err := r.c.admin(nil)
	if err != nil {
		return err
	}
	defer c.Close()
	want := r.partitions
	if want <= 0 {
		in, err := c.Partitions(ctx, r.input.Topic())
		if err != nil {
			return fmt.Errorf("kafkaio: repartition topic %s: partitions of the input %s: %w", r.topic, r.input.Topic(), err)
		}
		want = int32(len(in))
	}
	if _, err := c.CreateTopic(ctx, r.topic, want, nil); err != nil {
		return fmt.Errorf("kafkaio: repartition topic: %w", err)
	}
	have, err := c.Partitions(ctx, r.topic)
	if err != nil {
		return fmt.Errorf("kafkaio: repartition topic %s: %w", r.topic, err)
	}
	if int32(len(have)) != want {
		return fmt.Errorf("kafkaio: repartition topic %s has %d partitions, want %d: its partitions are the job's key groups, which cannot change under its state (start the job afresh under another name, or set Partitions(%d))",
			r.topic, len(have), want, len(have))
	}
	return nil
}
