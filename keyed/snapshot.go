package keyed

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/kordproject/kord/checkpoint"
	"github.com/kordproject/kord/internal/layout"
	"github.com/kordproject/kord/internal/statefile"
	"github.com/kordproject/kord/keyed/internal/cow"
	"github.com/kordproject/kord/keyed/internal/keygroup"
)

// snapshot is the keyed state of a Backend at one instant, taken by
// Backend.snapshot at a barrier. It holds the backend's tables as they
// were; the backend copies a table before its next write to it. Encode it
// (on any goroutine, while the backend goes on), then Release it.
type snapshot struct {
	operator string
	maxP     int
	r        keygroup.Range
	infos    []stateInfo
	states   []frozenState // nil once released

	b        *Backend
	mu       sync.Mutex // held by Encode, so that Release waits for it
	released atomic.Bool
	encs     []*encoder // the memory of Encode's files, given back at Release
}

// encoder is the memory one state's file is encoded in: a
// statefile.KeyGroupEncoder and the workspaces its workers fill. The
// backend keeps the encoders of released snapshots, so that each checkpoint
// reuses the last one's buffers (about one state file's size per state)
// rather than allocating and growing them again.
type encoder struct {
	kg statefile.KeyGroupEncoder
	ws []workspace
}

func (b *Backend) takeEncoder() *encoder {
	b.encMu.Lock()
	defer b.encMu.Unlock()
	if n := len(b.encFree); n > 0 {
		e := b.encFree[n-1]
		b.encFree = b.encFree[:n-1]
		return e
	}
	return &encoder{}
}

func (b *Backend) giveEncoders(es []*encoder) {
	b.encMu.Lock()
	defer b.encMu.Unlock()
	b.encFree = append(b.encFree, es...)
}

// frozenState is one state's tables at the snapshot.
type frozenState interface {
	info() stateInfo
	numGroups() int
	groupLen(g int) int
	// entries returns group g's entries, built in w's buffers (valid until
	// the next call with w).
	entries(g int, w *workspace) ([]statefile.Entry, error)
}

type frozen[T any] struct {
	inf    stateInfo
	start  int
	groups []*cow.Table[T]
	enc    encodeFunc[T]
}

func (f *frozen[T]) info() stateInfo { return f.inf }
func (f *frozen[T]) numGroups() int  { return len(f.groups) }

func (f *frozen[T]) groupLen(g int) int {
	if t := f.groups[g]; t != nil {
		return len(t.Idx)
	}
	return 0
}

// workspace is one encoding worker's reusable buffers.
type workspace struct {
	buf, scratch []byte
	offs         []int
	entries      []statefile.Entry
}

func (f *frozen[T]) entries(g int, w *workspace) ([]statefile.Entry, error) {
	t := f.groups[g]
	n := len(t.Idx)
	// Keys and values go into one buffer; entries slice it once it has
	// stopped growing.
	buf, offs, scratch := w.buf[:0], w.offs[:0], w.scratch
	var err error
	// By slot, not by map iteration: keys and values are read in the order
	// they were added, which is mostly their order in memory, instead of
	// at random (a cache miss per key on large states).
	use := t.InUse()
	for i, k := range t.Keys {
		if use != nil && !use[i] {
			continue
		}
		start := len(buf)
		offs = append(offs, len(buf))
		buf = append(buf, k...)
		offs = append(offs, len(buf))
		if buf, scratch, err = f.enc(buf, scratch, t.Vals[i]); err != nil {
			if err == errExpired {
				// A TTL state's entry that expired: left out.
				buf, offs = buf[:start], offs[:len(offs)-2]
				continue
			}
			return nil, fmt.Errorf("keyed: operator %q state %q key group %d: key %x: %w", f.inf.Operator, f.inf.Name, g+f.start, k, err)
		}
		offs = append(offs, len(buf))
	}
	n = len(offs) / 3
	entries := slices.Grow(w.entries[:0], n)[:n]
	for j := range entries {
		a, b, c := offs[3*j], offs[3*j+1], offs[3*j+2]
		entries[j] = statefile.Entry{Key: buf[a:b:b], Value: buf[b:c:c]}
	}
	w.buf, w.offs, w.scratch, w.entries = buf, offs, scratch, entries
	return entries, nil
}

// takeSnapshot freezes every state's tables and returns them. It is
// O(states × key groups), allocates one slice of table pointers per state,
// and copies no keys or values: the first write to each key group after it
// copies that group's table (copy-on-write), until the snapshot is
// released.
func (b *Backend) takeSnapshot() *snapshot {
	b.epoch++
	b.pending.Add(1)
	s := &snapshot{operator: b.operator, maxP: b.maxP, r: b.r, b: b, infos: b.stateInfos(), states: make([]frozenState, len(b.states))}
	for i, st := range b.states {
		s.states[i] = st.freeze()
	}
	return s
}

// OperatorRefs returns the snapshotted states' entries for
// checkpoint.Metadata.Operators (see Backend.OperatorRefs), also after
// Release.
func (s *snapshot) OperatorRefs() []checkpoint.OperatorRef {
	out := make([]checkpoint.OperatorRef, len(s.infos))
	for i, inf := range s.infos {
		out[i] = inf.Ref()
	}
	return out
}

// MaxParallelism returns the number of key groups, for
// checkpoint.Metadata.MaxParallelism.
func (s *snapshot) MaxParallelism() int { return s.maxP }

// Len returns the number of (state, key) entries in the snapshot (0 once
// released).
func (s *snapshot) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, st := range s.states {
		for g := range st.numGroups() {
			n += st.groupLen(g)
		}
	}
	return n
}

// errReleased is returned by Encode on a released snapshot.
var errReleased = errors.New("keyed: snapshot already released")

// Encode encodes the snapshot as the state files of checkpoint (run, id):
// for each state with entries, one statefile.EncodeKeyGroups file holding
// every key group of the backend's range that has entries, named
// layout.StateFileName(run, id, "<operator>.<state>", first key group
// of the range), ready for checkpoint.WriteCheckpoint. An entry's Key is the
// record key and its Value the codec's encoding of the value (of the list
// or map for list and map states; see appendList and appendMap). Entries
// are in no particular order within a key group.
//
// It encodes key groups on up to parallel goroutines (GOMAXPROCS when
// parallel <= 0), ended before it returns, and may run while the backend
// goes on processing. The files' contents are valid until Release (their
// memory is reused by the backend's next snapshots).
func (s *snapshot) Encode(run string, id uint64, parallel int) (map[string][]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.released.Load() {
		return nil, errReleased
	}
	if err := layout.ValidateRun(run); err != nil {
		return nil, err
	}
	if parallel <= 0 {
		parallel = runtime.GOMAXPROCS(0)
	}
	files := make(map[string][]byte, len(s.states))
	for _, st := range s.states {
		var groups, kgs []int
		for g := range st.numGroups() {
			if st.groupLen(g) > 0 {
				groups = append(groups, g)
				kgs = append(kgs, g+s.r.Start)
			}
		}
		if len(groups) == 0 {
			continue
		}
		enc := s.b.takeEncoder()
		s.encs = append(s.encs, enc)
		if len(enc.ws) < parallel {
			enc.ws = append(enc.ws, make([]workspace, parallel-len(enc.ws))...)
		}
		data, err := enc.kg.Encode(kgs, parallel, func(w, i int) ([]statefile.Entry, error) {
			return st.entries(groups[i], &enc.ws[w])
		})
		if err != nil {
			return nil, fmt.Errorf("keyed: operator %q state %q: %w", s.operator, st.info().Name, err)
		}
		files[layout.StateFileName(run, id, st.info().FileOperator(), s.r.Start)] = data
	}
	return files, nil
}

// Release ends the snapshot: the backend writes its tables in place again
// once every snapshot is released. It waits for an Encode in progress and
// is idempotent; a released snapshot cannot be encoded.
func (s *snapshot) Release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.released.CompareAndSwap(false, true) {
		s.states = nil
		s.b.giveEncoders(s.encs)
		s.encs = nil
		s.b.pending.Add(-1)
	}
}

// forEach calls fn(w, i) for i in [0, n) on up to parallel goroutines, each
// with its own workspace, and waits for them.
func forEach(n, parallel int, fn func(w *workspace, i int)) {
	if parallel <= 0 {
		parallel = runtime.GOMAXPROCS(0)
	}
	parallel = min(parallel, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range parallel {
		wg.Go(func() {
			var w workspace
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				fn(&w, i)
			}
		})
	}
	wg.Wait()
}

// restore loads the keyed state of checkpoint m, whose state files are
// files (name to contents, as checkpoint.ReadCheckpoint returns them, sizes
// and checksums verified), into this empty backend: the key groups of the
// backend's range in the files of this operator. The checkpoint may
// have been taken at any parallelism; its maxParallelism must be this
// backend's. Every state must be registered before.
//
// It refuses, with a *MismatchError, a checkpoint with a state of this
// operator that is not registered, is of another kind, or of another
// fingerprint that its recorded schemas cannot resolve to this code's
// (m.Operators records them, see evolve.go; a state file without a record
// there is refused too); all before reading a state file. A file that does not decode, holds a key of another key
// group than its index says (when a key group function is set, see
// KeyGroupFunc), or holds a key group that another file of the state holds
// too is a *checkpoint.CorruptError with the file's name as Path; key
// groups outside the range are not decoded. On error the backend is left
// empty.
func (b *Backend) restore(m *checkpoint.Metadata, files map[string][]byte) error {
	if err := b.canRestore(); err != nil {
		return err
	}
	if err := b.restoreFrom(m, files, nil); err != nil {
		return err
	}
	b.restored = true
	return nil
}

func (b *Backend) canRestore() error {
	if b.restored {
		return fmt.Errorf("keyed: operator %q: Restore called twice", b.operator)
	}
	for _, st := range b.states {
		if !st.empty() {
			return fmt.Errorf("keyed: operator %q: Restore into a backend that has state (state %q)", b.operator, st.info().Name)
		}
	}
	return nil
}

// restoreFunc restores one key group (g, an index in the backend's range)
// of one state from entries of file.
type restoreFunc func(g int, file string, entries []statefile.Entry) error

// restorers decides, from checkpoint m's metadata alone (types,
// fingerprints, schemas) and before any file is read, how each of this
// operator's states restores, by name.
func (b *Backend) restorers(m *checkpoint.Metadata) (map[string]restoreFunc, error) {
	recorded := map[string]restoreFunc{}
	for _, ref := range m.Operators {
		op, name, ok := layout.SplitOperator(ref.Name)
		if !ok || op != b.operator {
			continue
		}
		st, ok := b.byName[name]
		if !ok {
			return nil, &MismatchError{Operator: b.operator, State: name, Field: "state", Found: ref.Type + " " + ref.SchemaFingerprint}
		}
		want := st.info().Ref()
		if ref.Type != want.Type {
			return nil, &MismatchError{Operator: b.operator, State: name, Field: "type", Want: want.Type, Found: ref.Type}
		}
		restore, err := st.restorer(ref)
		if err != nil {
			return nil, err
		}
		recorded[name] = restore
	}
	return recorded, nil
}

// restoreFrom restores, of checkpoint m's files, the key groups in this
// backend's range that take (nil: all). A job on several processes calls it
// once per checkpoint its partitions' records name, each taking only the
// key groups whose record names it. On failure every state is reset.
func (b *Backend) restoreFrom(m *checkpoint.Metadata, files map[string][]byte, take func(kg int) bool) error {
	if m.MaxParallelism != b.maxP {
		return fmt.Errorf("keyed: operator %q: checkpoint %s has max parallelism %d, this backend %d; max parallelism cannot change across a restore",
			b.operator, m.Ref(), m.MaxParallelism, b.maxP)
	}
	recorded, err := b.restorers(m)
	if err != nil {
		return err
	}
	type task struct {
		f       *statefile.KeyGroupFile
		i       int // key group index in f
		restore restoreFunc
		g       int
	}
	var tasks []task
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	slices.Sort(names)
	type stateGroup struct {
		state string
		kg    int
	}
	seen := map[stateGroup]string{} // -> the file holding it
	for _, name := range names {
		n, ok := layout.ParseName(name)
		if !ok || n.Kind != layout.KindState {
			return fmt.Errorf("keyed: operator %q: %q is not a state file name", b.operator, name)
		}
		if n.Run != m.Run || n.ID != m.ID {
			return fmt.Errorf("keyed: operator %q: state file %q is not of checkpoint %s", b.operator, name, m.Ref())
		}
		op, stName, ok := layout.SplitOperator(n.Operator)
		if !ok || op != b.operator || stName == opStateSuffix {
			continue // another operator's, or the operator's operator state (restoreOpState)
		}
		restore, ok := recorded[stName]
		if !ok {
			return &MismatchError{Operator: b.operator, State: stName, Field: "record", Found: name}
		}
		f, err := statefile.OpenKeyGroups(name, files[name])
		if err != nil {
			return err
		}
		for i := range f.Len() {
			kg := f.KeyGroup(i)
			if prev, dup := seen[stateGroup{stName, kg}]; dup {
				return &checkpoint.CorruptError{Path: name, Reason: fmt.Sprintf("state %q key group %d is also in %s", n.Operator, kg, prev)}
			}
			seen[stateGroup{stName, kg}] = name
			if b.r.Contains(kg) && (take == nil || take(kg)) { // else another instance's, or newer elsewhere
				tasks = append(tasks, task{f: f, i: i, restore: restore, g: kg - b.r.Start})
			}
		}
	}
	b.gen++ // the tables change: forget cached slots
	errs := make([]error, len(tasks))
	forEach(len(tasks), 0, func(_ *workspace, i int) {
		t := tasks[i]
		entries, err := t.f.Entries(t.i)
		if err != nil {
			errs[i] = err
			return
		}
		errs[i] = t.restore(t.g, t.f.Name(), entries)
	})
	for _, err := range errs {
		if err != nil {
			for _, st := range b.states {
				st.reset()
			}
			return err
		}
	}
	return nil
}
