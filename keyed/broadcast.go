package keyed

import (
	"encoding/binary"
	"errors"
	"fmt"
	"iter"
	"maps"

	"github.com/kordproject/kord/keyed/internal/keygroup"
	"github.com/kordproject/kord/serde"
)

// BroadcastStream is a stream every task of a stage receives whole: a
// low-volume input of rules or settings (Flink's broadcast stream).
type BroadcastStream[B any] struct{ s *Stream[B] }

// Broadcast makes s a broadcast input for ProcessBroadcast: each of its
// records goes to every task of the stage, in s's order per upstream task.
func Broadcast[B any](s *Stream[B]) *BroadcastStream[B] { return &BroadcastStream[B]{s: s} }

// BroadcastOperator is a keyed operator with a broadcast input (Flink's
// KeyedBroadcastProcessFunction): Process is called for each record of the
// keyed input with its key's keyed state, ProcessBroadcast for each record
// of the broadcast input, on every task, with no key current (keyed state
// is not to be used there). The broadcast state (BroadcastMap) is what
// ProcessBroadcast builds: every task applies the same records in the same
// order, so every task holds the same, and Process reads it.
type BroadcastOperator[T, B, O any] interface {
	// Open registers the operator's keyed state (Value, List, Map) and
	// broadcast state (BroadcastMap) on b.
	Open(b *Backend) error
	// Process handles one record of the keyed input.
	Process(key []byte, v T, out *Collector[O]) error
	// ProcessBroadcast handles one record of the broadcast input; it
	// alone may change the broadcast state.
	ProcessBroadcast(v B, out *Collector[O]) error
}

// ProcessBroadcast adds a keyed stage of two inputs: k, keyed, and rules,
// broadcast to every task (see BroadcastOperator). Barriers align across
// both; the task's watermark is the least of both inputs', so a broadcast
// input with no event time holds it back unless its stream has Idleness.
// The broadcast state is checkpointed once (the first task's copy, all
// being the same) and every task of a restore takes it, at any
// parallelism. k may be keyed by partition (ByPartition): the broadcast
// input's records keep no partition, and its topic is not among those
// whose partitions are the key groups.
//
// On a job of several processes (Instance), k is keyed by partition, and
// the broadcast input is a source's stream marked Auxiliary: every process
// reads all of its partitions from the source's start at each run, before
// the keyed input, and rebuilds the broadcast state from them rather than
// restoring it (DESIGN.md, "Broadcast state"). Parallelism as Process.
func ProcessBroadcast[K, T, B, O any](k *KeyedStream[K, T], rules *BroadcastStream[B], name string, parallelism int, newOp func() BroadcastOperator[T, B, O]) *Stream[O] {
	j := k.j
	if rules.s.j != j {
		j.errs = append(j.errs, fmt.Errorf("keyed: ProcessBroadcast %q of streams of jobs %q and %q: a stream belongs to one job", name, j.name, rules.s.j.name))
	}
	both := &KeyedStream[K, either[T, B]]{j: j, keyName: k.keyName, keyOf: k.keyOf, byPartition: k.byPartition,
		broadcast: func(e either[T, B]) bool { return e.right }}
	if key := k.key; key != nil {
		both.key = func(e either[T, B], recordKey []byte) []byte { return key(e.l, recordKey) }
	}
	for _, s := range k.streams {
		both.streams = append(both.streams, &mapped[T, either[T, B]]{up: s, f: func(v T) either[T, B] { return either[T, B]{l: v} }})
	}
	both.streams = append(both.streams, &mapped[B, either[T, B]]{up: broadcastSide[B]{rules.s.out}, f: func(v B) either[T, B] { return either[T, B]{r: v, right: true} }})
	return Process(both, name, parallelism, func() Operator[either[T, B], O] {
		return &broadcastOp[T, B, O]{op: newOp()}
	})
}

// broadcastOp runs a BroadcastOperator as the Operator of its inputs'
// union, and keeps its broadcast state as the task's operator state
// (connector.OperatorState, which a source's reader or a sink keeps too).
type broadcastOp[T, B, O any] struct {
	op BroadcastOperator[T, B, O]
	b  *Backend
}

func (o *broadcastOp[T, B, O]) Open(b *Backend) error {
	o.b = b
	b.bcast = &broadcastStates{}
	return o.op.Open(b)
}

func (o *broadcastOp[T, B, O]) Process(key []byte, v either[T, B], out *Collector[O]) error {
	if !v.right {
		err := o.op.Process(key, v.l, out)
		if err == nil {
			err = o.b.bcast.err
		}
		return err
	}
	o.b.bcast.writable = true
	err := o.op.ProcessBroadcast(v.r, out)
	o.b.bcast.writable = false
	return err
}

// SnapshotState gives the broadcast state: the first task's copy, every
// task's being the same; the others give none.
func (o *broadcastOp[T, B, O]) SnapshotState(uint64) ([][]byte, error) {
	if o.b.r.Start != 0 {
		return nil, nil
	}
	var elems [][]byte
	for _, s := range o.b.bcast.states {
		es, err := s.encode()
		if err != nil {
			return nil, fmt.Errorf("broadcast state %q: %w", s.name(), err)
		}
		elems = append(elems, es...)
	}
	return elems, nil
}

// RestoreState takes the checkpoint's copy of the broadcast state.
func (o *broadcastOp[T, B, O]) RestoreState(elems [][]byte) error {
	byName := map[string]broadcaster{}
	for _, s := range o.b.bcast.states {
		byName[s.name()] = s
		s.clear()
	}
	for _, e := range elems {
		name, rest, err := cutName(e)
		if err != nil {
			return err
		}
		s, ok := byName[name]
		if !ok {
			return fmt.Errorf("keyed: operator %q: the checkpoint holds broadcast state %q, which the operator no longer registers", o.b.operator, name)
		}
		if err := s.restore(rest); err != nil {
			return fmt.Errorf("keyed: operator %q: broadcast state %q: %w", o.b.operator, name, err)
		}
	}
	return nil
}

// broadcastStates are a task's broadcast states: writable only during
// ProcessBroadcast; a write elsewhere fails the task (err).
type broadcastStates struct {
	states   []broadcaster
	writable bool
	err      error
}

type broadcaster interface {
	name() string
	encode() ([][]byte, error)
	restore(entry []byte) error
	clear()
}

// BroadcastState is a map every task of a ProcessBroadcast stage holds the
// same copy of: changed by ProcessBroadcast alone, read anywhere. Values
// are shared with nothing: Get returns what Put stored.
type BroadcastState[K comparable, V any] struct {
	n      string
	kc     serde.Serde[K]
	vc     serde.Serde[V]
	m      map[K]V
	states *broadcastStates
}

// BroadcastMap registers broadcast state name, with codecs for its keys
// and values, on the backend of a ProcessBroadcast stage's task (its
// Open).
func BroadcastMap[K comparable, V any](b *Backend, name string, kc serde.Serde[K], vc serde.Serde[V]) (*BroadcastState[K, V], error) {
	if b.bcast == nil {
		return nil, fmt.Errorf("keyed: operator %q: broadcast state %q: only a ProcessBroadcast stage has broadcast state", b.operator, name)
	}
	if err := validateName("broadcast state", name); err != nil {
		return nil, err
	}
	for _, s := range b.bcast.states {
		if s.name() == name {
			return nil, fmt.Errorf("keyed: operator %q: broadcast state %q registered twice", b.operator, name)
		}
	}
	s := &BroadcastState[K, V]{n: name, kc: kc, vc: vc, m: map[K]V{}, states: b.bcast}
	b.bcast.states = append(b.bcast.states, s)
	return s, nil
}

// Get returns the value of k, if any.
func (s *BroadcastState[K, V]) Get(k K) (V, bool) { v, ok := s.m[k]; return v, ok }

// Len is the number of entries.
func (s *BroadcastState[K, V]) Len() int { return len(s.m) }

// All yields the entries, in no set order.
func (s *BroadcastState[K, V]) All() iter.Seq2[K, V] { return maps.All(s.m) }

// Put sets k's value; only in ProcessBroadcast.
func (s *BroadcastState[K, V]) Put(k K, v V) {
	if s.check() {
		s.m[k] = v
	}
}

// Delete removes k; only in ProcessBroadcast.
func (s *BroadcastState[K, V]) Delete(k K) {
	if s.check() {
		delete(s.m, k)
	}
}

func (s *BroadcastState[K, V]) check() bool {
	if !s.states.writable && s.states.err == nil {
		s.states.err = fmt.Errorf("broadcast state %q changed outside ProcessBroadcast: only the broadcast input may change it, so that every task holds the same", s.n)
	}
	return s.states.writable
}

func (s *BroadcastState[K, V]) name() string { return s.n }
func (s *BroadcastState[K, V]) clear()       { clear(s.m) }

// encode gives one element per entry: the state's name, then the key's
// and the value's encodings, each after its length (uvarint).
func (s *BroadcastState[K, V]) encode() ([][]byte, error) {
	out := make([][]byte, 0, len(s.m))
	for k, v := range s.m {
		e := binary.AppendUvarint(nil, uint64(len(s.n)))
		e = append(e, s.n...)
		kb, err := s.kc.Encode(nil, k)
		if err != nil {
			return nil, err
		}
		e = binary.AppendUvarint(e, uint64(len(kb)))
		e = append(e, kb...)
		if e, err = s.vc.Encode(e, v); err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

func (s *BroadcastState[K, V]) restore(b []byte) error {
	n, w := binary.Uvarint(b)
	if w <= 0 || n > uint64(len(b)-w) {
		return errBadBroadcastEntry
	}
	k, err := s.kc.Decode(b[w : w+int(n)])
	if err != nil {
		return err
	}
	v, err := s.vc.Decode(b[w+int(n):])
	if err != nil {
		return err
	}
	s.m[k] = v
	return nil
}

var errBadBroadcastEntry = errors.New("a broadcast state entry cut short")

// cutName splits a broadcast state entry into its state's name and the
// rest.
func cutName(b []byte) (string, []byte, error) {
	n, w := binary.Uvarint(b)
	if w <= 0 || n > uint64(len(b)-w) {
		return "", nil, errBadBroadcastEntry
	}
	return string(b[w : w+int(n)]), b[w+int(n):], nil
}

// broadcastTo is the first key group of each of p tasks out of maxP: the
// key group a broadcast record is given in each task's copy.
func broadcastTo(maxP, p int) []int32 {
	out := make([]int32, p)
	for d := range out {
		out[d] = int32(keygroup.RangeFor(d, maxP, p).Start)
	}
	return out
}
