package kafkaio

import (
	"context"
	"errors"
	"fmt"

	"github.com/kordproject/kord/checkpoint"
	"github.com/kordproject/kord/keyed/connector"
	"github.com/kordproject/kord/producer"
	"github.com/kordproject/kord/serde"
)

// Output returns a further sink for a job whose first sink is first (a
// sink of NewSink): it writes topic through first's producer, inside
// first's transactions, each value encoded by values and its key by the
// Key option. Its records commit with the job's checkpoints in the same
// transaction as first's, so a read_committed reader of both topics sees
// a checkpoint's output of both or of neither. Give it to keyed.ToSink
// after first:
//
//	results := kafkaio.NewSink(client, "user-counts", serde.JSON[Result]())
//	pages := kafkaio.Output(results, "page-counts", serde.JSON[PageCount]())
//	keyed.ToSink(counts, "results", results)
//	keyed.ToSink(perPage, "pages", pages)
//
// A second NewSink in the same job would commit apart, and the job
// refuses it (on another cluster, naming both clusters). Options: Key.
func Output[T, O any](first connector.Sink[T], topic string, values serde.Serde[O], opts ...Opt) connector.Sink[O] {
	o := &output[O]{topic: topic, values: values, cfg: apply(toOutput, opts)}
	o.key, _ = o.cfg.key.(func(O) ([]byte, error))
	if o.cfg.key == nil {
		o.key = func(O) ([]byte, error) { return nil, nil }
	}
	if s, ok := first.(*sink[T]); ok {
		o.first = s
		s.outputs = append(s.outputs, topic)
	}
	return o
}

// output is an Output: what it is given goes into its first sink's open
// transaction, or its epoch buffer, as that sink's own records do.
type output[O any] struct {
	first  writer // nil when Output was given no kafkaio sink
	topic  string
	key    func(O) ([]byte, error)
	values serde.Serde[O]
	cfg    options
}

// writer is a kafkaio sink of any type, seen from an Output.
type writer interface {
	writeRecord(ctx context.Context, epoch uint64, rec producer.Record[[]byte, []byte]) error
}

func (s *sink[T]) writeRecord(ctx context.Context, epoch uint64, rec producer.Record[[]byte, []byte]) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.write(ctx, epoch, rec)
}

// CommitsWith implements connector.Participant: the job commits the
// Output's records with its first sink's.
func (o *output[O]) CommitsWith() any {
	if o.first == nil {
		return nil
	}
	return o.first
}

// ValidateSink implements keyed's check of a sink before the job runs.
func (o *output[O]) ValidateSink(connector.SinkInfo) error {
	var errs []error
	if o.first == nil {
		errs = append(errs, fmt.Errorf("kafkaio: Output to topic %q: its first sink is not one of kafkaio.NewSink", o.topic))
	}
	if o.topic == "" {
		errs = append(errs, errors.New("kafkaio: Output: no topic"))
	}
	if o.values == nil {
		errs = append(errs, fmt.Errorf("kafkaio: Output to topic %q: no serde for its values", o.topic))
	}
	if o.key == nil {
		var zero O
		errs = append(errs, fmt.Errorf("kafkaio: Output to topic %q: its Key takes another type than the Output's %T", o.topic, zero))
	}
	errs = append(errs, o.cfg.misplaced(fmt.Sprintf("Output to topic %q", o.topic)))
	return errors.Join(errs...)
}

// Reset implements connector.Sink: the first sink's Reset made the
// producer this Output writes through.
func (o *output[O]) Reset(context.Context, connector.SinkInfo) error { return nil }

// Write implements connector.Sink: v goes into the first sink's
// transaction of epoch, or waits in its epoch buffer.
func (o *output[O]) Write(ctx context.Context, epoch uint64, v O) error {
	key, val, hs, err := encodeRecord(o.topic, o.key, o.values, v)
	if err != nil {
		return err
	}
	return o.first.writeRecord(ctx, epoch, producer.Record[[]byte, []byte]{Topic: o.topic, Key: key, Value: val, Headers: hs})
}

// Commit implements connector.Sink; the job commits through the first
// sink, never through an Output.
func (o *output[O]) Commit(context.Context, checkpoint.Ref, []checkpoint.PartitionOffset) error {
	return fmt.Errorf("kafkaio: Output to topic %q commits with its first sink, not by itself", o.topic)
}

// Recorded implements connector.Sink: the first sink holds the record.
func (o *output[O]) Recorded(context.Context) (*connector.Recorded, error) { return nil, nil }

// encodeRecord encodes v's key and value for topic.
func encodeRecord[T any](topic string, key func(T) ([]byte, error), values serde.Serde[T], v T) (k, val []byte, hs []producer.Header, err error) {
	if k, err = key(v); err != nil {
		return nil, nil, nil, sinkErrorf(topic, "encoding a key: %w", err)
	}
	if h, ok := values.(serde.HeaderSerde[T]); ok {
		var sh []serde.Header
		if val, sh, err = h.EncodeHeaders(nil, v); err != nil {
			return nil, nil, nil, sinkErrorf(topic, "encoding a value: %w", err)
		}
		for _, x := range sh {
			hs = append(hs, producer.Header{Key: x.Key, Value: x.Value})
		}
		return k, val, hs, nil
	}
	if val, err = values.Encode(nil, v); err != nil {
		return nil, nil, nil, sinkErrorf(topic, "encoding a value: %w", err)
	}
	return k, val, nil, nil
}
