package keyed

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/kordproject/kord/checkpoint"
	"github.com/kordproject/kord/keyed/connector"
	"github.com/kordproject/kord/keyed/internal/channel"
	"github.com/kordproject/kord/serde"
)

// The hop (DESIGN.md, "Keying by a field: the hop"). Processes of one job have no channels
// between them, so on a job of several processes (Instance) a stream keyed
// by a field (KeyBy) reaches its stage through a topic of the job's: the
// stage's hop. Process turns such an edge into a sink that writes the
// records, encoded, in the job's transactions (the first sink's Hops) and
// a source of the same job that reads them back by partition, so the stage
// is keyed by partition like any stage on several processes. The records
// of checkpoint n are read once n committed; the reader's offsets go into
// a later checkpoint, committed by whichever process owns the partition.
//
// Watermarks cross as marks: at each checkpoint's barrier the writing side
// of each process writes, to every partition of the hop, its watermark
// once for each input partition it owns (a writer), and the reading side
// takes, per hop partition, the least of every writer's latest mark
// (Flink's rule across a shuffle: the minimum over the channels in),
// which does not depend on how fast each process runs.

// Serde gives how k's records are encoded when they cross processes. On a
// job of several processes (Instance) a stream keyed with KeyBy or
// KeyByString reaches its stage through a topic of the job's (its hop:
// kord.<job>.<stage>.repartition with a Kafka sink), and needs it; on one
// process its records stay in memory and it is not used.
func (k *KeyedStream[K, T]) Serde(values serde.Serde[T]) *KeyedStream[K, T] {
	k.values = values
	return k
}

// hopNode is a hop, type-erased.
type hopNode interface {
	stage() string
	// bind gives the hop its connectors, from the job's first sink.
	bind(h connector.Hops, job string)
	// topic is the hop's topic (once bound).
	topic() string
	// upstream are the stages whose records cross the hop.
	upstream() []stageNode
	// setWriters tells the writing side, for a run, the writers this
	// process owns and how many there are in all.
	setWriters(owned []string, all int)
	// created says the hop's topic has partitions partitions.
	created(partitions int)
}

// hopOf turns k, keyed by a field on a job of several processes, into
// the stream of its hop into stage: a sink of k's records and a source of
// the hop topic, keyed by partition.
func hopOf[K, T any](k *KeyedStream[K, T], stage string) *KeyedStream[K, T] {
	j := k.j
	if k.values == nil {
		j.errs = append(j.errs, fmt.Errorf("keyed: stage %q: on a job of several processes (Instance) its input, keyed by %q, crosses processes through a topic of the job's (the hop); give the keyed stream's serde (KeyedStream.Serde). A join's inputs cannot cross yet: key them by partition (ByPartition) on co-partitioned topics",
			stage, k.keyName))
	}
	h := &hopEdge[T]{name: stage, values: k.values, key: k.key}
	ex := &sinkExchange[T]{}
	for _, s := range k.streams {
		s.attach(ex)
		h.from = append(h.from, s.origins()...)
	}
	j.outputs = append(j.outputs, &sinkOf[T]{name: stage + "-hop-out", sink: &hopSink[T]{h: h}, in: ex})
	src := &sourceOf[T]{name: stage + "-hop-in", src: &hopSource[T]{h: h}, watermarks: true, hop: true}
	j.sources = append(j.sources, src)
	j.hops = append(j.hops, h)
	return &KeyedStream[K, T]{j: j, streams: []outlet[T]{src}, byPartition: true, keyName: k.keyName, keyOf: k.keyOf}
}

// hopEdge is one hop: its stage, how its records are encoded and keyed,
// and its connectors once bound.
type hopEdge[T any] struct {
	name   string
	values serde.Serde[T]
	key    func(v T, recordKey []byte) []byte
	from   []stageNode
	out    connector.Sink[connector.HopRecord]
	in     connector.Source[connector.HopRecord]
	// The run's writers: those this process owns, and how many in all;
	// the topic's partitions.
	owned []string
	all   int
	parts int
}

func (h *hopEdge[T]) stage() string         { return h.name }
func (h *hopEdge[T]) upstream() []stageNode { return h.from }
func (h *hopEdge[T]) setWriters(owned []string, all int) {
	h.owned, h.all = owned, all
}
func (h *hopEdge[T]) bind(hs connector.Hops, job string) { h.out, h.in = hs.Hop(job, h.name) }
func (h *hopEdge[T]) created(partitions int)             { h.parts = partitions }
func (h *hopEdge[T]) topic() string {
	if h.in == nil {
		return ""
	}
	return h.in.Topic()
}

// elemSink is a sink task's sink that takes elements whole, with their
// keys and times, and hears of watermarks and barriers: a hop's.
type elemSink[T any] interface {
	writeElems(ctx context.Context, epoch uint64, es []channel.Element[T]) error
	advance(wm int64)
	mark(ctx context.Context, epoch uint64) error
}

// hopSink writes a hop: each record encoded, keyed as KeyBy keys it (the
// source record's key at hand, for KeyByRecordKey), with its time; and
// at each barrier the marks (mark).
type hopSink[T any] struct {
	h  *hopEdge[T]
	wm int64
}

var errHopWrite = errors.New("keyed: a hop's sink takes elements (writeElems), not values")

func (s *hopSink[T]) Reset(ctx context.Context, info connector.SinkInfo) error {
	s.wm = connector.NoTime
	return s.h.out.Reset(ctx, info)
}
func (s *hopSink[T]) Write(context.Context, uint64, T) error { return errHopWrite }
func (s *hopSink[T]) Commit(context.Context, checkpoint.Ref, []checkpoint.PartitionOffset) error {
	return fmt.Errorf("keyed: the hop into %q commits with the job's first sink", s.h.name)
}
func (s *hopSink[T]) Recorded(context.Context) (*connector.Recorded, error) { return nil, nil }

// CommitsWith implements connector.Participant: the hop's records are in
// the first sink's transactions.
func (s *hopSink[T]) CommitsWith() any {
	if p, ok := s.h.out.(connector.Participant); ok {
		return p.CommitsWith()
	}
	return nil
}

// writeElems writes es under epoch.
func (s *hopSink[T]) writeElems(ctx context.Context, epoch uint64, es []channel.Element[T]) error {
	h := s.h
	for i := range es {
		e := &es[i]
		val, err := h.values.Encode(nil, e.V)
		if err != nil {
			return Permanent(fmt.Errorf("keyed: the hop into %q: encoding a record: %w", h.name, err))
		}
		if err := h.out.Write(ctx, epoch, connector.HopRecord{Key: h.key(e.V, e.Key), Value: val, Time: e.TS}); err != nil {
			return err
		}
	}
	return nil
}

// advance takes the sink task's watermark.
func (s *hopSink[T]) advance(wm int64) { s.wm = wm }

// mark writes, under epoch (the checkpoint whose barrier came), this
// process's watermark for each writer it owns to every partition of the
// hop. Before a first watermark it writes none: the reader waits.
func (s *hopSink[T]) mark(ctx context.Context, epoch uint64) error {
	if s.wm == connector.NoTime {
		return nil
	}
	h := s.h
	for _, w := range h.owned {
		m := &connector.HopMark{Writer: w, Writers: h.all, Watermark: s.wm}
		for p := range int32(h.parts) {
			if err := h.out.Write(ctx, epoch, connector.HopRecord{Mark: m, Partition: p}); err != nil {
				return err
			}
		}
	}
	return nil
}

// hopSource reads a hop: its records decoded (one that does not decode
// goes to the dead letters, as a source's would), and its marks passed on
// to the source task.
type hopSource[T any] struct{ h *hopEdge[T] }

func (s *hopSource[T]) Topic() string { return s.h.topic() }
func (s *hopSource[T]) Partitions(ctx context.Context) ([]int32, error) {
	return s.h.in.Partitions(ctx)
}
func (s *hopSource[T]) Start(ctx context.Context, ps []int32) ([]connector.Position, error) {
	return s.h.in.Start(ctx, ps)
}

// Validate asks the hop's own source.
func (s *hopSource[T]) Validate() error {
	if v, ok := s.h.in.(interface{ Validate() error }); ok {
		return v.Validate()
	}
	return nil
}

// connectorSource is the hop's own source, which provenance asks for
// its identity (connector.Identified).
func (s *hopSource[T]) connectorSource() any { return s.h.in }

func (s *hopSource[T]) Reader(ctx context.Context) (connector.Reader[T], error) {
	r, err := s.h.in.Reader(ctx)
	if err != nil {
		return nil, err
	}
	return &hopReader[T]{h: s.h, r: r}, nil
}

type hopReader[T any] struct {
	h   *hopEdge[T]
	r   connector.Reader[connector.HopRecord]
	out []connector.SourceRecord[T]
}

func (r *hopReader[T]) Assign(ctx context.Context, ps []connector.Position) error {
	return r.r.Assign(ctx, ps)
}
func (r *hopReader[T]) Close() error { return r.r.Close() }

// Behind implements connector.BacklogReader when the hop's reader does.
func (r *hopReader[T]) Behind(ctx context.Context, p int32) (bool, error) {
	if b, ok := r.r.(connector.BacklogReader); ok {
		return b.Behind(ctx, p)
	}
	return false, nil
}

// Position implements connector.PositionReader when the hop's reader
// does: a hop is written in transactions, so each of its partitions ends
// in a marker.
func (r *hopReader[T]) Position(p int32) int64 {
	if pr, ok := r.r.(connector.PositionReader); ok {
		return pr.Position(p)
	}
	return -1
}

func (r *hopReader[T]) Poll(ctx context.Context, max int, wait time.Duration) ([]connector.SourceRecord[T], bool, error) {
	recs, done, err := r.r.Poll(ctx, max, wait)
	if err != nil {
		return nil, done, err
	}
	clear(r.out)
	out := r.out[:0]
	for _, rec := range recs {
		o := connector.SourceRecord[T]{Partition: rec.Partition, Offset: rec.Offset, Key: rec.Key, Timestamp: rec.Timestamp, Mark: rec.Mark, Bad: rec.Bad}
		if o.Mark == nil {
			o.Mark = rec.Value.Mark // a source that keeps HopRecords whole
		}
		if o.Mark == nil && rec.Bad == nil {
			v, err := r.h.values.Decode(rec.Value.Value)
			if err != nil {
				o.Bad = &connector.BadRecord{Topic: r.h.topic(), Partition: rec.Partition, Offset: rec.Offset, Key: rec.Key, Value: rec.Value.Value, Timestamp: rec.Timestamp,
					Err: fmt.Errorf("keyed: the hop into %q: %s[%d] offset %d: decode: %w", r.h.name, r.h.topic(), rec.Partition, rec.Offset, err)}
			} else {
				o.Value = v
			}
		}
		out = append(out, o)
	}
	r.out = out
	return out, done, nil
}

// bindHops gives every hop its connectors from the job's first sink, or
// says why it cannot.
func (j *Job) bindHops() []error {
	if len(j.hops) == 0 || j.sink == nil {
		return nil
	}
	hs, ok := j.sink.sinkValue().(connector.Hops)
	if !ok {
		return []error{fmt.Errorf("keyed: sink %q (%T) cannot carry records keyed by a field between the processes of a job (connector.Hops): key every stage by partition (ByPartition)", j.sink.sinkName(), j.sink.sinkValue())}
	}
	j.bindMu.Lock()
	defer j.bindMu.Unlock()
	for _, h := range j.hops {
		h.bind(hs, j.name)
	}
	return nil
}

// createHops creates each hop's topic with the job's key groups as its
// partitions (the partition count of its inputs, which on several
// processes are co-partitioned), or checks an existing one's.
func (j *Job) createHops(ctx context.Context) error {
	if len(j.hops) == 0 {
		return nil
	}
	n := 0
	for _, s := range j.sources {
		if s.isHop() {
			continue
		}
		if _, _, bc := s.feeds(); bc {
			continue
		}
		parts, err := s.partitions(ctx)
		if err != nil {
			return fmt.Errorf("keyed: source %q: %w", s.sourceName(), err)
		}
		n = len(parts)
		break
	}
	if n == 0 {
		return Permanent(errors.New("keyed: a job of several processes with a hop needs an input that is not broadcast, whose partition count the hop takes"))
	}
	hs := j.sink.sinkValue().(connector.Hops)
	for _, h := range j.hops {
		if err := hs.CreateHop(ctx, h.topic(), n); err != nil {
			return err
		}
		h.created(n)
	}
	return nil
}

// tellWriters gives each hop, for the run, the writers this process owns:
// the partitions assigned to it of the inputs whose records reach the hop
// (through any stage), named topic[partition], and how many there are.
func (j *Job) tellWriters(r *run, srcs []srcBuild) {
	for _, h := range j.hops {
		var owned []string
		all := 0
		seen := map[stageNode]bool{}
		var walk func(n stageNode)
		walk = func(n stageNode) {
			if seen[n] {
				return
			}
			seen[n] = true
			switch n := n.(type) {
			case sourceNode:
				i := slices.Index(j.sources, n)
				if i < 0 || r.whole[n.topic()] {
					return
				}
				all += srcs[i].all
				for _, p := range srcs[i].parts {
					owned = append(owned, fmt.Sprintf("%s[%d]", n.topic(), p))
				}
			case opNode:
				for _, u := range n.inputStages() {
					walk(u)
				}
			}
		}
		for _, n := range h.upstream() {
			walk(n)
		}
		h.setWriters(owned, all)
	}
}
