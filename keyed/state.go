package keyed

import (
	"errors"
	"fmt"
	"iter"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/kordproject/kord/checkpoint"
	"github.com/kordproject/kord/internal/layout"
	"github.com/kordproject/kord/internal/statefile"
	"github.com/kordproject/kord/keyed/internal/cow"
	"github.com/kordproject/kord/keyed/internal/keygroup"
	"github.com/kordproject/kord/serde"
)

// stateKind is the kind of a keyed state.
type stateKind int

// Kinds of keyed state.
const (
	kindValue stateKind = iota + 1 // ValueState
	kindList                       // ListState
	kindMap                        // MapState
)

func (k stateKind) String() string {
	switch k {
	case kindValue:
		return "value"
	case kindList:
		return "list"
	case kindMap:
		return "map"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// refType is the checkpoint.OperatorRef.Type of a state of kind k.
func (k stateKind) refType() string { return "keyed." + k.String() }

// stateInfo identifies a registered state: what the engine records in
// checkpoint metadata (Ref) and what Restore checks.
type stateInfo struct {
	Operator    string
	Name        string
	Kind        stateKind
	Fingerprint string // the codec's; for a map, "key=<key codec's>;value=<value codec's>"
	// The codecs' writer schemas, when they are serde.Resolvers (see
	// evolve.go): a map's user keys' and values', a list's elements', a
	// value state's values'.
	KeySchema, ValueSchema string
}

// FileOperator is "<operator>.<state>": the operator slot of the state's
// file name (internal/layout) and the Name of its checkpoint.OperatorRef.
// Operator and state names have no '.', so it splits back unambiguously.
func (i stateInfo) FileOperator() string { return i.Operator + "." + i.Name }

// Ref is the state's entry in checkpoint.Metadata.Operators: Name
// FileOperator(), Type "keyed.value", "keyed.list" or "keyed.map", the
// fingerprint and the writer schemas.
func (i stateInfo) Ref() checkpoint.OperatorRef {
	return checkpoint.OperatorRef{Name: i.FileOperator(), Type: i.Kind.refType(), SchemaFingerprint: i.Fingerprint, KeySchema: i.KeySchema, ValueSchema: i.ValueSchema}
}

// validateName checks an operator or state name: 1 or more characters of
// [a-zA-Z0-9_-] (layout.ValidateOperator's set without '.', which
// separates the two in file names).
func validateName(what, s string) error {
	if s == "" {
		return fmt.Errorf("keyed: %s name is empty; want characters of [a-zA-Z0-9_-]", what)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || c == '_' || c == '-') {
			return fmt.Errorf("keyed: %s name %q: want characters of [a-zA-Z0-9_-]", what, s)
		}
	}
	return nil
}

// MismatchError reports a checkpoint whose keyed state does not match the
// states registered on the Backend restoring it: a state the code does not
// register, one of another kind or schema fingerprint, or one whose
// recorded schema this code's cannot read (see serde.Resolver).
type MismatchError struct {
	Operator string
	State    string
	Field    string // "state" (not registered here), "record" (a file without a metadata record), "type", "fingerprint" or "schema"
	Want     string // this code's type or fingerprint
	Found    string // the checkpoint's type or fingerprint; for "state" both; for "record" the file name
	// For "schema": Part is "key" or "value" for a map's user keys or
	// values ("" for the state's values), and Err the codec's reason,
	// a *serde.ResolveError for the Avro serdes.
	Part string
	Err  error
}

func (e *MismatchError) Unwrap() error { return e.Err }

func (e *MismatchError) Error() string {
	switch e.Field {
	case "state":
		return fmt.Sprintf("keyed: operator %q: the checkpoint has state %q (%s) that is not registered; register every state before Restore",
			e.Operator, e.State, e.Found)
	case "record":
		return fmt.Sprintf("keyed: operator %q state %q: the checkpoint has state file %s but no record of the state's type and fingerprint in its metadata",
			e.Operator, e.State, e.Found)
	case "schema":
		what := "schema"
		if e.Part != "" {
			what = "schema of the map's " + e.Part + "s"
		}
		reason := fmt.Sprint(e.Err)
		if re := (*serde.ResolveError)(nil); errors.As(e.Err, &re) {
			reason = re.Reason
			if re.Path != "" {
				reason = fmt.Sprintf("field %q: %s", re.Path, re.Reason)
			}
		}
		return fmt.Sprintf("keyed: operator %q state %q: the checkpoint's %s cannot be read with this code's: %s", e.Operator, e.State, what, reason)
	}
	return fmt.Sprintf("keyed: operator %q state %q: the checkpoint's %s is %q, this code's is %q",
		e.Operator, e.State, e.Field, e.Found, e.Want)
}

// backendOpt configures a Backend.
type backendOpt func(*Backend)

// keyGroupFunc sets the function that gives a key's key group, used by
// Check and by Restore to verify that every restored key belongs to the key
// group of the file it is in. In the keyBy mode pass
// func(k []byte) int { return keyGroupOf(k, maxParallelism) }. There is none
// by default, which suits the partitioned mode, where the key group is the
// partition a record was read from and cannot in general be recomputed from
// the key bytes; Restore then trusts the file names. A partitioned topic
// known to be written by kord's producer may pass its placement,
// int(partitioner.KeyPartition(key, partitions)).
func keyGroupFunc(f func(key []byte) int) backendOpt {
	return func(b *Backend) { b.keyGroupOf = f }
}

// Backend holds every keyed state of one operator instance for its
// key-group range: an Operator declares its states on it in Open. It is
// used by one goroutine (the operator's); the runtime encodes its
// snapshots on others.
//
// Values are held as Go values and shared with snapshots: a value is
// copied on write only as a whole (ValueState.Set, ListState.Add or Update,
// MapState.Put), so a value that holds pointers, slices or maps must not be
// mutated in place once stored or returned by Get. Build a new value and
// store it.
type Backend struct {
	operator   string
	maxP       int
	r          keygroup.Range
	keyGroupOf func(key []byte) int

	states []state
	byName map[string]state

	curKey []byte
	cur    int    // current key group - r.Start; -1 before the first setCurrentKey
	gen    uint64 // counts setCurrentKey calls: a state's cached slot is valid while it is unchanged

	epoch    uint64       // number of snapshots taken
	pending  atomic.Int64 // snapshots not yet released
	restored bool

	encMu   sync.Mutex
	encFree []*encoder // kept between snapshots; see snapshot.Encode

	clock func() int64 // TTL states' processing time (Unix ms); nil: the wall clock

	bcast *broadcastStates // a ProcessBroadcast stage's broadcast state; nil otherwise
}

// newBackend returns an empty backend for instance r of operator, out of
// maxParallelism key groups. operator is 1 or more characters of
// [a-zA-Z0-9_-].
func newBackend(operator string, maxParallelism int, r keygroup.Range, opts ...backendOpt) (*Backend, error) {
	if err := validateName("operator", operator); err != nil {
		return nil, err
	}
	if err := keygroup.ValidateRange(r, maxParallelism); err != nil {
		return nil, fmt.Errorf("keyed: operator %q: %w", operator, err)
	}
	b := &Backend{operator: operator, maxP: maxParallelism, r: r, byName: map[string]state{}, cur: -1}
	for _, o := range opts {
		o(b)
	}
	return b, nil
}

// Operator returns the operator name.
func (b *Backend) Operator() string { return b.operator }

// MaxParallelism returns the number of key groups.
func (b *Backend) MaxParallelism() int { return b.maxP }

// keyRange returns the key groups this backend owns.
func (b *Backend) keyRange() keygroup.Range { return b.r }

// stateInfos describes the registered states in registration order.
func (b *Backend) stateInfos() []stateInfo {
	out := make([]stateInfo, len(b.states))
	for i, s := range b.states {
		out[i] = s.info()
	}
	return out
}

// operatorRefs returns the registered states' entries for
// checkpoint.Metadata.Operators. Every instance of an operator returns the
// same refs; the engine records them once.
func (b *Backend) operatorRefs() []checkpoint.OperatorRef {
	out := make([]checkpoint.OperatorRef, len(b.states))
	for i, s := range b.states {
		out[i] = s.info().Ref()
	}
	return out
}

// check reports whether keyGroup is in the backend's range and, when a key
// group function is set (KeyGroupFunc), whether it is key's key group. The
// engine calls it where it validates its routing (setCurrentKey does not).
func (b *Backend) check(key []byte, keyGroup int) error {
	if !b.r.Contains(keyGroup) {
		return fmt.Errorf("keyed: operator %q: key group %d is outside this instance's range %s", b.operator, keyGroup, b.r)
	}
	if b.keyGroupOf != nil {
		if kg := b.keyGroupOf(key); kg != keyGroup {
			return fmt.Errorf("keyed: operator %q: key %x is in key group %d, not %d", b.operator, key, kg, keyGroup)
		}
	}
	return nil
}

// setCurrentKey makes key, in keyGroup, the key that state reads and
// writes until the next call. key is retained, not copied, until then: the
// caller must not modify it meanwhile (a new key is copied when first
// stored). It is the hot path and checks only that keyGroup is in range: it
// panics otherwise, since the engine's routing is then wrong (see check).
func (b *Backend) setCurrentKey(key []byte, keyGroup int) {
	i := keyGroup - b.r.Start
	if uint(i) >= uint(b.r.End-b.r.Start+1) {
		panic(fmt.Sprintf("keyed: operator %q: SetCurrentKey with key group %d outside this instance's range %s", b.operator, keyGroup, b.r))
	}
	b.curKey, b.cur = key, i
	b.gen++
}

// currentKey returns the current key and its key group (-1 before the first
// setCurrentKey).
func (b *Backend) currentKey() ([]byte, int) {
	if b.cur < 0 {
		return nil, -1
	}
	return b.curKey, b.cur + b.r.Start
}

// state is what the backend needs of every registered state.
type state interface {
	info() stateInfo
	freeze() frozenState
	empty() bool
	reset()
	// restorer returns the function that restores the state's key groups
	// from a checkpoint that recorded the state as ref, or a
	// *MismatchError when its values cannot be read (see decoderFor). The
	// function replaces group g's table with entries, the contents of file
	// for key group g + r.Start; it may run concurrently for distinct g.
	restorer(ref checkpoint.OperatorRef) (func(g int, file string, entries []statefile.Entry) error, error)
}

func register[T any](b *Backend, name string, kind stateKind, fp string, enc encodeFunc[T], dec func([]byte) (T, error)) (*store[T], error) {
	if name == opStateSuffix {
		return nil, fmt.Errorf("keyed: operator %q state %q: the name is kord's (the operator's operator state)", b.operator, name)
	}
	if strings.HasPrefix(name, "__") {
		return nil, fmt.Errorf("keyed: operator %q state %q: names starting with __ are kord's (its timers)", b.operator, name)
	}
	return registerState(b, name, kind, fp, enc, dec)
}

// registerState is register without the user's limits: kord's own states
// (timers) too.
func registerState[T any](b *Backend, name string, kind stateKind, fp string, enc encodeFunc[T], dec func([]byte) (T, error)) (*store[T], error) {
	if err := validateName("state", name); err != nil {
		return nil, fmt.Errorf("keyed: operator %q: %w", b.operator, err)
	}
	if err := layout.ValidateOperator(b.operator + "." + name); err != nil {
		return nil, fmt.Errorf("keyed: operator %q state %q: %w", b.operator, name, err)
	}
	if b.restored {
		return nil, fmt.Errorf("keyed: operator %q state %q: registered after Restore; register every state before", b.operator, name)
	}
	if _, dup := b.byName[name]; dup {
		return nil, fmt.Errorf("keyed: operator %q: state %q is already registered", b.operator, name)
	}
	s := &store[T]{
		b:      b,
		inf:    stateInfo{Operator: b.operator, Name: name, Kind: kind, Fingerprint: fp},
		groups: make([]*cow.Table[T], b.r.Len()),
		enc:    enc,
		dec:    dec,
	}
	b.states = append(b.states, s)
	b.byName[name] = s
	return s, nil
}

// encodeFunc appends v's snapshot encoding to dst; scratch is a buffer it
// may reuse.
type encodeFunc[T any] func(dst, scratch []byte, v T) (out, scratchOut []byte, err error)

// store is the part of every state kind that does not depend on the kind:
// a table per key group of the range, and copy-on-write.
type store[T any] struct {
	b      *Backend
	inf    stateInfo
	groups []*cow.Table[T] // index: key group - r.Start; nil: no entries yet
	enc    encodeFunc[T]
	dec    func([]byte) (T, error)
	// resolve, if not nil, reads values written under other schemas (see
	// evolve).
	resolve resolveFunc[T]
	// encAt, for a TTL state, makes the encoder of a snapshot taken at
	// now (Unix ms), which leaves expired entries out; it replaces enc.
	encAt func(now int64) encodeFunc[T]

	// The current key's slot, looked up at Backend.gen == gen: a
	// read-modify-write of the current key (Get then Set) looks the key up
	// once. Slots survive copy-on-write clones; only this store's own
	// insert and remove change them, and those update the cache.
	gen  uint64
	slot uint32
	hit  bool
}

func (s *store[T]) info() stateInfo { return s.inf }

// each calls fn for every key of the state with its key group and value.
func (s *store[T]) each(fn func(kg int, key string, v T)) {
	for g, t := range s.groups {
		if t == nil {
			continue
		}
		for key, i := range t.Idx {
			fn(g+s.b.r.Start, key, t.Vals[i])
		}
	}
}

func (s *store[T]) noKey() {
	panic(fmt.Sprintf("keyed: operator %q state %q used with no current key (state is only accessible while the runtime processes a keyed record)", s.inf.Operator, s.inf.Name))
}

// lookup returns the current key's table and slot, if it has one.
func (s *store[T]) lookup() (*cow.Table[T], uint32, bool) {
	b := s.b
	if b.cur < 0 {
		s.noKey()
	}
	t := s.groups[b.cur]
	if s.gen == b.gen {
		return t, s.slot, s.hit
	}
	var i uint32
	var ok bool
	if t != nil {
		i, ok = t.Idx[string(b.curKey)]
	}
	s.gen, s.slot, s.hit = b.gen, i, ok
	return t, i, ok
}

// forWrite returns the current key group's table, ready to be written
// (see writable), and the current key's slot in it, if it has one.
func (s *store[T]) forWrite() (*cow.Table[T], uint32, bool) {
	_, i, ok := s.lookup()
	return s.writable(), i, ok
}

// add stores v as the current key's value in t (from forWrite, which
// found no slot) and returns its slot.
func (s *store[T]) add(t *cow.Table[T], v T) uint32 {
	i := t.Insert(s.b.curKey, v)
	s.gen, s.slot, s.hit = s.b.gen, i, true
	return i
}

// writable returns the current key group's table, made or cloned so that
// it may be written.
func (s *store[T]) writable() *cow.Table[T] {
	b := s.b
	if b.cur < 0 {
		s.noKey()
	}
	t := s.groups[b.cur]
	switch {
	case t == nil:
		t = &cow.Table[T]{Idx: make(map[string]uint32), Epoch: b.epoch, OwnAll: true}
		s.groups[b.cur] = t
	case t.Epoch != b.epoch:
		if b.pending.Load() > 0 {
			// A snapshot holds t: leave it as it is.
			t = t.Clone(b.epoch)
			s.groups[b.cur] = t
		} else {
			// Every snapshot that held t has been released (the atomic
			// load orders their reads before our writes).
			t.Epoch, t.OwnAll, t.Owned, t.Shared = b.epoch, true, nil, false
		}
	}
	return t
}

// remove deletes the current key's entry, if any.
func (s *store[T]) remove() {
	if _, _, ok := s.lookup(); !ok {
		return
	}
	t, i, _ := s.forWrite()
	t.Own()
	delete(t.Idx, string(s.b.curKey))
	var zero T
	t.Vals[i], t.Keys[i] = zero, ""
	t.Free = append(t.Free, i)
	s.hit = false
}

func (s *store[T]) empty() bool {
	for _, t := range s.groups {
		if t != nil && len(t.Idx) > 0 {
			return false
		}
	}
	return true
}

func (s *store[T]) reset() {
	clear(s.groups)
	s.gen = 0
}

func (s *store[T]) freeze() frozenState {
	enc := s.enc
	if s.encAt != nil {
		enc = s.encAt(s.b.nowMs())
	}
	return &frozen[T]{inf: s.inf, start: s.b.r.Start, groups: slices.Clone(s.groups), enc: enc}
}

func (s *store[T]) restorer(ref checkpoint.OperatorRef) (func(g int, file string, entries []statefile.Entry) error, error) {
	dec, err := s.decoderFor(ref)
	if err != nil {
		return nil, err
	}
	return func(g int, file string, entries []statefile.Entry) error {
		return s.restoreGroup(g, file, entries, dec)
	}, nil
}

func (s *store[T]) restoreGroup(g int, file string, entries []statefile.Entry, dec func([]byte) (T, error)) error {
	kg := g + s.b.r.Start
	t := &cow.Table[T]{Idx: make(map[string]uint32, len(entries)), Vals: make([]T, 0, len(entries)), Keys: make([]string, 0, len(entries)), Epoch: s.b.epoch, OwnAll: true}
	// The keys share one string: one allocation instead of one a key, and
	// keys that are adjacent in memory for the next snapshot's encoding. A
	// deleted key's bytes are freed with the last key of the file.
	n := 0
	for _, e := range entries {
		n += len(e.Key)
	}
	buf := make([]byte, 0, n)
	for _, e := range entries {
		buf = append(buf, e.Key...)
	}
	keys, off := string(buf), 0
	for _, e := range entries {
		key := keys[off : off+len(e.Key)]
		off += len(e.Key)
		if f := s.b.keyGroupOf; f != nil {
			if got := f(e.Key); got != kg {
				return &checkpoint.CorruptError{Path: file, Reason: fmt.Sprintf("state %q: key %x belongs to key group %d, the file is key group %d", s.inf.FileOperator(), e.Key, got, kg)}
			}
		}
		if _, dup := t.Idx[key]; dup {
			return &checkpoint.CorruptError{Path: file, Reason: fmt.Sprintf("state %q: key %x appears twice", s.inf.FileOperator(), e.Key)}
		}
		v, err := dec(e.Value)
		if err != nil {
			return &checkpoint.CorruptError{Path: file, Reason: fmt.Sprintf("state %q (%s): value of key %x: %v", s.inf.FileOperator(), s.inf.Fingerprint, e.Key, err), Err: err}
		}
		t.Idx[key] = t.Slot(key, v)
	}
	s.groups[g] = t
	return nil
}

// ValueState is one value per key.
type ValueState[V any] struct {
	s   *store[V]
	ts  *store[stamped[V]] // instead of s with TTL
	ttl ttl
}

// Value registers a value state named name (1 or more characters of
// [a-zA-Z0-9_-], unique in the backend) whose values snapshot with c.
func Value[V any](b *Backend, name string, c serde.Serde[V], opts ...StateOpt) (*ValueState[V], error) {
	cfg, err := stateConfigOf(b, name, opts)
	if err != nil {
		return nil, err
	}
	if cfg.ttl > 0 {
		t := ttl{b: b, d: cfg.ttl.Milliseconds()}
		sc := serde.Serde[stamped[V]](stampedCodec[V]{c: c})
		ts, err := register(b, name, kindValue, sc.Fingerprint(), nil, sc.Decode)
		if err != nil {
			return nil, err
		}
		ts.evolve("", writerSchema(sc), valueResolve(sc, decodeOne))
		ts.encAt = ttlValueEnc(c, t)
		return &ValueState[V]{ts: ts, ttl: t}, nil
	}
	enc := func(dst, scratch []byte, v V) ([]byte, []byte, error) {
		out, err := c.Encode(dst, v)
		return out, scratch, err
	}
	s, err := register(b, name, kindValue, c.Fingerprint(), enc, c.Decode)
	if err != nil {
		return nil, err
	}
	s.evolve("", writerSchema(c), valueResolve(c, decodeOne))
	return &ValueState[V]{s: s}, nil
}

// Get returns the current key's value and whether it has one.
func (v *ValueState[V]) Get() (V, bool) {
	var zero V
	if v.ts != nil {
		e, ok := valueGet(v.ts)
		if !ok {
			return zero, false
		}
		if !v.ttl.live(e.At, v.ttl.b.nowMs()) {
			v.ts.remove()
			return zero, false
		}
		return e.V, true
	}
	return valueGet(v.s)
}

// Set sets the current key's value.
func (v *ValueState[V]) Set(x V) {
	if v.ts != nil {
		valueSet(v.ts, stamped[V]{V: x, At: v.ttl.b.nowMs()})
		return
	}
	valueSet(v.s, x)
}

// Clear removes the current key's value.
func (v *ValueState[V]) Clear() {
	if v.ts != nil {
		v.ts.remove()
		return
	}
	v.s.remove()
}

func valueGet[E any](s *store[E]) (E, bool) {
	if t, i, ok := s.lookup(); ok {
		return t.Vals[i], true
	}
	var zero E
	return zero, false
}

func valueSet[E any](s *store[E], x E) {
	t, i, ok := s.forWrite()
	if ok {
		t.Vals[i] = x
		return
	}
	s.add(t, x)
}

// ListState is a list of values per key. An empty list is no state: Get
// returns nil and nothing is snapshotted.
type ListState[V any] struct {
	s   *store[[]V]
	ts  *store[[]stamped[V]] // instead of s with TTL
	ttl ttl
}

// List registers a list state named name (1 or more characters of
// [a-zA-Z0-9_-], unique in the backend) whose elements snapshot with c.
// With TTL each element expires on its own.
func List[V any](b *Backend, name string, c serde.Serde[V], opts ...StateOpt) (*ListState[V], error) {
	cfg, err := stateConfigOf(b, name, opts)
	if err != nil {
		return nil, err
	}
	if cfg.ttl > 0 {
		t := ttl{b: b, d: cfg.ttl.Milliseconds()}
		sc := serde.Serde[stamped[V]](stampedCodec[V]{c: c})
		dec := func(b []byte) ([]stamped[V], error) { return decodeList(b, sc) }
		ts, err := register(b, name, kindList, sc.Fingerprint(), nil, dec)
		if err != nil {
			return nil, err
		}
		ts.evolve("", writerSchema(sc), valueResolve(sc, decodeList))
		ts.encAt = ttlListEnc(c, t)
		return &ListState[V]{ts: ts, ttl: t}, nil
	}
	enc := func(dst, scratch []byte, list []V) ([]byte, []byte, error) {
		return appendList(dst, scratch, c, list)
	}
	dec := func(b []byte) ([]V, error) { return decodeList(b, c) }
	s, err := register(b, name, kindList, c.Fingerprint(), enc, dec)
	if err != nil {
		return nil, err
	}
	s.evolve("", writerSchema(c), valueResolve(c, decodeList))
	return &ListState[V]{s: s}, nil
}

// Get returns the current key's list, or nil. The slice is a read-only
// view: do not modify its elements. Later writes to the list do not change
// it, and appending to it is safe (its capacity is its length). With TTL
// it is a new slice of the live elements.
func (l *ListState[V]) Get() []V {
	if l.ts != nil {
		t, i, ok := l.ts.lookup()
		if !ok {
			return nil
		}
		list := t.Vals[i]
		live := liveList(list, l.ttl, l.ttl.b.nowMs())
		if len(live) == 0 {
			l.ts.remove()
			return nil
		}
		if len(live) < len(list) {
			listSet(l.ts, live) // a new slice already
		}
		out := make([]V, len(live))
		for i, e := range live {
			out[i] = e.V
		}
		return out
	}
	if t, i, ok := l.s.lookup(); ok {
		return slices.Clip(t.Vals[i])
	}
	return nil
}

// Add appends x to the current key's list.
func (l *ListState[V]) Add(x V) {
	if l.ts != nil {
		listAdd(l.ts, stamped[V]{V: x, At: l.ttl.b.nowMs()})
		return
	}
	listAdd(l.s, x)
}

// Update replaces the current key's list with a copy of list; an empty
// list clears it.
func (l *ListState[V]) Update(list []V) {
	if len(list) == 0 {
		l.Clear()
		return
	}
	if l.ts != nil {
		now := l.ttl.b.nowMs()
		sl := make([]stamped[V], len(list))
		for i, x := range list {
			sl[i] = stamped[V]{V: x, At: now}
		}
		listSet(l.ts, sl)
		return
	}
	listSet(l.s, slices.Clone(list))
}

// Clear removes the current key's list.
func (l *ListState[V]) Clear() {
	if l.ts != nil {
		l.ts.remove()
		return
	}
	l.s.remove()
}

func listAdd[E any](s *store[[]E], x E) {
	t, i, ok := s.forWrite()
	if ok {
		// Appending is safe even when the slice is shared with a
		// snapshot's table: only the live table ever appends to a list,
		// writing past the length every other holder sees, and elements
		// below the length are never written.
		t.Vals[i] = append(t.Vals[i], x)
		return
	}
	s.add(t, []E{x})
}

// listSet makes list, which the caller gives up, the current key's list.
func listSet[E any](s *store[[]E], list []E) {
	t, i, ok := s.forWrite()
	if ok {
		t.Vals[i] = list
		return
	}
	s.add(t, list)
}

// MapState is a map from user keys to values per key. An empty map is no
// state.
type MapState[K comparable, V any] struct {
	s   *store[map[K]V]
	ts  *store[map[K]stamped[V]] // instead of s with TTL
	ttl ttl
}

// Map registers a map state named name (1 or more characters of
// [a-zA-Z0-9_-], unique in the backend) whose user keys snapshot with kc
// and values with vc. With TTL each entry expires on its own.
func Map[K comparable, V any](b *Backend, name string, kc serde.Serde[K], vc serde.Serde[V], opts ...StateOpt) (*MapState[K, V], error) {
	cfg, err := stateConfigOf(b, name, opts)
	if err != nil {
		return nil, err
	}
	if cfg.ttl > 0 {
		t := ttl{b: b, d: cfg.ttl.Milliseconds()}
		sc := serde.Serde[stamped[V]](stampedCodec[V]{c: vc})
		dec := func(b []byte) (map[K]stamped[V], error) { return decodeMap(b, kc, sc) }
		ts, err := register(b, name, kindMap, mapFingerprint(kc.Fingerprint(), sc.Fingerprint()), nil, dec)
		if err != nil {
			return nil, err
		}
		ts.evolve(writerSchema(kc), writerSchema(sc), mapResolve(kc, sc))
		ts.encAt = ttlMapEnc(kc, vc, t)
		return &MapState[K, V]{ts: ts, ttl: t}, nil
	}
	enc := func(dst, scratch []byte, m map[K]V) ([]byte, []byte, error) {
		return appendMap(dst, scratch, kc, vc, m)
	}
	dec := func(b []byte) (map[K]V, error) { return decodeMap(b, kc, vc) }
	s, err := register(b, name, kindMap, mapFingerprint(kc.Fingerprint(), vc.Fingerprint()), enc, dec)
	if err != nil {
		return nil, err
	}
	s.evolve(writerSchema(kc), writerSchema(vc), mapResolve(kc, vc))
	return &MapState[K, V]{s: s}, nil
}

// Get returns the value of user key k in the current key's map.
func (m *MapState[K, V]) Get(k K) (V, bool) {
	if m.ts != nil {
		e, ok := mapGet(m.ts, k)
		if ok && !m.ttl.live(e.At, m.ttl.b.nowMs()) {
			mapDelete(m.ts, k)
			ok = false
		}
		return e.V, ok
	}
	return mapGet(m.s, k)
}

// Contains reports whether the current key's map has user key k.
func (m *MapState[K, V]) Contains(k K) bool {
	_, ok := m.Get(k)
	return ok
}

// Put sets user key k to v in the current key's map.
func (m *MapState[K, V]) Put(k K, v V) {
	if m.ts != nil {
		mapPut(m.ts, k, stamped[V]{V: v, At: m.ttl.b.nowMs()})
		return
	}
	mapPut(m.s, k, v)
}

// Delete removes user key k from the current key's map; the key's state is
// gone when its map is empty.
func (m *MapState[K, V]) Delete(k K) {
	if m.ts != nil {
		mapDelete(m.ts, k)
		return
	}
	mapDelete(m.s, k)
}

// Len returns the number of user keys in the current key's map (the live
// ones, with TTL).
func (m *MapState[K, V]) Len() int {
	if m.ts != nil {
		n := 0
		m.Range(func(K, V) bool { n++; return true })
		return n
	}
	if t, i, ok := m.s.lookup(); ok {
		return len(t.Vals[i])
	}
	return 0
}

// Range calls f for each user key and value of the current key's map (the
// live ones, with TTL), in no particular order, until f returns false. f
// may Put and Delete: Range then sees the map as it was or as it is, as
// with a Go map.
func (m *MapState[K, V]) Range(f func(k K, v V) bool) {
	if m.ts != nil {
		if t, i, ok := m.ts.lookup(); ok {
			now := m.ttl.b.nowMs()
			for k, e := range t.Vals[i] {
				if m.ttl.live(e.At, now) && !f(k, e.V) {
					return
				}
			}
		}
		return
	}
	if t, i, ok := m.s.lookup(); ok {
		for k, v := range t.Vals[i] {
			if !f(k, v) {
				return
			}
		}
	}
}

// All returns an iterator over the current key's map (see Range).
func (m *MapState[K, V]) All() iter.Seq2[K, V] { return m.Range }

// Clear removes the current key's map.
func (m *MapState[K, V]) Clear() {
	if m.ts != nil {
		m.ts.remove()
		return
	}
	m.s.remove()
}

func mapGet[K comparable, E any](s *store[map[K]E], k K) (E, bool) {
	if t, i, ok := s.lookup(); ok {
		v, ok := t.Vals[i][k]
		return v, ok
	}
	var zero E
	return zero, false
}

func mapPut[K comparable, E any](s *store[map[K]E], k K, v E) {
	t, i, ok := s.forWrite()
	if ok {
		if !t.IsOwned(i) {
			t.Vals[i] = maps.Clone(t.Vals[i]) // shared with a snapshot's table
			t.SetOwned(i)
		}
		t.Vals[i][k] = v
		return
	}
	t.SetOwned(s.add(t, map[K]E{k: v}))
}

func mapDelete[K comparable, E any](s *store[map[K]E], k K) {
	t, i, ok := s.lookup()
	if !ok {
		return
	}
	if _, ok := t.Vals[i][k]; !ok {
		return
	}
	if len(t.Vals[i]) == 1 {
		s.remove()
		return
	}
	t = s.writable() // may be a clone: slots are the same
	if !t.IsOwned(i) {
		t.Vals[i] = maps.Clone(t.Vals[i])
		t.SetOwned(i)
	}
	delete(t.Vals[i], k)
}
