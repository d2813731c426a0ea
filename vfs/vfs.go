// Package vfs is the small file system interface kord's checkpoint
// directory goes through ([FS]), with the operating system's file system
// ([Default]) and an in-memory one that records what is durable, so that a
// test can simulate a crash ([NewMem], [MemFS.CrashClone]). Package
// vfs/errorfs wraps an FS to inject errors.
//
// Durability follows POSIX: file data is durable after [File.Sync], and a
// create, rename or remove is durable only after SyncDir of the directory
// that holds the name.
package vfs

import (
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
)

// FS is a small file system: what a directory of checkpoints needs, so
// that tests can run the same code on an in-memory file system that
// simulates crashes (NewMem) and on one that injects errors
// (vfs/errorfs).
//
// Durability follows POSIX: file data is durable after File.Sync, and a
// create, rename or remove is durable only after SyncDir of the directory
// that holds the name.
type FS interface {
	// Create creates a new file for writing; it fails if name exists.
	Create(name string) (File, error)
	// Open opens a file for reading.
	Open(name string) (io.ReadCloser, error)
	// ReadFile returns a file's contents.
	ReadFile(name string) ([]byte, error)
	// Rename renames oldname to newname, atomically replacing newname if it
	// exists.
	Rename(oldname, newname string) error
	// Link makes newname a second name of file oldname (link(2)). It
	// fails, with an error satisfying errors.Is(err, fs.ErrExist), if
	// newname exists: of several links to one name exactly one succeeds,
	// which is what lets processes sharing a directory put an object once.
	Link(oldname, newname string) error
	// Remove removes a file.
	Remove(name string) error
	// ReadDir returns the names in a directory, sorted.
	ReadDir(dir string) ([]string, error)
	// MkdirAll creates a directory and any missing parents.
	MkdirAll(dir string) error
	// SyncDir makes the directory's entries (creates, renames, removes)
	// durable.
	SyncDir(dir string) error
	// Lock takes an exclusive advisory lock on name, creating the file if
	// needed. It fails at once, with an error satisfying
	// errors.Is(err, ErrLocked), if the lock is held; Close releases it.
	Lock(name string) (io.Closer, error)
}

// File is a file open for writing.
type File interface {
	io.Writer
	// Sync makes the data written so far durable.
	Sync() error
	Close() error
}

// ErrLocked is returned (wrapped) by FS.Lock when another process, or
// another open in this one, holds the lock.
var ErrLocked = errors.New("vfs: locked by another process")

// Default returns the FS of the operating system. It is POSIX only: Lock uses
// flock(2) with LOCK_EX|LOCK_NB, which conflicts between separate opens even
// within one process, and SyncDir opens the directory and fsyncs it.
func Default() FS { return osFS{} }

type osFS struct{}

func (osFS) Create(name string) (File, error) {
	return os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
}

func (osFS) Open(name string) (io.ReadCloser, error) { return os.Open(name) }

func (osFS) ReadFile(name string) ([]byte, error) { return os.ReadFile(name) }

func (osFS) Rename(oldname, newname string) error { return os.Rename(oldname, newname) }

func (osFS) Link(oldname, newname string) error { return os.Link(oldname, newname) }

func (osFS) Remove(name string) error { return os.Remove(name) }

func (osFS) ReadDir(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir) // sorted by name
	if err != nil {
		return nil, err
	}
	names := make([]string, len(ents))
	for i, e := range ents {
		names[i] = e.Name()
	}
	return names, nil
}

func (osFS) MkdirAll(dir string) error { return os.MkdirAll(dir, 0o755) }

func (osFS) SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	if err := d.Sync(); err != nil {
		d.Close()
		return err
	}
	return d.Close()
}

func (osFS) Lock(name string) (io.Closer, error) {
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("lock %s: %w", name, ErrLocked)
		}
		return nil, &os.PathError{Op: "flock", Path: name, Err: err}
	}
	return f, nil // closing the descriptor releases the flock
}
