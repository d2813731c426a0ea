// Package errorfs wraps a [vfs.FS] to fail chosen operations, so that a
// test can show what the code above does when a create, write, sync,
// rename or any other operation fails ([New]).
package errorfs

import (
	"errors"
	"io"
	"os"

	"github.com/kordproject/kord/vfs"
)

// Op is a filesystem operation, as seen by the inject function of an
// error-injecting FS.
type Op int

// Filesystem operations.
const (
	OpCreate Op = iota
	OpWrite
	OpSync
	OpClose
	OpOpen
	OpRead // ReadFile, or a Read on a reader from Open
	OpRename
	OpRemove
	OpReadDir
	OpMkdirAll
	OpSyncDir
	OpLock
	OpLink
	numOps
)

var opNames = [...]string{
	OpCreate: "create", OpWrite: "write", OpSync: "sync", OpClose: "close",
	OpOpen: "open", OpRead: "read", OpRename: "rename", OpRemove: "remove",
	OpReadDir: "readdir", OpMkdirAll: "mkdirall", OpSyncDir: "syncdir", OpLock: "lock", OpLink: "link",
}

func (op Op) String() string {
	if op >= 0 && op < numOps {
		return opNames[op]
	}
	return "op?"
}

// ErrInjected is a convenient error for inject functions to return.
var ErrInjected = errors.New("errorfs: injected error")

// New returns an FS that calls inject before each operation on inner
// and, when inject returns an error, fails the operation with an
// *os.PathError naming the operation and path and wrapping that error. For
// OpRename the name is oldname. An injected OpWrite error fails part-way:
// half of the buffer is written to inner before the error is returned.
// An injected OpClose error still closes the inner file.
func New(inner vfs.FS, inject func(op Op, name string) error) vfs.FS {
	return &errorFS{inner: inner, inject: inject}
}

type errorFS struct {
	inner  vfs.FS
	inject func(Op, string) error
}

func (e *errorFS) check(op Op, name string) error {
	if err := e.inject(op, name); err != nil {
		return &os.PathError{Op: op.String(), Path: name, Err: err}
	}
	return nil
}

func (e *errorFS) Create(name string) (vfs.File, error) {
	if err := e.check(OpCreate, name); err != nil {
		return nil, err
	}
	f, err := e.inner.Create(name)
	if err != nil {
		return nil, err
	}
	return &errorFile{fs: e, f: f, name: name}, nil
}

type errorFile struct {
	fs   *errorFS
	f    vfs.File
	name string
}

func (f *errorFile) Write(p []byte) (int, error) {
	if err := f.fs.check(OpWrite, f.name); err != nil {
		n, _ := f.f.Write(p[:len(p)/2])
		return n, err
	}
	return f.f.Write(p)
}

func (f *errorFile) Sync() error {
	if err := f.fs.check(OpSync, f.name); err != nil {
		return err
	}
	return f.f.Sync()
}

func (f *errorFile) Close() error {
	if err := f.fs.check(OpClose, f.name); err != nil {
		f.f.Close()
		return err
	}
	return f.f.Close()
}

func (e *errorFS) Open(name string) (io.ReadCloser, error) {
	if err := e.check(OpOpen, name); err != nil {
		return nil, err
	}
	r, err := e.inner.Open(name)
	if err != nil {
		return nil, err
	}
	return &errorReader{fs: e, r: r, name: name}, nil
}

type errorReader struct {
	fs   *errorFS
	r    io.ReadCloser
	name string
}

func (r *errorReader) Read(p []byte) (int, error) {
	if err := r.fs.check(OpRead, r.name); err != nil {
		return 0, err
	}
	return r.r.Read(p)
}

func (r *errorReader) Close() error { return r.r.Close() }

func (e *errorFS) ReadFile(name string) ([]byte, error) {
	if err := e.check(OpRead, name); err != nil {
		return nil, err
	}
	return e.inner.ReadFile(name)
}

func (e *errorFS) Rename(oldname, newname string) error {
	if err := e.check(OpRename, oldname); err != nil {
		return err
	}
	return e.inner.Rename(oldname, newname)
}

func (e *errorFS) Remove(name string) error {
	if err := e.check(OpRemove, name); err != nil {
		return err
	}
	return e.inner.Remove(name)
}

func (e *errorFS) ReadDir(dir string) ([]string, error) {
	if err := e.check(OpReadDir, dir); err != nil {
		return nil, err
	}
	return e.inner.ReadDir(dir)
}

func (e *errorFS) MkdirAll(dir string) error {
	if err := e.check(OpMkdirAll, dir); err != nil {
		return err
	}
	return e.inner.MkdirAll(dir)
}

func (e *errorFS) Link(oldname, newname string) error {
	if err := e.check(OpLink, newname); err != nil {
		return err
	}
	return e.inner.Link(oldname, newname)
}

func (e *errorFS) SyncDir(dir string) error {
	if err := e.check(OpSyncDir, dir); err != nil {
		return err
	}
	return e.inner.SyncDir(dir)
}

func (e *errorFS) Lock(name string) (io.Closer, error) {
	if err := e.check(OpLock, name); err != nil {
		return nil, err
	}
	return e.inner.Lock(name)
}
