package checkpoint

import (
	"context"
)

// Objects is checkpoint storage shaped as immutable objects: put once, get,
// list by prefix, delete. It is the shape several processes of one job can
// share (a shared directory, object storage), since no object is ever
// changed in place. Store (a directory, through a vfs.FS) is one;
// checkpoint/blobstore (object storage through gocloud.dev/blob) is
// another.
//
// Every method that does IO takes the context of the job it serves, and
// a done ctx ends the call as soon as the storage lets it, with an error
// satisfying errors.Is(err, ctx.Err()): a bucket's request is cancelled;
// a Store checks ctx before each file operation, which once begun runs
// to its end.
type Objects interface {
	// Put stores an immutable object, durable when Put returns nil. An
	// existing object is never replaced: the error then satisfies
	// errors.Is(err, fs.ErrExist).
	Put(ctx context.Context, name string, data []byte) error
	// Get returns an object's contents; a missing object's error
	// satisfies errors.Is(err, fs.ErrNotExist).
	Get(ctx context.Context, name string) ([]byte, error)
	// List returns the names of the objects whose names start with
	// prefix, sorted.
	List(ctx context.Context, prefix string) ([]string, error)
	// Delete removes an object; deleting a missing object is not an
	// error.
	Delete(ctx context.Context, name string) error
}

var _ Objects = (*Store)(nil)

// Storage is where a job keeps its checkpoints: Objects, plus one small
// mutable object replaced atomically (the local COMMITTED marker: a reader
// sees the old contents or the new, never a mix), plus a name for an
// object in errors. Store (a directory) and checkpoint/blobstore (a
// bucket: an object store replaces an object whole) are Storage.
type Storage interface {
	Objects
	// SetPointer atomically replaces the mutable object name with data.
	SetPointer(ctx context.Context, name string, data []byte) error
	// Pointer returns a mutable object's contents, and false if it does
	// not exist.
	Pointer(ctx context.Context, name string) ([]byte, bool, error)
	// Where names an object for errors and logs: a file's path, a
	// bucket's key.
	Where(name string) string
}

var _ Storage = (*Store)(nil)
