// Package blobstore keeps checkpoints in object storage through
// gocloud.dev/blob: [checkpoint.Objects] over a bucket, for the processes of
// one job to share. kord's module holds only the blob core and its file and
// memory drivers; a program that keeps its checkpoints in S3, GCS or Azure
// imports the driver itself (gocloud.dev/blob/s3blob, gcsblob, azureblob)
// and opens the bucket with blob.OpenBucket.
//
// Objects are immutable: Put is a conditional write, so that of two
// processes putting one name exactly one succeeds. That needs a bucket
// whose conditional writes are atomic (S3, GCS, Azure, memblob). gocloud's
// fileblob checks for the key only when a write closes, so two writers
// can both succeed: it serves tests and a single writer.
package blobstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"sort"
	"strings"
	"time"

	"gocloud.dev/blob"
	"gocloud.dev/gcerrors"

	"github.com/kordproject/kord/checkpoint"
	"github.com/kordproject/kord/internal/layout"
)

// Store is checkpoint.Objects in a bucket, under a prefix.
type Store struct {
	b       *blob.Bucket
	prefix  string
	timeout time.Duration
}

var _ checkpoint.Storage = (*Store)(nil)

// Opt configures a Store.
type Opt func(*Store)

// Timeout bounds each request to the bucket, within the context the
// request is made with. Default 60s.
func Timeout(d time.Duration) Opt { return func(s *Store) { s.timeout = d } }

// New returns the objects of bucket b whose keys start with prefix (for
// example "jobs/uri-counts/"; "" for the whole bucket). The bucket stays
// the caller's to close.
func New(b *blob.Bucket, prefix string, opts ...Opt) *Store {
	s := &Store{b: b, prefix: prefix, timeout: time.Minute}
	for _, o := range opts {
		o(s)
	}
	return s
}

// ctx bounds one request made under ctx by the store's timeout.
func (s *Store) ctx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.timeout)
}

func (s *Store) key(op, name string) (string, error) {
	if !layout.ValidObjectName(name) {
		return "", fmt.Errorf("checkpoint: %s %q: not a valid object name", op, name)
	}
	return s.prefix + name, nil
}

// Put stores an immutable object with a conditional write (the bucket
// refuses it when the key exists: IfNotExist), so that of two processes
// putting one name, exactly one succeeds.
func (s *Store) Put(ctx context.Context, name string, data []byte) error {
	key, err := s.key("put", name)
	if err != nil {
		return err
	}
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	err = s.b.WriteAll(ctx, key, data, &blob.WriterOptions{IfNotExist: true, ContentType: "application/octet-stream"})
	switch {
	case err == nil:
		return nil
	case gcerrors.Code(err) == gcerrors.FailedPrecondition:
		// The code of a refused conditional write, but also of a closed
		// bucket: the object's existence tells them apart.
		if ok, xerr := s.b.Exists(ctx, key); xerr == nil && ok {
			return fmt.Errorf("checkpoint: put %s: object exists and objects are immutable: %w", key, fs.ErrExist)
		}
	}
	return fmt.Errorf("checkpoint: put %s: %w", key, err)
}

// Get returns an object's contents.
func (s *Store) Get(ctx context.Context, name string) ([]byte, error) {
	key, err := s.key("get", name)
	if err != nil {
		return nil, err
	}
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	b, err := s.b.ReadAll(ctx, key)
	if gcerrors.Code(err) == gcerrors.NotFound {
		return nil, fmt.Errorf("checkpoint: get %s: %w", key, fs.ErrNotExist)
	}
	if err != nil {
		return nil, fmt.Errorf("checkpoint: get %s: %w", key, err)
	}
	return b, nil
}

// List returns the names of the objects under the store's prefix whose
// names start with prefix, sorted. Keys below a further "/" are not this
// store's objects and are left out.
func (s *Store) List(ctx context.Context, prefix string) ([]string, error) {
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	it := s.b.List(&blob.ListOptions{Prefix: s.prefix + prefix, Delimiter: "/"})
	var out []string
	for {
		obj, err := it.Next(ctx)
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return nil, fmt.Errorf("checkpoint: list %s%s: %w", s.prefix, prefix, err)
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return nil, fmt.Errorf("checkpoint: list %s%s: %w", s.prefix, prefix, err)
		}
		name := strings.TrimPrefix(obj.Key, s.prefix)
		if obj.IsDir || !layout.ValidObjectName(name) {
			continue
		}
		out = append(out, name)
	}
	sort.Strings(out)
	return out, nil
}

// Delete removes an object.
func (s *Store) Delete(ctx context.Context, name string) error {
	key, err := s.key("delete", name)
	if err != nil {
		return err
	}
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	if err := s.b.Delete(ctx, key); err != nil && gcerrors.Code(err) != gcerrors.NotFound {
		return fmt.Errorf("checkpoint: delete %s: %w", key, err)
	}
	return nil
}

// SetPointer replaces the mutable object name with data in one unconditional
// write: object stores replace an object whole, so a reader sees the old
// contents or the new, never a mix.
func (s *Store) SetPointer(ctx context.Context, name string, data []byte) error {
	key, err := s.key("set pointer", name)
	if err != nil {
		return err
	}
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	if err := s.b.WriteAll(ctx, key, data, &blob.WriterOptions{ContentType: "application/octet-stream"}); err != nil {
		return fmt.Errorf("checkpoint: set pointer %s: %w", key, err)
	}
	return nil
}

// Pointer returns the mutable object name's contents, and false if it does
// not exist.
func (s *Store) Pointer(ctx context.Context, name string) ([]byte, bool, error) {
	b, err := s.Get(ctx, name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	return b, true, nil
}

// Where is name's key in the bucket, for errors.
func (s *Store) Where(name string) string { return s.prefix + name }
