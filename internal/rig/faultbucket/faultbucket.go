// Package faultbucket is a test rig: a gocloud.dev/blob bucket over
// another one whose requests a test makes fail or hang while a job runs
// (object storage that answers 503s, or stopped answering). Each request
// first meets the test's fault; with none set it goes on to the inner
// bucket. A fault that hangs waits for the request's context, as a
// request to a bucket that never answers ends only when its caller gives
// up.
package faultbucket

import (
	"bytes"
	"context"
	"errors"
	"sync"

	"gocloud.dev/blob"
	"gocloud.dev/blob/driver"
	"gocloud.dev/gcerrors"
)

// Op is the kind of a request to the bucket.
type Op int

// Requests.
const (
	Write      Op = iota // an object's upload (a put)
	Read                 // an object's download (a get)
	Attributes           // an object's attributes (exists)
	List
	Delete
	Copy
)

var opNames = [...]string{Write: "write", Read: "read", Attributes: "attributes", List: "list", Delete: "delete", Copy: "copy"}

func (op Op) String() string {
	if op >= 0 && int(op) < len(opNames) {
		return opNames[op]
	}
	return "op?"
}

// Fault is what a request meets before it reaches the inner bucket: an
// error fails it (the bucket's client then reports it, with the key);
// nil lets it through. key is "" for a list (its prefix is in no key).
type Fault func(ctx context.Context, op Op, key string) error

// Hang waits until ctx is done and returns its error: a bucket that does
// not answer.
func Hang(ctx context.Context) error {
	<-ctx.Done()
	return ctx.Err()
}

// Bucket is the rig: Blob is the bucket to hand to the code under test,
// Set switches its fault.
type Bucket struct {
	inner *blob.Bucket
	mu    sync.Mutex
	fault Fault
}

// New returns a rig over inner, with no fault set. The rig neither owns
// nor closes inner.
func New(inner *blob.Bucket) *Bucket { return &Bucket{inner: inner} }

// Set makes f the fault every request meets from now on; nil: none.
func (b *Bucket) Set(f Fault) {
	b.mu.Lock()
	b.fault = f
	b.mu.Unlock()
}

// Blob returns a bucket whose requests go through the rig. Closing it
// does not close the inner bucket; it waits for the requests under way,
// so a test whose fault hangs leaves it open.
func (b *Bucket) Blob() *blob.Bucket { return blob.NewBucket(&drv{b: b}) }

func (b *Bucket) meet(ctx context.Context, op Op, key string) error {
	b.mu.Lock()
	f := b.fault
	b.mu.Unlock()
	if f == nil {
		return nil
	}
	return f(ctx, op, key)
}

// drv is the driver: each request meets the fault, then goes to the inner
// bucket through its portable API.
type drv struct{ b *Bucket }

var _ driver.Bucket = (*drv)(nil)

func (d *drv) ErrorCode(err error) gcerrors.ErrorCode { return gcerrors.Code(err) }
func (d *drv) As(any) bool                            { return false }
func (d *drv) ErrorAs(error, any) bool                { return false }
func (d *drv) Close() error                           { return nil }

func (d *drv) Attributes(ctx context.Context, key string) (*driver.Attributes, error) {
	if err := d.b.meet(ctx, Attributes, key); err != nil {
		return nil, err
	}
	a, err := d.b.inner.Attributes(ctx, key)
	if err != nil {
		return nil, err
	}
	return &driver.Attributes{CacheControl: a.CacheControl, ContentDisposition: a.ContentDisposition, ContentEncoding: a.ContentEncoding,
		ContentLanguage: a.ContentLanguage, ContentType: a.ContentType, Metadata: a.Metadata, CreateTime: a.CreateTime, ModTime: a.ModTime,
		Size: a.Size, MD5: a.MD5, ETag: a.ETag}, nil
}

func (d *drv) ListPaged(ctx context.Context, opts *driver.ListOptions) (*driver.ListPage, error) {
	if err := d.b.meet(ctx, List, ""); err != nil {
		return nil, err
	}
	size := opts.PageSize
	if size <= 0 {
		size = 1000
	}
	token := opts.PageToken
	if len(token) == 0 { // a driver's first page; the portable API's is FirstPageToken
		token = blob.FirstPageToken
	}
	objs, next, err := d.b.inner.ListPage(ctx, token, size, &blob.ListOptions{Prefix: opts.Prefix, Delimiter: opts.Delimiter})
	if err != nil {
		return nil, err
	}
	page := &driver.ListPage{NextPageToken: next}
	for _, o := range objs {
		page.Objects = append(page.Objects, &driver.ListObject{Key: o.Key, ModTime: o.ModTime, Size: o.Size, MD5: o.MD5, IsDir: o.IsDir})
	}
	return page, nil
}

func (d *drv) NewRangeReader(ctx context.Context, key string, offset, length int64, _ *driver.ReaderOptions) (driver.Reader, error) {
	if err := d.b.meet(ctx, Read, key); err != nil {
		return nil, err
	}
	r, err := d.b.inner.NewRangeReader(ctx, key, offset, length, nil)
	if err != nil {
		return nil, err
	}
	return &reader{r: r}, nil
}

type reader struct{ r *blob.Reader }

func (r *reader) Read(p []byte) (int, error) { return r.r.Read(p) }
func (r *reader) Close() error               { return r.r.Close() }
func (r *reader) As(any) bool                { return false }
func (r *reader) Attributes() *driver.ReaderAttributes {
	return &driver.ReaderAttributes{ContentType: r.r.ContentType(), ModTime: r.r.ModTime(), Size: r.r.Size()}
}

func (d *drv) NewTypedWriter(ctx context.Context, key, contentType string, opts *driver.WriterOptions) (driver.Writer, error) {
	if err := d.b.meet(ctx, Write, key); err != nil {
		return nil, err
	}
	return &writer{ctx: ctx, d: d, key: key, opts: &blob.WriterOptions{ContentType: contentType, Metadata: opts.Metadata, IfNotExist: opts.IfNotExist}}, nil
}

// writer keeps what is written and uploads it whole at Close, under the
// context the write began with.
type writer struct {
	ctx  context.Context
	d    *drv
	key  string
	opts *blob.WriterOptions
	buf  bytes.Buffer
}

func (w *writer) Write(p []byte) (int, error) { return w.buf.Write(p) }
func (w *writer) Close() error {
	return w.d.b.inner.WriteAll(w.ctx, w.key, w.buf.Bytes(), w.opts)
}

func (d *drv) Copy(ctx context.Context, dst, src string, _ *driver.CopyOptions) error {
	if err := d.b.meet(ctx, Copy, dst); err != nil {
		return err
	}
	return d.b.inner.Copy(ctx, dst, src, nil)
}

func (d *drv) Delete(ctx context.Context, key string, _ *driver.DeleteOptions) error {
	if err := d.b.meet(ctx, Delete, key); err != nil {
		return err
	}
	return d.b.inner.Delete(ctx, key)
}

func (d *drv) SignedURL(context.Context, string, *driver.SignedURLOptions) (string, error) {
	return "", errNoSignedURL
}

var errNoSignedURL = errors.New("faultbucket: signed URLs are not served")
