package vfs

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"sync"
)

// MemFS is an in-memory FS that records what is durable, so that a test can
// simulate a crash with CrashClone. File data becomes durable at File.Sync;
// a directory entry (create, rename, remove) becomes durable at SyncDir of its
// directory. The root directory is always durable. Paths are slash-separated;
// relative paths are taken from the root.
//
// Its methods are safe for concurrent use.
type MemFS struct {
	mu    sync.Mutex
	root  *memNode
	locks map[string]bool
}

type memNode struct {
	dir bool
	// Files.
	data       []byte // current contents
	syncedData []byte // contents as of the last Sync
	// Directories.
	children       map[string]*memNode // current entries
	syncedChildren map[string]*memNode // entries as of the last SyncDir
}

func newMemDir() *memNode {
	return &memNode{dir: true, children: map[string]*memNode{}, syncedChildren: map[string]*memNode{}}
}

// NewMem returns an empty in-memory FS.
func NewMem() *MemFS {
	return &MemFS{root: newMemDir(), locks: map[string]bool{}}
}

// CrashClone returns a new MemFS holding only what was durable in fs: each
// directory holds the entries it had at its last SyncDir, and each file the
// data it had at its last Sync. Locks are not carried over (the process that
// held them is gone). It models the filesystem a process finds after the
// machine lost power.
func (m *MemFS) CrashClone() *MemFS {
	m.mu.Lock()
	defer m.mu.Unlock()
	seen := map[*memNode]*memNode{}
	var clone func(n *memNode) *memNode
	clone = func(n *memNode) *memNode {
		if c, ok := seen[n]; ok {
			return c
		}
		var c *memNode
		if n.dir {
			c = newMemDir()
			seen[n] = c
			for name, child := range n.syncedChildren {
				cc := clone(child)
				c.children[name] = cc
				c.syncedChildren[name] = cc
			}
		} else {
			c = &memNode{data: bytes.Clone(n.syncedData), syncedData: bytes.Clone(n.syncedData)}
			seen[n] = c
		}
		return c
	}
	return &MemFS{root: clone(m.root), locks: map[string]bool{}}
}

func splitPath(name string) []string {
	name = path.Clean("/" + name)
	if name == "/" {
		return nil
	}
	return strings.Split(name[1:], "/")
}

// lookupDir returns the directory at parts, or an error naming name.
func (m *MemFS) lookupDir(op, name string, parts []string) (*memNode, error) {
	n := m.root
	for _, p := range parts {
		c, ok := n.children[p]
		if !ok {
			return nil, &os.PathError{Op: op, Path: name, Err: fs.ErrNotExist}
		}
		if !c.dir {
			return nil, &os.PathError{Op: op, Path: name, Err: errNotDir}
		}
		n = c
	}
	return n, nil
}

var (
	errNotDir = errors.New("not a directory")
	errIsDir  = errors.New("is a directory")
	errClosed = errors.New("file already closed")
)

// parent returns the directory holding name and name's last element.
func (m *MemFS) parent(op, name string) (*memNode, string, error) {
	parts := splitPath(name)
	if len(parts) == 0 {
		return nil, "", &os.PathError{Op: op, Path: name, Err: fs.ErrInvalid}
	}
	dir, err := m.lookupDir(op, name, parts[:len(parts)-1])
	if err != nil {
		return nil, "", err
	}
	return dir, parts[len(parts)-1], nil
}

func (m *MemFS) file(op, name string) (*memNode, error) {
	dir, base, err := m.parent(op, name)
	if err != nil {
		return nil, err
	}
	n, ok := dir.children[base]
	if !ok {
		return nil, &os.PathError{Op: op, Path: name, Err: fs.ErrNotExist}
	}
	if n.dir {
		return nil, &os.PathError{Op: op, Path: name, Err: errIsDir}
	}
	return n, nil
}

// Create implements FS.
func (m *MemFS) Create(name string) (File, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	dir, base, err := m.parent("open", name)
	if err != nil {
		return nil, err
	}
	if _, ok := dir.children[base]; ok {
		return nil, &os.PathError{Op: "open", Path: name, Err: fs.ErrExist}
	}
	n := &memNode{}
	dir.children[base] = n
	return &memFile{fs: m, n: n, name: name}, nil
}

type memFile struct {
	fs     *MemFS
	n      *memNode
	name   string
	closed bool
}

func (f *memFile) Write(p []byte) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.closed {
		return 0, &os.PathError{Op: "write", Path: f.name, Err: errClosed}
	}
	f.n.data = append(f.n.data, p...)
	return len(p), nil
}

func (f *memFile) Sync() error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.closed {
		return &os.PathError{Op: "sync", Path: f.name, Err: errClosed}
	}
	f.n.syncedData = bytes.Clone(f.n.data)
	return nil
}

func (f *memFile) Close() error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.closed {
		return &os.PathError{Op: "close", Path: f.name, Err: errClosed}
	}
	f.closed = true
	return nil
}

// Open implements FS. The reader sees the contents at the time of the call.
func (m *MemFS) Open(name string) (io.ReadCloser, error) {
	b, err := m.readFile("open", name)
	if err != nil {
		return nil, err
	}
	return io.NopCloser(bytes.NewReader(b)), nil
}

// ReadFile implements FS.
func (m *MemFS) ReadFile(name string) ([]byte, error) { return m.readFile("read", name) }

func (m *MemFS) readFile(op, name string) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n, err := m.file(op, name)
	if err != nil {
		return nil, err
	}
	return bytes.Clone(n.data), nil
}

// Rename implements FS.
func (m *MemFS) Rename(oldname, newname string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	od, ob, err := m.parent("rename", oldname)
	if err != nil {
		return err
	}
	nd, nb, err := m.parent("rename", newname)
	if err != nil {
		return err
	}
	n, ok := od.children[ob]
	if !ok {
		return &os.PathError{Op: "rename", Path: oldname, Err: fs.ErrNotExist}
	}
	if old, ok := nd.children[nb]; ok && old.dir {
		return &os.PathError{Op: "rename", Path: newname, Err: errIsDir}
	}
	delete(od.children, ob)
	nd.children[nb] = n
	return nil
}

// Link implements FS. The new name is durable at SyncDir of its
// directory, like any entry.
func (m *MemFS) Link(oldname, newname string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	od, ob, err := m.parent("link", oldname)
	if err != nil {
		return err
	}
	nd, nb, err := m.parent("link", newname)
	if err != nil {
		return err
	}
	n, ok := od.children[ob]
	if !ok {
		return &os.LinkError{Op: "link", Old: oldname, New: newname, Err: fs.ErrNotExist}
	}
	if n.dir {
		return &os.LinkError{Op: "link", Old: oldname, New: newname, Err: errIsDir}
	}
	if _, ok := nd.children[nb]; ok {
		return &os.LinkError{Op: "link", Old: oldname, New: newname, Err: fs.ErrExist}
	}
	nd.children[nb] = n
	return nil
}

// Remove implements FS. Directories cannot be removed.
func (m *MemFS) Remove(name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	dir, base, err := m.parent("remove", name)
	if err != nil {
		return err
	}
	n, ok := dir.children[base]
	if !ok {
		return &os.PathError{Op: "remove", Path: name, Err: fs.ErrNotExist}
	}
	if n.dir {
		return &os.PathError{Op: "remove", Path: name, Err: errIsDir}
	}
	delete(dir.children, base)
	return nil
}

// ReadDir implements FS.
func (m *MemFS) ReadDir(dir string) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, err := m.lookupDir("readdir", dir, splitPath(dir))
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(d.children))
	for name := range d.children {
		names = append(names, name)
	}
	slices.Sort(names)
	return names, nil
}

// MkdirAll implements FS. Like a real filesystem, a new directory's entry in
// its parent is durable only after SyncDir of the parent.
func (m *MemFS) MkdirAll(dir string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := m.root
	for _, p := range splitPath(dir) {
		c, ok := n.children[p]
		if !ok {
			c = newMemDir()
			n.children[p] = c
		} else if !c.dir {
			return &os.PathError{Op: "mkdir", Path: dir, Err: errNotDir}
		}
		n = c
	}
	return nil
}

// SyncDir implements FS.
func (m *MemFS) SyncDir(dir string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, err := m.lookupDir("sync", dir, splitPath(dir))
	if err != nil {
		return err
	}
	d.syncedChildren = make(map[string]*memNode, len(d.children))
	for name, c := range d.children {
		d.syncedChildren[name] = c
	}
	return nil
}

// Lock implements FS. The lock file is created if needed.
func (m *MemFS) Lock(name string) (io.Closer, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	dir, base, err := m.parent("lock", name)
	if err != nil {
		return nil, err
	}
	key := path.Clean("/" + name)
	if m.locks[key] {
		return nil, &os.PathError{Op: "lock", Path: name, Err: ErrLocked}
	}
	if n, ok := dir.children[base]; !ok {
		dir.children[base] = &memNode{}
	} else if n.dir {
		return nil, &os.PathError{Op: "lock", Path: name, Err: errIsDir}
	}
	m.locks[key] = true
	return &memLock{fs: m, key: key}, nil
}

type memLock struct {
	fs   *MemFS
	key  string
	once sync.Once
}

func (l *memLock) Close() error {
	l.once.Do(func() {
		l.fs.mu.Lock()
		delete(l.fs.locks, l.key)
		l.fs.mu.Unlock()
	})
	return nil
}
