// Package crashfs is a test rig: a file system over a vfs.MemFS that
// crashes at an operation the test chooses. At that operation it takes a
// CrashClone (what a disk holds after the process died there, before the
// operation ran) and fails it and every later one, as a dead process does
// nothing more.
package crashfs

import (
	"sync"

	"github.com/kordproject/kord/vfs"
	"github.com/kordproject/kord/vfs/errorfs"
)

// FS follows the operations on its file system. Safe for concurrent use
// (checkpoints write their files in parallel).
type FS struct {
	mu    sync.Mutex
	mem   *vfs.MemFS
	n, at int // operations so far; the one to crash at (0: none)
	clone *vfs.MemFS
}

// New returns the rig over mem and the file system to run on, which
// crashes once armed (CrashIn).
func New(mem *vfs.MemFS) (*FS, vfs.FS) {
	c := &FS{mem: mem}
	return c, errorfs.New(mem, func(errorfs.Op, string) error {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.n++
		if c.n == c.at {
			c.clone = c.mem.CrashClone()
		}
		if c.clone != nil {
			return errorfs.ErrInjected
		}
		return nil
	})
}

// CrashIn arms the crash at the n-th operation from now (1: the next).
func (c *FS) CrashIn(n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.at = c.n + n
}

// Crashed reports whether the crash came.
func (c *FS) Crashed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.clone != nil
}

// After returns the file system after the crash, or, if it did not come,
// after the run (a crash clone of its end).
func (c *FS) After() *vfs.MemFS {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.clone != nil {
		return c.clone
	}
	return c.mem.CrashClone()
}
