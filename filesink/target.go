package filesink

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strings"
	"sync"

	"gocloud.dev/blob"
	"gocloud.dev/gcerrors"

	"github.com/kordproject/kord/vfs"
)

// Target is where a file sink writes: a directory (Dir) or a bucket of an
// object store (Bucket).
type Target interface {
	target() target
}

// target is what the sink needs of where it writes. Names are slash
// separated and relative to the target's root.
type target interface {
	// create starts a file that becomes durable, under name, when its
	// finish returns.
	create(ctx context.Context, name string) (staged, error)
	// publish makes staging visible as final in one atomic step and
	// removes staging. Idempotent: with staging gone and final there, it
	// did.
	publish(ctx context.Context, staging, final string) error
	// put writes a small object whole, atomically replacing it.
	put(ctx context.Context, name string, data []byte) error
	// open reads a file.
	open(ctx context.Context, name string) (io.ReadCloser, error)
	// get reads a small object whole; fs.ErrNotExist if there is none.
	get(ctx context.Context, name string) ([]byte, error)
	remove(ctx context.Context, name string) error
	// list returns every name under the root whose base name starts with
	// prefix.
	list(ctx context.Context, prefix string) ([]string, error)
	String() string
}

// staged is a file being written.
type staged interface {
	io.Writer
	// finish makes what was written durable and closes the file.
	finish() error
	// abandon closes it, durable or not.
	abandon()
}

// Dir is the directory dir on fs (vfs.Default() for the operating
// system's): a file is written under its staging name, fsynced with its
// directory, and published by rename(2), its directory fsynced again.
func Dir(fsys vfs.FS, dir string) Target {
	return &dirTarget{fs: fsys, dir: path.Clean(dir), durable: map[string]bool{}}
}

type dirTarget struct {
	fs  vfs.FS
	dir string

	mu      sync.Mutex
	durable map[string]bool // directories whose entry in their parent is durable
}

func (d *dirTarget) target() target     { return d }
func (d *dirTarget) String() string     { return d.dir }
func (d *dirTarget) at(n string) string { return path.Join(d.dir, n) }

type dirFile struct {
	f   vfs.File
	fs  vfs.FS
	dir string
}

func (f *dirFile) Write(p []byte) (int, error) { return f.f.Write(p) }

func (f *dirFile) finish() error {
	if err := f.f.Sync(); err != nil {
		f.f.Close()
		return err
	}
	if err := f.f.Close(); err != nil {
		return err
	}
	return f.fs.SyncDir(f.dir)
}

func (f *dirFile) abandon() { f.f.Close() }

// mkdir makes directory dir (the target's root or under it) and its
// entries in their parents durable, from the root's down: a directory
// created and not fsynced in its parent is lost with every file in it.
func (d *dirTarget) mkdir(dir string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.durable[dir] {
		return nil
	}
	if err := d.fs.MkdirAll(dir); err != nil {
		return err
	}
	var chain []string
	for p := dir; ; p = path.Dir(p) {
		chain = append(chain, p)
		if p == d.dir || p == path.Dir(p) {
			break
		}
	}
	for i := len(chain) - 1; i >= 0; i-- {
		p := chain[i]
		if d.durable[p] {
			continue
		}
		if err := d.fs.SyncDir(path.Dir(p)); err != nil {
			return err
		}
		d.durable[p] = true
	}
	return nil
}

func (d *dirTarget) create(_ context.Context, name string) (staged, error) {
	full := d.at(name)
	if err := d.mkdir(path.Dir(full)); err != nil {
		return nil, err
	}
	f, err := d.fs.Create(full)
	if err != nil {
		return nil, err
	}
	return &dirFile{f: f, fs: d.fs, dir: path.Dir(full)}, nil
}

func (d *dirTarget) exists(name string) (bool, error) {
	r, err := d.fs.Open(d.at(name))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	r.Close()
	return true, nil
}

func (d *dirTarget) publish(_ context.Context, staging, final string) error {
	err := d.fs.Rename(d.at(staging), d.at(final))
	if errors.Is(err, fs.ErrNotExist) {
		if ok, xerr := d.exists(final); xerr != nil || ok {
			return xerr // published before
		}
		return fmt.Errorf("%s: neither the staged file nor the published one exists: %w", d.at(staging), fs.ErrNotExist)
	}
	if err != nil {
		return err
	}
	return d.fs.SyncDir(path.Dir(d.at(final)))
}

func (d *dirTarget) put(_ context.Context, name string, data []byte) error {
	full := d.at(name)
	if err := d.mkdir(path.Dir(full)); err != nil {
		return err
	}
	// A hidden name of its own: two processes may put one name at once (a
	// partition's _SUCCESS), and a crash leaves nothing a reader sees.
	var r [6]byte
	if _, err := rand.Read(r[:]); err != nil {
		return err
	}
	tmpName := path.Join(path.Dir(name), "."+path.Base(name)+"."+hex.EncodeToString(r[:])+".tmp")
	tmp := d.at(tmpName)
	f, err := d.fs.Create(tmp)
	if err != nil {
		return err
	}
	df := &dirFile{f: f, fs: d.fs, dir: path.Dir(full)}
	if _, err := f.Write(data); err != nil {
		df.abandon()
		return err
	}
	if err := df.finish(); err != nil {
		return err
	}
	return d.publish(context.Background(), tmpName, name)
}

func (d *dirTarget) open(_ context.Context, name string) (io.ReadCloser, error) {
	return d.fs.Open(d.at(name))
}

func (d *dirTarget) get(_ context.Context, name string) ([]byte, error) {
	return d.fs.ReadFile(d.at(name))
}

func (d *dirTarget) remove(_ context.Context, name string) error {
	if err := d.fs.Remove(d.at(name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

func (d *dirTarget) list(_ context.Context, prefix string) ([]string, error) {
	var out []string
	var walk func(rel string) error
	walk = func(rel string) error {
		names, err := d.fs.ReadDir(d.at(rel))
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		for _, n := range names {
			p := path.Join(rel, n)
			// A directory lists; a file does not (ReadDir of a file fails
			// with something other than ErrNotExist on every FS kord has).
			if _, err := d.fs.ReadDir(d.at(p)); err == nil {
				if err := walk(p); err != nil {
					return err
				}
				continue
			}
			if strings.HasPrefix(n, prefix) {
				out = append(out, p)
			}
		}
		return nil
	}
	return out, walk(".")
}

// Bucket is the objects of bucket b under prefix ("lake/events/", say; ""
// for the whole bucket), through gocloud.dev/blob: a file is one object
// PUT under its staging name and published by a server-side copy to its
// final name, the staging object deleted after. The bucket stays the
// caller's to close.
func Bucket(b *blob.Bucket, prefix string) Target { return &bucketTarget{b: b, prefix: prefix} }

type bucketTarget struct {
	b      *blob.Bucket
	prefix string
	// inject, set by tests, runs before each request and fails it with
	// its error.
	inject func(op, key string) error
}

func (t *bucketTarget) check(op, key string) error {
	if t.inject == nil {
		return nil
	}
	return t.inject(op, key)
}

func (t *bucketTarget) target() target      { return t }
func (t *bucketTarget) String() string      { return "bucket prefix " + t.prefix }
func (t *bucketTarget) key(n string) string { return t.prefix + n }

type bucketFile struct {
	w      *blob.Writer
	cancel context.CancelFunc
	t      *bucketTarget
	name   string
}

func (f *bucketFile) Write(p []byte) (int, error) { return f.w.Write(p) }
func (f *bucketFile) finish() error {
	if err := f.t.check("put", f.name); err != nil {
		f.abandon() // the PUT never completes: no object
		return err
	}
	defer f.cancel()
	return f.w.Close() // the object exists, durably, once Close succeeds
}
func (f *bucketFile) abandon() {
	f.cancel() // a Writer whose context is done writes nothing
	f.w.Close()
}

func (t *bucketTarget) create(ctx context.Context, name string) (staged, error) {
	// The writer outlives the call that creates it: it is bound to a
	// context of its own, cancelled by abandon.
	if err := t.check("create", name); err != nil {
		return nil, err
	}
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	w, err := t.b.NewWriter(wctx, t.key(name), nil)
	if err != nil {
		cancel()
		return nil, err
	}
	return &bucketFile{w: w, cancel: cancel, t: t, name: name}, nil
}

func (t *bucketTarget) publish(ctx context.Context, staging, final string) error {
	if err := t.check("copy", staging); err != nil {
		return err
	}
	err := t.b.Copy(ctx, t.key(final), t.key(staging), nil)
	if gcerrors.Code(err) == gcerrors.NotFound {
		if ok, xerr := t.b.Exists(ctx, t.key(final)); xerr != nil || ok {
			return xerr // published before
		}
		return fmt.Errorf("%s: neither the staged object nor the published one exists: %w", t.key(staging), fs.ErrNotExist)
	}
	if err != nil {
		return err
	}
	return t.remove(ctx, staging)
}

func (t *bucketTarget) put(ctx context.Context, name string, data []byte) error {
	if err := t.check("put", name); err != nil {
		return err
	}
	return t.b.WriteAll(ctx, t.key(name), data, nil)
}

func (t *bucketTarget) open(ctx context.Context, name string) (io.ReadCloser, error) {
	if err := t.check("get", name); err != nil {
		return nil, err
	}
	return t.b.NewReader(ctx, t.key(name), nil)
}

func (t *bucketTarget) get(ctx context.Context, name string) ([]byte, error) {
	if err := t.check("get", name); err != nil {
		return nil, err
	}
	data, err := t.b.ReadAll(ctx, t.key(name))
	if gcerrors.Code(err) == gcerrors.NotFound {
		return nil, fmt.Errorf("%s: %w", t.key(name), fs.ErrNotExist)
	}
	return data, err
}

func (t *bucketTarget) remove(ctx context.Context, name string) error {
	if err := t.check("delete", name); err != nil {
		return err
	}
	if err := t.b.Delete(ctx, t.key(name)); err != nil && gcerrors.Code(err) != gcerrors.NotFound {
		return err
	}
	return nil
}

func (t *bucketTarget) list(ctx context.Context, prefix string) ([]string, error) {
	if err := t.check("list", prefix); err != nil {
		return nil, err
	}
	var out []string
	it := t.b.List(&blob.ListOptions{Prefix: t.prefix})
	for {
		obj, err := it.Next(ctx)
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		n := strings.TrimPrefix(obj.Key, t.prefix)
		if strings.HasPrefix(path.Base(n), prefix) {
			out = append(out, n)
		}
	}
}
