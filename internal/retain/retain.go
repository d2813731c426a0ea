// Package retain deletes the checkpoints a job no longer needs, from the
// Storage it keeps them in: after each commit the ones older than the
// committed one beyond the few it keeps (Committed), on storage several
// processes share the ones no partition's record names (Named), and other
// runs' ones (Others), and it makes sure one storage holds one job's
// checkpoints (Claim). Each deleted checkpoint loses its metadata first,
// so a crash midway leaves only files that no restore takes.
package retain

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"time"

	"github.com/kordproject/kord/checkpoint"
	"github.com/kordproject/kord/internal/layout"
)

// Committed deletes old checkpoints, keeping committed and the newest
// keep-1 checkpoints older than it (keep >= 1). "Older" is a smaller ID, or
// the same ID from another run (a zombie's or an abandoned attempt).
// Checkpoints with a larger ID than committed may be in flight and are
// never touched; neither is committed. Each deleted checkpoint loses its
// metadata first, then its files, so a crash midway leaves files without
// metadata, which the next Committed removes along with every other such
// leftover not newer than committed. Committed fails, deleting nothing, if
// committed has no metadata.
func Committed(ctx context.Context, s checkpoint.Storage, committed checkpoint.Ref, keep int) error {
	return retain(ctx, s, []checkpoint.Ref{committed}, keep)
}

// Named is Committed for storage several processes share, where each
// input partition's committed record (its offset metadata in the commit
// group) names the checkpoint that holds its state: no checkpoint any
// record names is deleted, and the newest named one plays committed's
// part. Read the records just before: a checkpoint named since may be
// deleted only if it was not named then, and it is then newer than every
// named one, which Named never touches.
func Named(ctx context.Context, o checkpoint.Objects, named []checkpoint.Ref, keep int) error {
	if len(named) == 0 {
		return fmt.Errorf("retain: no committed record names a checkpoint; deleting nothing")
	}
	return retain(ctx, o, named, keep)
}

// retain deletes what Committed and Named doom.
func retain(ctx context.Context, o checkpoint.Objects, named []checkpoint.Ref, keep int) error {
	if keep < 1 {
		return fmt.Errorf("retain: keep %d, want at least 1", keep)
	}
	names, err := o.List(ctx, layout.Prefix)
	if err != nil {
		return err
	}
	all := checkpointObjects(names, "")
	keepRef := map[checkpoint.Ref]bool{}
	newest := named[0]
	for _, ref := range named {
		if c := all[ref]; c == nil || c.meta == "" {
			meta := layout.MetaName(ref.Run, ref.ID)
			if st, ok := o.(checkpoint.Storage); ok {
				meta = st.Where(meta)
			}
			return fmt.Errorf("retain: committed checkpoint %s has no metadata %s; deleting nothing", ref, meta)
		}
		keepRef[ref] = true
		if compare(newest, ref) < 0 {
			newest = ref
		}
	}
	var older []checkpoint.Ref // complete checkpoints older than the newest named
	var doomed []checkpoint.Ref
	for ref, c := range all {
		if keepRef[ref] || ref.ID > newest.ID {
			continue
		}
		if c.meta == "" {
			doomed = append(doomed, ref) // leftover of a half-written checkpoint
		} else {
			older = append(older, ref)
		}
	}
	slices.SortFunc(older, func(a, b checkpoint.Ref) int { return compare(b, a) }) // newest first
	if len(older) > keep-1 {
		doomed = append(doomed, older[keep-1:]...)
	}
	slices.SortFunc(doomed, compare)
	return remove(ctx, o, all, doomed)
}

// Others is retention of other runs on storage several processes
// share (a job on several processes): it deletes every checkpoint of a run
// other than run that no record in named names and whose metadata was
// written before before, and the state files a crash left without
// metadata in a run that has since written a later checkpoint before
// before. It returns what it deleted, each checkpoint's metadata first.
//
// Soundness rests on the transaction timeout: a record names a checkpoint
// only once the transaction that commits it commits, and that transaction
// was open when the checkpoint's metadata was written and ends within the
// transaction timeout. So with named read just before, and before earlier
// than now by more than the transaction timeout and the commit timeout (and
// a margin for the clocks of the processes that wrote the metadata), no
// checkpoint deleted here can still be named. Metadata that does not
// decode is left alone (its age is unknown), as are leftover state files
// of a run with no later dated checkpoint.
func Others(ctx context.Context, o checkpoint.Objects, named []checkpoint.Ref, run string, before time.Time) ([]checkpoint.Ref, error) {
	names, err := o.List(ctx, layout.Prefix)
	if err != nil {
		return nil, err
	}
	isNamed := map[checkpoint.Ref]bool{}
	for _, ref := range named {
		isNamed[ref] = true
	}
	all := checkpointObjects(names, run)
	// old[r] is the largest id of run r whose metadata was written before
	// before; doomed are the dated, unnamed checkpoints.
	old := map[string]uint64{}
	var doomed []checkpoint.Ref
	for ref, c := range all {
		if c.meta == "" {
			continue
		}
		b, err := o.Get(ctx, c.meta)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue // deleted meanwhile, by another process's retention
			}
			return nil, err
		}
		m, err := checkpoint.DecodeMetadata(c.meta, b)
		if err != nil || !m.Created.Before(before) {
			continue
		}
		if id, ok := old[ref.Run]; !ok || ref.ID > id {
			old[ref.Run] = ref.ID
		}
		if !isNamed[ref] {
			doomed = append(doomed, ref)
		}
	}
	for ref, c := range all {
		if id, ok := old[ref.Run]; ok && c.meta == "" && ref.ID < id {
			doomed = append(doomed, ref) // a crash's leftover, long superseded
		}
	}
	slices.SortFunc(doomed, compare)
	if err := remove(ctx, o, all, doomed); err != nil {
		return nil, err
	}
	return doomed, nil
}

// ckptObjects are the objects of one checkpoint: its metadata ("" if none)
// and its state files.
type ckptObjects struct {
	meta  string
	files []string
}

// checkpointObjects groups names, the objects of a listing, by checkpoint,
// leaving out other objects and the checkpoints of run skip.
func checkpointObjects(names []string, skip string) map[checkpoint.Ref]*ckptObjects {
	all := map[checkpoint.Ref]*ckptObjects{}
	for _, name := range names {
		n, ok := layout.ParseName(name)
		if !ok || (n.Kind != layout.KindMeta && n.Kind != layout.KindState) || (skip != "" && n.Run == skip) {
			continue
		}
		ref := checkpoint.Ref{Run: n.Run, ID: n.ID}
		c := all[ref]
		if c == nil {
			c = &ckptObjects{}
			all[ref] = c
		}
		if n.Kind == layout.KindMeta {
			c.meta = name
		} else {
			c.files = append(c.files, name)
		}
	}
	return all
}

// batcher is storage that deletes several objects in one durable step:
// a checkpoint.Store unlinks them, then fsyncs its directory once.
type batcher interface {
	DeleteAll(ctx context.Context, names []string) error
}

// remove deletes the doomed checkpoints: every one's metadata first, each
// durably gone when Delete returns, so that a crash midway leaves files
// without metadata, which no restore takes and the next retention
// removes; then their files, with one DeleteAll where o has it.
func remove(ctx context.Context, o checkpoint.Objects, all map[checkpoint.Ref]*ckptObjects, doomed []checkpoint.Ref) error {
	var files []string
	for _, ref := range doomed {
		c := all[ref]
		if c.meta != "" {
			if err := o.Delete(ctx, c.meta); err != nil {
				return err
			}
		}
		files = append(files, c.files...)
	}
	if b, ok := o.(batcher); ok {
		return b.DeleteAll(ctx, files)
	}
	for _, f := range files {
		if err := o.Delete(ctx, f); err != nil {
			return err
		}
	}
	return nil
}

// compare orders refs by ID, then run (checkpoint.ListCheckpoints' order).
func compare(a, b checkpoint.Ref) int {
	return cmp.Or(cmp.Compare(a.ID, b.ID), cmp.Compare(a.Run, b.Run))
}

// ErrOtherJob: the storage holds another job's checkpoints (Claim). No
// retry mends it; a storage error on the way to finding out is not it.
var ErrOtherJob = errors.New("the storage holds another job's checkpoints")

// Claim makes o the storage of job: the first job to claim it writes
// its name in the JOB object, and a different job's claim is refused with
// an error naming both (ErrOtherJob). A failure to read or write the
// object is returned as it is, for the caller to retry. Storage several processes share has no lock, and
// retention of other runs (Others) takes every run it finds for the
// job's own: two jobs on one storage would delete each other's
// checkpoints.
func Claim(ctx context.Context, o checkpoint.Objects, job string) error {
	err := o.Put(ctx, layout.JobName, []byte(job))
	if err == nil || !errors.Is(err, fs.ErrExist) {
		return err
	}
	b, err := o.Get(ctx, layout.JobName)
	if err != nil {
		return err
	}
	if string(b) != job {
		where := layout.JobName
		if st, ok := o.(checkpoint.Storage); ok {
			where = st.Where(layout.JobName)
		}
		return fmt.Errorf("retain: %w: it holds the checkpoints of job %q (%s), not of job %q: give each job its own checkpoint directory or prefix", ErrOtherJob, b, where, job)
	}
	return nil
}
