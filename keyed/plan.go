package keyed

import (
	"context"
	"fmt"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/kordproject/kord/checkpoint"
	"github.com/kordproject/kord/internal/align"
	"github.com/kordproject/kord/keyed/connector"
	"github.com/kordproject/kord/keyed/internal/channel"
	"github.com/kordproject/kord/keyed/internal/keygroup"
)

// The stages of the declared graph, and the plan that builds a run's tasks
// from them. Only the plan knows the run mode (one process or several, a
// restore or a fresh start); each stage builds its own tasks from what the
// plan resolved.

// sourceNode is a source stage, type-erased.
type sourceNode interface {
	stageNode
	sourceName() string
	topic() string
	sourceValue() any // the user's Source
	// timeErr refuses event-time settings that do not go together.
	timeErr() error
	isAuxiliary() bool
	isHop() bool
	// sendsWatermarks: Watermarks was called on the source's stream.
	sendsWatermarks() bool
	partitions(ctx context.Context) ([]int32, error)
	start(ctx context.Context, missing []int32, useNew bool) ([]connector.Position, error)
	// feeds reports whether the source's records go anywhere, whether to
	// a partition-mode stage, and whether only to broadcast inputs
	// (ProcessBroadcast).
	feeds() (used, partitionMode, broadcastOnly bool)
	setTasks(p int)
	parallelismSet() int
	// build starts the stage's tasks over positions (partition order).
	build(ctx, rctx context.Context, r *run, rs *restoreState, b srcBuild) error
}

// srcBuild is what the plan resolved for a source stage.
type srcBuild struct {
	parts []int32
	pos   map[int32]int64
	// partitionLayout gives each task the partitions of a contiguous
	// key-group range (partition mode), not round-robin.
	partitionLayout bool
	all             int // the topic's partition count (several processes: assigned here or not)
	maxP            int
	epoch           uint64
}

// opNode is a keyed stage, type-erased.
type opNode interface {
	stageNode
	validate(cfg config) error
	byPartition() bool
	keyName() string // KeyBy's name for the key; "" in partition mode
	inputStages() []stageNode
	hasOutputs() bool
	setTasks(p int)
	parallelismSet() int
	openInput(maxP, credits int)
	build(ctx, rctx context.Context, r *run, rs *restoreState, maxP int) error
}

// sinkNode is the sink stage, type-erased.
type sinkNode interface {
	reset(ctx context.Context, info connector.SinkInfo) error
	recorded(ctx context.Context) (*connector.Recorded, error)
	commit(ctx context.Context, ref checkpoint.Ref, offsets []checkpoint.PartitionOffset) error
	// resume tells the sink the checkpoint the run resumes after
	// (connector.Resumer).
	resume(after uint64)
	sinkName() string
	sinkValue() any // the user's Sink
	openInput(credits int)
	build(rctx context.Context, r *run, rs *restoreState, epoch uint64) error
}

type sourceOf[T any] struct {
	name        string
	parallelism int
	src         connector.Source[T]
	extract     func(v T, recordTime time.Time) time.Time // Stream.Timestamps; nil: the record's timestamp
	// Stream.Watermarks: whether the source makes watermarks, and the
	// out-of-orderness they allow.
	watermarks bool
	lateness   time.Duration
	idleness   time.Duration // Stream.Idleness; 0: none
	auxiliary  bool          // Stream.Auxiliary
	hop        bool          // the reading side of a hop: its marks make the watermarks
	outs       []inlet[T]
	p          int // tasks in the run being built
}

func (s *sourceOf[T]) sourceName() string { return s.name }

func (s *sourceOf[T]) isAuxiliary() bool { return s.auxiliary }
func (s *sourceOf[T]) isHop() bool       { return s.hop }

func (s *sourceOf[T]) sendsWatermarks() bool { return s.watermarks }

func (s *sourceOf[T]) timeErr() error {
	if s.auxiliary && (s.watermarks || s.idleness > 0) {
		return fmt.Errorf("keyed: source %q: Auxiliary with Watermarks or Idleness: an auxiliary input takes no part in event time", s.name)
	}
	return nil
}
func (s *sourceOf[T]) stageName() string { return s.name }
func (s *sourceOf[T]) topic() string     { return s.src.Topic() }
func (s *sourceOf[T]) sourceValue() any  { return s.src }
func (s *sourceOf[T]) tasks() int        { return s.p }
func (s *sourceOf[T]) setTasks(p int)    { s.p = p }
func (s *sourceOf[T]) parallelismSet() int {
	return s.parallelism
}
func (s *sourceOf[T]) origins() []stageNode { return []stageNode{s} }
func (s *sourceOf[T]) attach(in inlet[T]) {
	s.outs = append(s.outs, in)
	in.target().feed(s)
}

func (s *sourceOf[T]) feeds() (used, partitionMode, broadcastOnly bool) {
	pm, bc := false, len(s.outs) > 0
	for _, in := range s.outs {
		x := in.target()
		if x.partitionMode() {
			pm = true
		}
		if _, ok := x.(broadcastTarget); !ok {
			bc = false
		}
	}
	return len(s.outs) > 0, pm, bc
}

func (s *sourceOf[T]) partitions(ctx context.Context) ([]int32, error) {
	parts, err := s.src.Partitions(ctx)
	if err != nil {
		return nil, err
	}
	sort.Slice(parts, func(a, b int) bool { return parts[a] < parts[b] })
	return parts, nil
}

func (s *sourceOf[T]) start(ctx context.Context, missing []int32, useNew bool) ([]connector.Position, error) {
	if ns, ok := s.src.(connector.NewPartitionStarter); ok && useNew {
		return ns.StartNew(ctx, missing)
	}
	return s.src.Start(ctx, missing)
}

type opOf[T, O any] struct {
	name        string
	parallelism int
	newOp       func() Operator[T, O]
	in          *keyedExchange[T]
	inputs      []stageNode // the stages whose records come in
	outs        []inlet[O]
	// Side outputs that Side took, by tag, in the order taken.
	sideTags []any
	sides    []sideWiring
	p        int // tasks in the run being built
}

func (o *opOf[T, O]) stageName() string        { return o.name }
func (o *opOf[T, O]) tasks() int               { return o.p }
func (o *opOf[T, O]) setTasks(p int)           { o.p = p }
func (o *opOf[T, O]) parallelismSet() int      { return o.parallelism }
func (o *opOf[T, O]) byPartition() bool        { return o.in.byPartition }
func (o *opOf[T, O]) keyName() string          { return o.in.keyName }
func (o *opOf[T, O]) inputStages() []stageNode { return o.inputs }

// readTopics are the topics of the sources the stage reads directly (in
// partition mode, whose partitions are its key groups), but those every
// process reads whole.
func (o *opOf[T, O]) readTopics(r *run) []string {
	var topics []string
	for _, n := range o.inputs {
		if s, ok := n.(sourceNode); ok && !r.whole[s.topic()] {
			topics = append(topics, s.topic())
		}
	}
	return topics
}
func (o *opOf[T, O]) hasOutputs() bool {
	for _, w := range o.sides {
		if w.used() {
			return true
		}
	}
	return len(o.outs) > 0
}
func (o *opOf[T, O]) origins() []stageNode        { return []stageNode{o} }
func (o *opOf[T, O]) openInput(maxP, credits int) { o.in.open(o.p, maxP, credits) }
func (o *opOf[T, O]) attach(in inlet[O]) {
	o.outs = append(o.outs, in)
	in.target().feed(o)
}

func (x *keyedExchange[T]) partitionMode() bool { return x.byPartition }
func (x *sinkExchange[O]) partitionMode() bool  { return false }

func (o *opOf[T, O]) validate(cfg config) error {
	if o.in.byPartition && cfg.MaxParallelism != 0 {
		return fmt.Errorf("keyed: operator %q: partition mode takes its max parallelism from the partition count; leave MaxParallelism unset", o.name)
	}
	if !o.in.byPartition && o.in.key == nil {
		return fmt.Errorf("keyed: operator %q: nil key function", o.name)
	}
	if o.newOp == nil {
		return fmt.Errorf("keyed: operator %q: nil operator constructor", o.name)
	}
	for _, w := range o.sides {
		if !w.used() {
			return fmt.Errorf("keyed: stage %q: its side output %q (Side) goes nowhere: send it to a sink or key it into a further stage", o.name, w.sideName())
		}
	}
	return nil
}

type sinkOf[O any] struct {
	name string
	sink connector.Sink[O]
	in   *sinkExchange[O]
}

func (s *sinkOf[O]) reset(ctx context.Context, info connector.SinkInfo) error {
	return s.sink.Reset(ctx, info)
}
func (s *sinkOf[O]) resume(after uint64) {
	if r, ok := s.sink.(connector.Resumer); ok {
		r.Resume(after)
	}
}
func (s *sinkOf[O]) sinkName() string      { return s.name }
func (s *sinkOf[O]) sinkValue() any        { return s.sink }
func (s *sinkOf[O]) openInput(credits int) { s.in.open(credits) }
func (s *sinkOf[O]) recorded(ctx context.Context) (*connector.Recorded, error) {
	return s.sink.Recorded(ctx)
}
func (s *sinkOf[O]) commit(ctx context.Context, ref checkpoint.Ref, offsets []checkpoint.PartitionOffset) error {
	return s.sink.Commit(ctx, ref, offsets)
}

// validateGraph checks how the stages connect.
func (j *Job) validateGraph() []error {
	var errs []error
	topics := map[string]bool{}
	for _, s := range j.sources {
		if s.sourceValue() == nil {
			errs = append(errs, fmt.Errorf("keyed: source %q is nil", s.sourceName()))
			continue
		}
		if topics[s.topic()] {
			errs = append(errs, fmt.Errorf("keyed: two sources read topic %q", s.topic()))
		}
		topics[s.topic()] = true
		if err := s.timeErr(); err != nil {
			errs = append(errs, err)
		}
		if used, _, _ := s.feeds(); !used {
			errs = append(errs, fmt.Errorf("keyed: source %q feeds nothing: key it (KeyBy, ByPartition) into a stage", s.sourceName()))
		}
	}
	for _, o := range j.ops {
		if err := o.validate(j.cfg); err != nil {
			errs = append(errs, err)
		}
		if j.eventTime[o.stageName()] {
			errs = append(errs, noWatermarks(o)...)
		}
		if !o.hasOutputs() {
			errs = append(errs, fmt.Errorf("keyed: stage %q: its output goes nowhere: send it to the sink (ToSink) or key it into a further stage (KeyBy)", o.stageName()))
		}
		if o.byPartition() {
			// Several sources (CoProcess of two ByPartition streams) share
			// the key groups, one per partition: keyGroups checks their
			// partition counts agree.
			for _, in := range o.inputStages() {
				if _, ok := in.(sourceNode); !ok {
					errs = append(errs, fmt.Errorf("keyed: operator %q: partition mode keys a source's records by their partition, and %q is no source", o.stageName(), in.stageName()))
				}
			}
		}
	}
	return errs
}

// noWatermarks refuses an event-time stage (a window) fed by a source
// that sends no watermarks: its watermark, the oldest of its inputs',
// would never advance, and its windows never fire, not even at the end of
// a bounded input (Flink runs such a job and outputs nothing). Auxiliary
// inputs take no part in event time; a hop carries the upstream
// process's watermarks.
func noWatermarks(o opNode) []error {
	var errs []error
	seen := map[stageNode]bool{}
	var walk func(n stageNode)
	walk = func(n stageNode) {
		if seen[n] {
			return
		}
		seen[n] = true
		switch x := n.(type) {
		case sourceNode:
			if !x.sendsWatermarks() && !x.isAuxiliary() && !x.isHop() {
				errs = append(errs, fmt.Errorf("keyed: stage %q works in event time and source %q sends no watermarks, so its windows would never fire: call Watermarks(lateness) on the source's stream (FromSource(...).Watermarks)", o.stageName(), x.sourceName()))
			}
		case opNode:
			for _, in := range x.inputStages() {
				walk(in)
			}
		}
	}
	for _, in := range o.inputStages() {
		walk(in)
	}
	return errs
}

// numCPU is runtime.NumCPU; tests replace it.
var numCPU = runtime.NumCPU

// defaultParallelism is set, the parallelism a job gave a stage, if it is
// not 0; otherwise the partition count, at most the CPUs, and always at
// least 1.
func defaultParallelism(set, partitions int) int {
	if set != 0 {
		return set
	}
	return max(1, min(partitions, numCPU()))
}

// build plans the run and creates and starts every task under rctx, the
// run's context: it resolves partitions, positions, key groups and
// parallelism, checks them against the restored checkpoint, opens every
// exchange, then starts the stages' tasks. Setting up (listing
// partitions, a fresh start's commit, opening readers) is bounded by a
// minute.
func (j *Job) build(rctx context.Context, r *run, rs *restoreState) error {
	ctx, cancel := context.WithTimeout(rctx, time.Minute)
	defer cancel()
	cfg := r.cfg
	if err := checkOpStateNames(j, rs); err != nil {
		return Permanent(err)
	}
	if r.assigned != nil {
		if err := j.checkScaled(); err != nil {
			return Permanent(err)
		}
	}
	srcs, offsets, fresh, err := j.positions(ctx, r, rs)
	if err != nil {
		return err
	}
	j.tellOwners(r, srcs)
	j.tellWriters(r, srcs)
	maxP, err := j.keyGroups(rs, srcs)
	if err != nil {
		return err
	}
	if err := j.parallelism(srcs, maxP); err != nil {
		return err
	}
	if err := j.checkStages(r, rs, maxP); err != nil {
		return err
	}
	if rs.fresh {
		if err := r.freshStart(ctx, rs, offsets); err != nil {
			return err
		}
	} else if r.assigned != nil && len(fresh) > 0 {
		// Partitions no process ever committed, beside restored ones:
		// their start is committed first, as a fresh start's is.
		if err := r.freshStart(ctx, rs, fresh); err != nil {
			return err
		}
	}
	// Every exchange before any task: a task connects to those it feeds.
	for _, o := range j.ops {
		o.openInput(maxP, cfg.Credits)
	}
	for _, s := range j.sinks() {
		s.openInput(cfg.Credits)
	}
	// The first epoch: output after the restored (or fresh) checkpoint.
	epoch := uint64(1)
	if rs.meta != nil {
		epoch = rs.meta.ID + 1
	}
	// The other sources read nothing until every auxiliary source task
	// has read its input to the end it had at the start (Stream.Auxiliary).
	aux := 0
	for _, s := range j.sources {
		if s.isAuxiliary() {
			aux += s.tasks()
		}
	}
	r.auxPending.Store(int64(aux))
	if aux == 0 {
		close(r.bootstrapped)
	}
	for i, s := range j.sources {
		b := srcs[i]
		b.maxP, b.epoch = maxP, epoch
		if err := s.build(ctx, rctx, r, rs, b); err != nil {
			return err
		}
	}
	for _, o := range j.ops {
		if err := o.build(ctx, rctx, r, rs, maxP); err != nil {
			return err
		}
	}
	for _, s := range j.sinks() {
		if err := s.build(rctx, r, rs, epoch); err != nil {
			return err
		}
	}
	return nil
}

// parallelism resolves every stage's tasks for the run: what the job
// set, or by default the partition count, at most the CPUs (and, for a
// keyed stage, the key groups).
func (j *Job) parallelism(srcs []srcBuild, maxP int) error {
	partitions := 0
	for i, s := range j.sources {
		s.setTasks(defaultParallelism(s.parallelismSet(), len(srcs[i].parts)))
		partitions += len(srcs[i].parts)
		if srcs[i].partitionLayout {
			partitions = maxP // every partition of the topic, assigned here or not
		}
	}
	for _, o := range j.ops {
		p := defaultParallelism(o.parallelismSet(), min(partitions, maxP))
		if err := keygroup.ValidateParallelism(p, maxP); err != nil {
			return fmt.Errorf("keyed: operator %q: %w", o.stageName(), err)
		}
		o.setTasks(p)
	}
	return nil
}

// positions lists every source's partitions (those assigned to this
// process, on several) and where each starts: the restored offset, or
// the source's start for a partition the checkpoint does not know. It
// returns the offsets the run starts from, and (several processes) those
// of partitions no record names.
func (j *Job) positions(ctx context.Context, r *run, rs *restoreState) (srcs []srcBuild, offsets, fresh []checkpoint.PartitionOffset, err error) {
	srcs = make([]srcBuild, len(j.sources))
	for i, s := range j.sources {
		parts, err := s.partitions(ctx)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("keyed: source %q: %w", s.sourceName(), err)
		}
		_, pm, bc := s.feeds()
		all := len(parts)
		if r.assigned != nil && bc {
			// One of several processes, a broadcast input: every process
			// reads every partition, from the source's start at each run
			// (DESIGN.md, "Broadcast state on several processes"); no
			// record keeps its positions.
			start, err := s.start(ctx, parts, false)
			if err != nil {
				return nil, nil, nil, fmt.Errorf("keyed: source %q: start offsets: %w", s.sourceName(), err)
			}
			pos := map[int32]int64{}
			for _, p := range start {
				pos[p.Partition] = p.Offset
			}
			srcs[i] = srcBuild{parts: parts, pos: pos, all: all}
			if r.whole == nil {
				r.whole = map[string]bool{}
			}
			r.whole[s.topic()] = true
			continue
		}
		if r.assigned != nil {
			// One of several processes: the partition count sets the key
			// groups; this run reads only the partitions assigned to it.
			if err := checkPartitionMode(s.sourceName(), parts); err != nil {
				return nil, nil, nil, err
			}
			parts = assignedOf(parts, r.assigned[s.topic()])
		} else if pm {
			if err := checkPartitionMode(s.sourceName(), parts); err != nil {
				return nil, nil, nil, err
			}
		}
		pos := map[int32]int64{}
		known := rs.positions[s.topic()]
		var missing []int32
		for _, p := range parts {
			if off, ok := known[p]; ok {
				pos[p] = off
			} else {
				missing = append(missing, p)
			}
		}
		if len(missing) > 0 {
			// A fresh start reads from the source's start, and so does a
			// failover (its checkpoint's offsets belong elsewhere); a
			// partition the restored checkpoint does not know appeared
			// later and is read from its beginning.
			start, err := s.start(ctx, missing, !rs.fresh && !rs.failover && r.assigned == nil)
			if err != nil {
				return nil, nil, nil, fmt.Errorf("keyed: source %q: start offsets: %w", s.sourceName(), err)
			}
			for _, p := range start {
				pos[p.Partition] = p.Offset
				fresh = append(fresh, checkpoint.PartitionOffset{Topic: s.topic(), Partition: p.Partition, Offset: p.Offset})
			}
		}
		for _, p := range parts {
			offsets = append(offsets, checkpoint.PartitionOffset{Topic: s.topic(), Partition: p, Offset: pos[p]})
		}
		srcs[i] = srcBuild{parts: parts, pos: pos, partitionLayout: pm, all: all}
	}
	return srcs, offsets, fresh, nil
}

// keyGroups resolves the job's key groups: in partition mode the
// partition count (which a restore must find unchanged), otherwise the
// max parallelism the job set or the default (a restore keeps the
// checkpoint's).
func (j *Job) keyGroups(rs *restoreState, srcs []srcBuild) (int, error) {
	n, first := 0, sourceNode(nil)
	for i, s := range j.sources {
		if !srcs[i].partitionLayout {
			continue
		}
		if n != 0 && srcs[i].all != n {
			return 0, Permanent(fmt.Errorf("keyed: sources in partition mode are not co-partitioned: topic %q (source %q) has %d partitions, topic %q (source %q) %d: the job's key groups are one partition count; key them with KeyBy (a shuffle), or repartition one",
				first.topic(), first.sourceName(), n, s.topic(), s.sourceName(), srcs[i].all))
		}
		if n == 0 {
			first = s
		}
		n = srcs[i].all
		if !rs.fresh && rs.maxP != n {
			return 0, fmt.Errorf("keyed: source %q has %d partitions, checkpoint %s was taken with %d: partition mode cannot follow a change of partition count",
				s.sourceName(), n, rs.meta.Ref(), rs.maxP)
		}
	}
	if n != 0 {
		rs.maxP = n
	} else if rs.fresh {
		rs.maxP = j.cfg.MaxParallelism
		if rs.maxP == 0 {
			rs.maxP = DefaultMaxParallelism
		}
	}
	return rs.maxP, nil
}

// checkStages records each keyed stage's keying mode for the run's
// checkpoints and checks them against the restored one: a stage keeps its
// mode (what a key group means), a new stage starts empty, and a stage the
// job no longer has is refused unless AllowNonRestoredState drops its state.
func (j *Job) checkStages(r *run, rs *restoreState, maxP int) error {
	r.opRefs = r.opRefs[:0]
	stages := map[string]bool{}
	for _, o := range j.ops {
		mode := "keyed.keyby"
		if o.byPartition() {
			mode = "keyed.partition"
		}
		stages[o.stageName()] = true
		fp := fmt.Sprintf("maxParallelism=%d", maxP)
		if k := o.keyName(); k != "" {
			fp = "key=" + k + ";" + fp
		}
		r.opRefs = append(r.opRefs, checkpoint.OperatorRef{Name: o.stageName(), Type: mode, SchemaFingerprint: fp})
		if rs.fresh {
			continue
		}
		found := false
		for _, ref := range rs.meta.Operators {
			if ref.Name != o.stageName() {
				continue
			}
			found = true
			if ref.Type != mode {
				return Permanent(fmt.Errorf("keyed: operator %q: checkpoint %s was taken in %s mode, the job now runs in %s mode: key groups would not match (restore is refused)", o.stageName(), rs.meta.Ref(), ref.Type, mode))
			}
			// A checkpoint older than key names records none: nothing to compare.
			if was, ok := recordedKey(ref); ok && was != o.keyName() {
				return Permanent(fmt.Errorf("keyed: operator %q: checkpoint %s keyed the stage by %q, the job now keys it by %q: its state is stored under keys of another meaning (restore is refused); key by the old name, or give the stage a new name to start it empty",
					o.stageName(), rs.meta.Ref(), was, o.keyName()))
			}
		}
		if !found {
			r.log.Info("keyed: a stage the restored checkpoint does not know starts empty", "stage", o.stageName(), "checkpoint", rs.meta.Ref())
		}
	}
	if rs.fresh {
		return nil
	}
	for _, ref := range rs.meta.Operators {
		if isStageRef(ref) && !stages[ref.Name] && !r.cfg.AllowNonRestoredState {
			return Permanent(fmt.Errorf("keyed: checkpoint %s holds the state of stage %q, which the job no longer has: give the stage its name back, or drop its state with keyed.AllowNonRestoredState (Flink's allowNonRestoredState)",
				rs.meta.Ref(), ref.Name))
		}
	}
	return nil
}

// recordedKey is the key name a stage's record holds, if any.
func recordedKey(ref checkpoint.OperatorRef) (string, bool) {
	rest, ok := strings.CutPrefix(ref.SchemaFingerprint, "key=")
	if !ok {
		return "", false
	}
	name, _, _ := strings.Cut(rest, ";")
	return name, true
}

// isStageRef reports whether ref names a keyed stage (its keying mode),
// not one of its states.
func isStageRef(ref checkpoint.OperatorRef) bool {
	return ref.Type == "keyed.keyby" || ref.Type == "keyed.partition"
}

// build starts the source's tasks, and its partition discovery.
func (s *sourceOf[T]) build(ctx, rctx context.Context, r *run, rs *restoreState, b srcBuild) error {
	assign := make([][]connector.Position, s.p)
	for k, p := range b.parts {
		t := k % s.p
		if b.partitionLayout {
			t = keygroup.OperatorIndex(int(p), b.maxP, s.p)
		}
		assign[t] = append(assign[t], connector.Position{Partition: p, Offset: b.pos[p]})
	}
	var dead connector.DeadLetterSink
	if d, ok := r.j.sink.sinkValue().(connector.DeadLetterSink); ok && d.TakesDeadLetters() {
		dead = d
	}
	tasks := make([]*sourceTask[T], s.p)
	for t := 0; t < s.p; t++ {
		task := r.addTask(fmt.Sprintf("%s[%d]", s.name, t))
		var outs outputs
		em := fanOut(r, s.outs, &outs)
		reader, err := s.src.Reader(ctx)
		if err != nil {
			return fmt.Errorf("keyed: source %q: %w", s.name, err)
		}
		if err := restoreOpState(rs, reader, s.name); err != nil {
			reader.Close()
			return fmt.Errorf("keyed: source %q task %d: %w", s.name, t, err)
		}
		if err := reader.Assign(ctx, assign[t]); err != nil {
			reader.Close()
			return fmt.Errorf("keyed: source %q task %d: %w", s.name, t, err)
		}
		trig := make(chan trigger, 1)
		r.triggers = append(r.triggers, trig)
		if s.auxiliary {
			r.auxiliary[task] = true
		}
		st := &sourceTask[T]{r: r, task: task, topic: s.src.Topic(), reader: reader, emit: em, out: outs, trig: trig, positions: assign[t], extract: s.extract,
			watermarks: s.watermarks, lateness: s.lateness.Milliseconds(), newest: map[int32]int64{},
			idleness: s.idleness, heard: map[int32]time.Time{}, asked: map[int32]time.Time{}, behind: map[int32]bool{},
			epoch: b.epoch, name: s.name, instance: t, dead: dead, restored: !rs.fresh && !rs.failover, auxiliary: s.auxiliary}
		if s.hop {
			st.marks = map[int32]map[string]int64{}
		}
		if s.watermarks {
			// Each partition's watermark starts where it stood at the
			// restored checkpoint, not at "no record yet": a partition
			// that gets no more records would otherwise hold the
			// watermark back where it did not before the restore (a
			// partition added since starts with none).
			for _, p := range assign[t] {
				if ts, ok := rs.times[s.src.Topic()][p.Partition]; ok {
					st.newest[p.Partition] = ts
				}
			}
		}
		st.st = r.j.stats.stage(s.name, "source")
		st.ts = r.stats.task(task, r.names[task], s.name, st.st)
		outs.countBlocked(&st.st.blocked)
		st.adds = make(chan []connector.Position, 1)
		tasks[t] = st
		r.goTask(rctx, task, st.run)
	}
	if r.cfg.PartitionDisc > 0 && r.assigned == nil { // scaled: the group assigns new partitions
		d := &discoverer[T]{r: r, src: s, tasks: tasks, byPartition: b.partitionLayout, known: b.parts}
		r.wg.Add(1)
		go d.run(rctx, r.cfg.PartitionDisc)
	}
	return nil
}

// build starts the stage's tasks, each with its backend restored.
func (o *opOf[T, O]) build(ctx, rctx context.Context, r *run, rs *restoreState, maxP int) error {
	for d := 0; d < o.p; d++ {
		task := r.addTask(fmt.Sprintf("%s[%d]", o.name, d))
		rng := keygroup.RangeFor(d, maxP, o.p)
		var bopts []backendOpt
		if !o.in.byPartition {
			bopts = append(bopts, keyGroupFunc(func(key []byte) int { return keygroup.Of(key, maxP) }))
		}
		b, err := newBackend(o.name, maxP, rng, bopts...)
		if err != nil {
			return err
		}
		if testBackendBuilt != nil {
			testBackendBuilt(r.j, o.name, b)
		}
		op := o.newOp()
		if err := op.Open(b); err != nil {
			return fmt.Errorf("keyed: operator %q task %d: open: %w", o.name, d, err)
		}
		var tm *timers
		if _, ok := op.(TimerOperator[T, O]); ok {
			if tm, err = newTimers(b); err != nil {
				return fmt.Errorf("keyed: operator %q task %d: %w", o.name, d, err)
			}
		}
		if r.assigned != nil {
			if err := rs.restoreScaled(b, o.readTopics(r)); err != nil {
				return fmt.Errorf("keyed: operator %q task %d: %w", o.name, d, err)
			}
		} else if !rs.fresh {
			if err := b.restore(rs.meta, rs.files); err != nil {
				return fmt.Errorf("keyed: operator %q task %d: restore %s: %w", o.name, d, rs.meta.Ref(), err)
			}
		}
		// A ProcessBroadcast stage's broadcast state is its operator state.
		// On several processes it is not restored: the broadcast input is
		// read again from its start (positions).
		if r.assigned == nil {
			if err := restoreOpState(rs, op, o.name); err != nil {
				return fmt.Errorf("keyed: operator %q task %d: %w", o.name, d, err)
			}
		}
		al, err := align.New(r.cfg.Mode, o.in.upstreams())
		if err != nil {
			return err
		}
		cancels := make(chan uint64, 16)
		r.cancels = append(r.cancels, cancels)
		var outs outputs
		var em emit[O]
		var direct *channel.Outbox[O]
		if len(o.outs) == 1 {
			if x, ok := o.outs[0].(*sinkExchange[O]); ok {
				direct = x.outbox(r, &outs)
			}
		}
		if direct == nil {
			em = fanOut(r, o.outs, &outs)
		}
		sides := o.connectSides(r, &outs)
		if tm != nil {
			tm.rebuild()
		}
		ot := &opTask[T, O]{r: r, task: task, name: o.name, instance: d, in: o.in.in[d], al: al, cancels: cancels, op: op, b: b, emit: em, direct: direct, sides: sides, out: outs, restoredWm: rs.watermark(), final: rs.watermark(), timers: tm,
			st: r.j.stats.stage(o.name, "operator")}
		ot.ts = r.stats.task(task, r.names[task], o.name, ot.st)
		outs.countBlocked(&ot.st.blocked)
		r.goTask(rctx, task, ot.run)
	}
	return nil
}

// build starts the sink task.
func (s *sinkOf[O]) build(rctx context.Context, r *run, rs *restoreState, epoch uint64) error {
	task := r.addTask(fmt.Sprintf("%s[0]", s.name))
	al, err := align.New(r.cfg.Mode, s.in.upstreams())
	if err != nil {
		return err
	}
	cancels := make(chan uint64, 16)
	r.cancels = append(r.cancels, cancels)
	if err := restoreOpState(rs, s.sink, s.name); err != nil {
		return fmt.Errorf("keyed: sink %q: %w", s.name, err)
	}
	kt := &sinkTask[O]{r: r, task: task, in: s.in.in, al: al, cancels: cancels, sink: s.sink, epoch: epoch, name: s.name, wm: rs.watermark()}
	kt.timed, _ = s.sink.(connector.Timed[O])
	kt.batch, _ = s.sink.(connector.BatchWriter[O])
	kt.elems, _ = s.sink.(elemSink[O])
	kt.st = r.j.stats.stage(s.name, "sink")
	kt.ts = r.stats.task(task, r.names[task], s.name, kt.st)
	r.goTask(rctx, task, kt.run)
	return nil
}

// tellOwners tells the sinks that are connector.Owners, on a run of one of
// several processes, the partitions it owns and all of them.
func (j *Job) tellOwners(r *run, srcs []srcBuild) {
	if r.assigned == nil {
		return
	}
	owned, all := map[string][]int32{}, map[string][]int32{}
	for i, s := range j.sources {
		if r.whole[s.topic()] {
			continue
		}
		owned[s.topic()] = append(owned[s.topic()], srcs[i].parts...)
		for p := range int32(srcs[i].all) {
			all[s.topic()] = append(all[s.topic()], p)
		}
	}
	for _, s := range j.sinks() {
		if o, ok := s.sinkValue().(connector.Owner); ok {
			o.Own(owned, all)
		}
	}
}
