package checkpoint

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/kordproject/kord/internal/layout"
	"github.com/kordproject/kord/vfs"
)

// Store is checkpoint storage shaped like an object store: put an immutable
// object, get, list, delete, and atomically replace a small pointer object.
// This implementation keeps objects as files in one directory of a vfs.FS,
// written as temp file, write, fsync, close, rename, fsync directory.
//
// A Store from OpenStore holds an exclusive lock on its directory until
// Close, so one process at a time writes to it. A Store from
// OpenSharedStore takes no lock: several processes write to one directory
// (a shared filesystem), each object put once by whichever comes first.
// Its methods are safe for concurrent use. They check their ctx before
// an object's file operations begin; once begun, they run to their end.
type Store struct {
	fs     vfs.FS
	dir    string
	lock   io.Closer
	seq    atomic.Uint64
	closed atomic.Bool
	// shared: no directory lock; Put links its temp file to the object's
	// name (link(2) refuses an existing name atomically), and temp files
	// carry token so that writers never share one.
	shared bool
	token  string

	mu      sync.Mutex
	putting map[string]bool // names with a Put in progress
}

// errStoreClosed is returned by operations on a closed Store.
var errStoreClosed = errors.New("checkpoint: store closed")

// OpenStore opens the checkpoint directory dir on fsys, creating it (and
// making its entry durable) if needed, takes the lock dir/LOCK, and removes
// temp files that a crashed writer left. If another process holds the lock,
// the error names the lock file and satisfies errors.Is(err, vfs.ErrLocked).
func OpenStore(fsys vfs.FS, dir string) (*Store, error) {
	dir = filepath.Clean(dir)
	if err := fsys.MkdirAll(dir); err != nil {
		return nil, fmt.Errorf("checkpoint: create directory %s: %w", dir, err)
	}
	if err := fsys.SyncDir(filepath.Dir(dir)); err != nil {
		return nil, fmt.Errorf("checkpoint: sync parent of %s: %w", dir, err)
	}
	lockPath := filepath.Join(dir, layout.LockName)
	lock, err := fsys.Lock(lockPath)
	if err != nil {
		if errors.Is(err, vfs.ErrLocked) {
			return nil, fmt.Errorf("checkpoint: directory %s is in use: lock %s is held by another process (or another Store in this one): %w", dir, lockPath, vfs.ErrLocked)
		}
		return nil, fmt.Errorf("checkpoint: lock %s: %w", lockPath, err)
	}
	s := &Store{fs: fsys, dir: dir, lock: lock, putting: map[string]bool{}}
	names, err := fsys.ReadDir(dir)
	if err != nil {
		lock.Close()
		return nil, fmt.Errorf("checkpoint: list %s: %w", dir, err)
	}
	removed := false
	for _, name := range names {
		if layout.IsTemp(name) {
			if err := fsys.Remove(s.Path(name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				lock.Close()
				return nil, fmt.Errorf("checkpoint: remove leftover temp file %s: %w", s.Path(name), err)
			}
			removed = true
		}
	}
	if removed {
		if err := fsys.SyncDir(dir); err != nil {
			lock.Close()
			return nil, fmt.Errorf("checkpoint: sync directory %s: %w", dir, err)
		}
	}
	return s, nil
}

// OpenSharedStore opens the checkpoint directory dir on fsys for several
// processes at once (a directory on a shared filesystem that supports
// hard links, NFS among them), creating it if needed. It takes no lock,
// and Put is atomic between processes: of two puts of one name exactly one
// succeeds, the other failing with fs.ErrExist. A crashed writer's temp
// files stay (no process can tell them from another's write in progress);
// their names start with ".tmp.". It is also how a tool reads the
// checkpoints of a job that runs (the kord command does): OpenStore takes
// the directory's lock and removes temp files, which a running job's
// writes in progress are.
func OpenSharedStore(fsys vfs.FS, dir string) (*Store, error) {
	dir = filepath.Clean(dir)
	if err := fsys.MkdirAll(dir); err != nil {
		return nil, fmt.Errorf("checkpoint: create directory %s: %w", dir, err)
	}
	if err := fsys.SyncDir(filepath.Dir(dir)); err != nil {
		return nil, fmt.Errorf("checkpoint: sync parent of %s: %w", dir, err)
	}
	var tok [8]byte
	if _, err := rand.Read(tok[:]); err != nil {
		return nil, fmt.Errorf("checkpoint: shared store %s: %w", dir, err)
	}
	return &Store{fs: fsys, dir: dir, lock: io.NopCloser(nil), putting: map[string]bool{}, shared: true, token: hex.EncodeToString(tok[:])}, nil
}

// Path returns the path of object name, for error messages.
func (s *Store) Path(name string) string { return filepath.Join(s.dir, name) }

// Dir returns the store's directory.
func (s *Store) Dir() string { return s.dir }

// Where is name's path (Storage).
func (s *Store) Where(name string) string { return s.Path(name) }

// Close releases the directory lock. Later calls do nothing.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	if err := s.lock.Close(); err != nil {
		return fmt.Errorf("checkpoint: unlock %s: %w", s.Path(layout.LockName), err)
	}
	return nil
}

func (s *Store) checkName(ctx context.Context, op, name string) error {
	if s.closed.Load() {
		return fmt.Errorf("checkpoint: %s %s: %w", op, s.Path(name), errStoreClosed)
	}
	if !layout.ValidObjectName(name) {
		return fmt.Errorf("checkpoint: %s %q: not a valid object name", op, name)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("checkpoint: %s %s: %w", op, s.Path(name), err)
	}
	return nil
}

// Put stores an immutable object: it writes data to a temp file, fsyncs and
// closes it, renames it to name and fsyncs the directory. When Put returns
// nil the object is durable. It refuses to overwrite an existing object.
func (s *Store) Put(ctx context.Context, name string, data []byte) error {
	if err := s.put(ctx, name, data); err != nil {
		return err
	}
	return s.syncDir()
}

// put is Put without the directory fsync; the caller must sync the directory
// before it relies on the object being durable.
func (s *Store) put(ctx context.Context, name string, data []byte) error {
	if err := s.checkName(ctx, "put", name); err != nil {
		return err
	}
	s.mu.Lock()
	if s.putting[name] {
		s.mu.Unlock()
		return fmt.Errorf("checkpoint: put %s: another put of this object is in progress", s.Path(name))
	}
	s.putting[name] = true
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.putting, name)
		s.mu.Unlock()
	}()

	if s.shared {
		return s.writeAndLink(name, data)
	}
	switch exists, err := s.exists(name); {
	case err != nil:
		return fmt.Errorf("checkpoint: put %s: %w", s.Path(name), err)
	case exists:
		return fmt.Errorf("checkpoint: put %s: object exists and objects are immutable: %w", s.Path(name), fs.ErrExist)
	}
	return s.writeAndRename("put", name, data)
}

// writeAndLink writes data to a fresh temp file, fsyncs and closes it,
// links it to name, which fails atomically if name exists, and removes the
// temp name.
func (s *Store) writeAndLink(name string, data []byte) error {
	tmp, err := s.writeTemp("put", name, data)
	if err != nil {
		return err
	}
	defer s.fs.Remove(tmp) // the object keeps its own name
	if err := s.fs.Link(tmp, s.Path(name)); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("checkpoint: put %s: object exists and objects are immutable: %w", s.Path(name), fs.ErrExist)
		}
		return fmt.Errorf("checkpoint: put %s: link %s: %w", s.Path(name), tmp, err)
	}
	return nil
}

func (s *Store) exists(name string) (bool, error) {
	r, err := s.fs.Open(s.Path(name))
	if err == nil {
		r.Close()
		return true, nil
	}
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return false, err
}

// writeAndRename writes data to a fresh temp file, fsyncs and closes it and
// renames it over name. On error it removes the temp file (best effort) and
// returns an error naming the path that failed.
func (s *Store) writeAndRename(op, name string, data []byte) error {
	tmp, err := s.writeTemp(op, name, data)
	if err != nil {
		return err
	}
	if err := s.fs.Rename(tmp, s.Path(name)); err != nil {
		s.fs.Remove(tmp) // best effort; OpenStore removes leftovers
		return fmt.Errorf("checkpoint: %s %s: rename %s: %w", op, s.Path(name), tmp, err)
	}
	return nil
}

// writeTemp writes data to a fresh temp file for object name, fsyncs and
// closes it, and returns its path. On error it removes the temp file (best
// effort) and returns an error naming the path that failed.
func (s *Store) writeTemp(op, name string, data []byte) (string, error) {
	tmp := layout.TempPrefix + name + "."
	if s.token != "" {
		tmp += s.token + "."
	}
	tmp = s.Path(tmp + strconv.FormatUint(s.seq.Add(1), 10))
	fail := func(what string, err error) (string, error) {
		s.fs.Remove(tmp) // best effort; OpenStore removes leftovers
		return "", fmt.Errorf("checkpoint: %s %s: %s %s: %w", op, s.Path(name), what, tmp, err)
	}
	f, err := s.fs.Create(tmp)
	if err != nil {
		return fail("create", err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fail("write", err)
	}
	if err := f.Sync(); err != nil {
		// Never retried, and the file is dropped: after a failed fsync
		// Linux may have marked the lost pages clean, so a second fsync
		// can succeed over data that never reached the disk (PostgreSQL's
		// "fsyncgate", 2018). The caller's next attempt is a new file.
		f.Close()
		return fail("fsync", err)
	}
	if err := f.Close(); err != nil {
		return fail("close", err)
	}
	return tmp, nil
}

func (s *Store) syncDir() error {
	if err := s.fs.SyncDir(s.dir); err != nil {
		return fmt.Errorf("checkpoint: fsync directory %s: %w", s.dir, err)
	}
	return nil
}

// Get returns an object's contents. A missing object's error satisfies
// errors.Is(err, fs.ErrNotExist).
func (s *Store) Get(ctx context.Context, name string) ([]byte, error) {
	if err := s.checkName(ctx, "get", name); err != nil {
		return nil, err
	}
	b, err := s.fs.ReadFile(s.Path(name))
	if err != nil {
		return nil, fmt.Errorf("checkpoint: get %s: %w", s.Path(name), err)
	}
	return b, nil
}

// List returns the names of the objects whose names start with prefix,
// sorted. Temp files and the lock file are not objects.
func (s *Store) List(ctx context.Context, prefix string) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("checkpoint: list %s: %w", s.dir, err)
	}
	names, err := s.fs.ReadDir(s.dir)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: list %s: %w", s.dir, err)
	}
	out := names[:0]
	for _, name := range names {
		if strings.HasPrefix(name, prefix) && name != layout.LockName && !layout.IsTemp(name) {
			out = append(out, name)
		}
	}
	return out, nil
}

// Delete removes an object and fsyncs the directory. Deleting a missing
// object is not an error.
func (s *Store) Delete(ctx context.Context, name string) error {
	if err := s.remove(ctx, name); err != nil {
		return err
	}
	return s.syncDir()
}

// DeleteAll removes several objects, then fsyncs the directory once: when
// it returns nil every one is durably gone. Missing objects are not an
// error. It stops at the first failure.
func (s *Store) DeleteAll(ctx context.Context, names []string) error {
	for _, name := range names {
		if err := s.remove(ctx, name); err != nil {
			return err
		}
	}
	if len(names) == 0 {
		return nil
	}
	return s.syncDir()
}

func (s *Store) remove(ctx context.Context, name string) error {
	if err := s.checkName(ctx, "delete", name); err != nil {
		return err
	}
	if err := s.fs.Remove(s.Path(name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("checkpoint: delete %s: %w", s.Path(name), err)
	}
	return nil
}

// SetPointer atomically replaces the small mutable object name with data:
// temp file, fsync, rename over name, fsync directory. A crash at any point
// leaves either the old or the new contents, never a mix.
func (s *Store) SetPointer(ctx context.Context, name string, data []byte) error {
	if err := s.checkName(ctx, "set pointer", name); err != nil {
		return err
	}
	if err := s.writeAndRename("set pointer", name, data); err != nil {
		return err
	}
	return s.syncDir()
}

// Pointer returns the contents of pointer object name, and false if it does
// not exist.
func (s *Store) Pointer(ctx context.Context, name string) ([]byte, bool, error) {
	if err := s.checkName(ctx, "get pointer", name); err != nil {
		return nil, false, err
	}
	b, err := s.fs.ReadFile(s.Path(name))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("checkpoint: get pointer %s: %w", s.Path(name), err)
	}
	return b, true, nil
}

// parallelism bounds concurrent file writes and reads of one checkpoint.
func parallelism(n int) int {
	return max(1, min(n, runtime.GOMAXPROCS(0), 8))
}

// forEach runs fn(i) for i in [0, n) on up to parallelism(n) goroutines and
// returns the error of the lowest failing index. It waits for every call.
func forEach(n int, fn func(i int) error) error {
	errs := make([]error, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range parallelism(n) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				errs[i] = fn(i)
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// PutAll stores several immutable objects in o in parallel and returns
// their references (as Store.PutAll): a Store's PutAll (one directory
// fsync), or parallel Puts, each durable when it returns.
func PutAll(ctx context.Context, o Objects, files map[string][]byte) ([]FileRef, error) {
	if st, ok := o.(*Store); ok {
		return st.PutAll(ctx, files)
	}
	names, refs := fileRefs(files)
	if err := forEach(len(names), func(i int) error { return o.Put(ctx, names[i], files[names[i]]) }); err != nil {
		return nil, err
	}
	return refs, nil
}

// fileRefs returns files' names, sorted, and their references.
func fileRefs(files map[string][]byte) ([]string, []FileRef) {
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	slices.Sort(names)
	refs := make([]FileRef, len(names))
	for i, name := range names {
		n, _ := layout.ParseName(name)
		refs[i] = FileRef{Name: name, Size: int64(len(files[name])), CRC32C: checksum(files[name]), Operator: n.Operator, KeyGroup: n.KeyGroup}
	}
	return names, refs
}

// PutAll stores several immutable objects, written in parallel, then one
// directory fsync: when it returns nil every one is durable. It returns
// their references (name, size, CRC32C, and operator and key group for state
// file names), sorted by name.
func (s *Store) PutAll(ctx context.Context, files map[string][]byte) ([]FileRef, error) {
	names, refs := fileRefs(files)
	if err := forEach(len(names), func(i int) error { return s.put(ctx, names[i], files[names[i]]) }); err != nil {
		return nil, err
	}
	if len(names) > 0 {
		if err := s.syncDir(); err != nil {
			return nil, err
		}
	}
	return refs, nil
}

// WriteCheckpoint writes checkpoint (m.Run, m.ID) durably: every state file
// in files (keyed by name, each a state file name of this checkpoint) first,
// in parallel, then one directory fsync, then the metadata. The checkpoint
// is durable exactly when its metadata object is, so a crash before that
// leaves only files without metadata, which ListCheckpoints ignores and
// retention removes. WriteCheckpoint sets m.Files (sorted by name) and
// m.Version.
func WriteCheckpoint(ctx context.Context, s Storage, m *Metadata, files map[string][]byte) error {
	if err := layout.ValidateRun(m.Run); err != nil {
		return err
	}
	for name := range files {
		n, ok := layout.ParseName(name)
		if !ok || n.Kind != layout.KindState || n.Run != m.Run || n.ID != m.ID {
			return fmt.Errorf("checkpoint: write checkpoint %s: %q is not a state file name of this checkpoint", m.Ref(), name)
		}
	}
	m.Version = FormatVersion
	if _, err := encodeMetadata(m); err != nil { // validate before writing anything
		return err
	}
	refs, err := PutAll(ctx, s, files)
	if err != nil {
		return err
	}
	m.Files = refs
	return PutMetadata(ctx, s, m)
}

// ReadCheckpoint reads checkpoint (run, id) and every state file, verifying
// each file's size and CRC32C against the metadata. A missing metadata object
// is ErrMissing; a corrupt or missing state file or corrupt metadata is a
// *CorruptError naming the path, with expected and actual size or checksum.
func ReadCheckpoint(ctx context.Context, s Storage, run string, id uint64) (*Metadata, map[string][]byte, error) {
	metaName := layout.MetaName(run, id)
	metaPath := s.Where(metaName)
	b, err := s.Get(ctx, metaName)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, fmt.Errorf("%w: checkpoint %s/%d: no metadata %s", ErrMissing, run, id, metaPath)
	}
	if err != nil {
		return nil, nil, err
	}
	m, err := DecodeMetadata(metaPath, b)
	if err != nil {
		return nil, nil, err
	}
	if m.Run != run || m.ID != id {
		return nil, nil, corruptf(metaPath, "metadata is of checkpoint %s, want %s/%d", m.Ref(), run, id)
	}
	data := make([][]byte, len(m.Files))
	err = forEach(len(m.Files), func(i int) error {
		f := m.Files[i]
		path := s.Where(f.Name)
		b, err := s.Get(ctx, f.Name)
		if errors.Is(err, fs.ErrNotExist) {
			return &CorruptError{Path: path, Reason: fmt.Sprintf("missing state file of checkpoint %s (expected size %d, crc32c %08x)", m.Ref(), f.Size, f.CRC32C), Err: err}
		}
		if err != nil {
			return err
		}
		if int64(len(b)) != f.Size {
			return corruptf(path, "size mismatch: expected %d bytes, actual %d (crc32c expected %08x, actual %08x)", f.Size, len(b), f.CRC32C, checksum(b))
		}
		if c := checksum(b); c != f.CRC32C {
			return corruptf(path, "checksum mismatch: expected crc32c %08x, actual %08x", f.CRC32C, c)
		}
		data[i] = b
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	files := make(map[string][]byte, len(m.Files))
	for i, f := range m.Files {
		files[f.Name] = data[i]
	}
	return m, files, nil
}

// ListCheckpoints returns every checkpoint that has a metadata object, sorted
// by ID, then run. It does not read or verify the metadata.
func ListCheckpoints(ctx context.Context, s Objects) ([]Ref, error) {
	names, err := s.List(ctx, layout.Prefix)
	if err != nil {
		return nil, err
	}
	var refs []Ref
	for _, name := range names {
		if n, ok := layout.ParseName(name); ok && n.Kind == layout.KindMeta {
			refs = append(refs, Ref{Run: n.Run, ID: n.ID})
		}
	}
	slices.SortFunc(refs, Ref.compare)
	return refs, nil
}

// SetCommitted durably records ref as the newest committed checkpoint in
// the local COMMITTED marker (checksummed, replaced atomically).
func SetCommitted(ctx context.Context, s Storage, ref Ref) error {
	b, err := encodeCommitted(ref)
	if err != nil {
		return fmt.Errorf("checkpoint: set committed %s: %w", s.Where(layout.CommittedName), err)
	}
	return s.SetPointer(ctx, layout.CommittedName, b)
}

// ReadCommitted returns the checkpoint recorded by the local COMMITTED marker,
// and false if there is none. A corrupt marker is a *CorruptError naming its
// path.
func ReadCommitted(ctx context.Context, s Storage) (Ref, bool, error) {
	b, ok, err := s.Pointer(ctx, layout.CommittedName)
	if err != nil || !ok {
		return Ref{}, false, err
	}
	ref, err := decodeCommitted(s.Where(layout.CommittedName), b)
	if err != nil {
		return Ref{}, false, err
	}
	return ref, true, nil
}

// PutMetadata encodes m (encodeMetadata) and puts it durably as checkpoint
// (m.Run, m.ID)'s metadata object. Call it after every state file in m.Files
// is durable (Put): the checkpoint is durable exactly when this returns nil.
func PutMetadata(ctx context.Context, s Objects, m *Metadata) error {
	b, err := encodeMetadata(m)
	if err != nil {
		return err
	}
	return s.Put(ctx, layout.MetaName(m.Run, m.ID), b)
}
