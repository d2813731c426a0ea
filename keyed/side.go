package keyed

import (
	"fmt"

	"github.com/kordproject/kord/keyed/internal/channel"
)

// SideOutput names a second output of keyed stages, with records of its
// own type S (Flink's OutputTag): an operator sends to it with EmitSide,
// and Side takes it from a stage as a stream, which goes on like any
// other: to a sink, or keyed into further stages. Its records travel with
// the stage's barriers and watermarks, so they are exactly-once as the
// main output is. One SideOutput may be used by several stages; Side
// takes it from one.
type SideOutput[S any] struct{ name string }

// NewSideOutput returns a side output named name (for errors).
func NewSideOutput[S any](name string) *SideOutput[S] { return &SideOutput[S]{name: name} }

// EmitSide sends v to side output tag of the stage processing the record
// (or firing the timer), with that record's time. A tag that Side did not
// take from this stage fails the task, naming the stage and the tag:
// nothing is dropped unseen.
func EmitSide[O, S any](out *Collector[O], tag *SideOutput[S], v S) {
	if out.err != nil {
		return
	}
	em, ok := out.sides[tag]
	if !ok {
		out.err = fmt.Errorf("side output %q goes nowhere from this stage: take it with keyed.Side", tag.name)
		return
	}
	out.err = em.(emit[S])([]channel.Element[S]{{V: v, TS: out.ts}})
}

// Side is the stream of side output tag of the keyed stage whose output
// is s (the Stream that Process, ProcessFunc or ProcessValue returned).
func Side[O, S any](s *Stream[O], tag *SideOutput[S]) *Stream[S] {
	h, ok := s.out.(sideHost)
	if !ok {
		s.j.errs = append(s.j.errs, fmt.Errorf("keyed: Side %q of stream from %q: a side output is a keyed stage's; take it from the Stream that Process returned, before MapValues, Filter or FlatMapValues", tag.name, s.name()))
		return &Stream[S]{j: s.j, out: &sideOutlet[S]{name: tag.name}}
	}
	w := h.side(tag, func(op stageNode) sideWiring { return &sideOutlet[S]{op: op, name: tag.name} })
	return &Stream[S]{j: s.j, out: w.(*sideOutlet[S])}
}

// sideHost is a keyed stage, which keeps its side outputs by tag.
type sideHost interface {
	side(tag any, mk func(op stageNode) sideWiring) sideWiring
}

// sideWiring is one side output of a stage, type-erased.
type sideWiring interface {
	sideName() string
	used() bool
	// connectSide gives one task of the stage its emit function (an
	// emit[S]) for the side output, adding its outboxes to outs.
	connectSide(r *run, outs *outputs) any
}

// sideOutlet is the outlet of a stage's side output.
type sideOutlet[S any] struct {
	op   stageNode // nil when Side was refused
	name string
	outs []inlet[S]
}

func (x *sideOutlet[S]) attach(in inlet[S]) {
	x.outs = append(x.outs, in)
	if x.op != nil {
		in.target().feed(x.op)
	}
}

func (x *sideOutlet[S]) origins() []stageNode {
	if x.op == nil {
		return nil
	}
	return []stageNode{x.op}
}

func (x *sideOutlet[S]) sideName() string { return x.name }
func (x *sideOutlet[S]) used() bool       { return len(x.outs) > 0 }
func (x *sideOutlet[S]) connectSide(r *run, outs *outputs) any {
	return fanOut(r, x.outs, outs)
}

func (o *opOf[T, O]) side(tag any, mk func(op stageNode) sideWiring) sideWiring {
	for i, t := range o.sideTags {
		if t == tag {
			return o.sides[i]
		}
	}
	w := mk(o)
	o.sideTags, o.sides = append(o.sideTags, tag), append(o.sides, w)
	return w
}

// connectSides gives one task of the stage its side outputs' emit
// functions, by tag.
func (o *opOf[T, O]) connectSides(r *run, outs *outputs) map[any]any {
	if len(o.sides) == 0 {
		return nil
	}
	m := make(map[any]any, len(o.sides))
	for i, w := range o.sides {
		if w.used() {
			m[o.sideTags[i]] = w.connectSide(r, outs)
		}
	}
	return m
}
