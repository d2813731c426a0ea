package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/kordproject/kord/checkpoint"
	"github.com/kordproject/kord/internal/layout"
)

// The statuses of a checkpoint.
const (
	// committed: the one the job restores from (Kafka's commit record with
	// --job and --brokers, else the directory's local marker).
	statusCommitted = "committed"
	// durable: written whole after the committed one; its commit may be
	// under way (a running job), or its outcome was never known.
	statusDurable = "durable"
	// orphaned: written whole but never committed, and older than the
	// committed one: no restore will use it, retention removes it.
	statusOrphaned = "orphaned"
	// incomplete: its metadata cannot be read, or a file it names is gone.
	statusIncomplete = "incomplete"
)

// ckptInfo is one checkpoint as checkpoints and inspect show it.
type ckptInfo struct {
	Ref       string                       `json:"checkpoint"`
	Run       string                       `json:"run"`
	ID        uint64                       `json:"id"`
	Status    string                       `json:"status"`
	Created   time.Time                    `json:"created,omitzero"`
	Bytes     int64                        `json:"bytes"`
	Files     int                          `json:"files"`
	Offsets   []checkpoint.PartitionOffset `json:"offsets,omitempty"`
	Sources   []checkpoint.SourceRef       `json:"sources,omitempty"`
	Watermark *time.Time                   `json:"watermark,omitempty"`
	Problem   string                       `json:"problem,omitempty"`
}

func (c *cli) checkpointsCmd() *cobra.Command {
	cmd := c.storageCmd("checkpoints", "List a job's checkpoints with their status, time, size, offsets and provenance", func(ctx context.Context, s checkpoint.Storage) error {
		committed, by, err := c.committed(ctx, s, c.job)
		if err != nil {
			return err
		}
		infos, err := listInfos(ctx, s, committed)
		if err != nil {
			return err
		}
		return c.emit(map[string]any{"storage": s.Where(""), "committedBy": by, "checkpoints": infos}, func(w io.Writer) {
			fmt.Fprintf(w, "%s (committed per %s)\n", s.Where(""), by)
			tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "CHECKPOINT\tSTATUS\tCREATED\tSIZE\tFILES\tOFFSETS\tSOURCES")
			for _, in := range infos {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%s\n", in.Ref, in.Status, when(in.Created), in.Bytes, in.Files, offsetsText(in.Offsets), sourcesText(in.Sources))
				if in.Problem != "" {
					fmt.Fprintf(tw, "\t  %s\n", in.Problem)
				}
			}
			tw.Flush()
		})
	})
	c.clusterFlags(cmd)
	return cmd
}

// committed returns the checkpoint the job restores from and what says so:
// Kafka's commit record with job and a cluster, else the local marker.
func (c *cli) committed(ctx context.Context, s checkpoint.Storage, job string) (*checkpoint.Ref, string, error) {
	if job != "" && (c.brokers != "" || c.properties != "") {
		cl, err := c.client()
		if err != nil {
			return nil, "", err
		}
		st, err := commitStatus(ctx, cl, job)
		if err != nil {
			return nil, "", err
		}
		if st.Checkpoint == nil {
			return nil, "Kafka's commit group " + st.Group + " (no record)", nil
		}
		return st.Checkpoint, "Kafka's commit group " + st.Group, nil
	}
	ref, ok, err := checkpoint.ReadCommitted(ctx, s)
	if err != nil {
		return nil, "", &exitError{1, err}
	}
	if !ok {
		return nil, "the local marker (none)", nil
	}
	return &ref, "the local marker " + s.Where(layout.CommittedName), nil
}

// listInfos reads every checkpoint's metadata and checks its files are
// there.
func listInfos(ctx context.Context, s checkpoint.Storage, committed *checkpoint.Ref) ([]ckptInfo, error) {
	refs, err := checkpoint.ListCheckpoints(ctx, s)
	if err != nil {
		return nil, &exitError{2, fmt.Errorf("%s: %w", s.Where(""), err)}
	}
	names, err := s.List(ctx, "")
	if err != nil {
		return nil, &exitError{2, fmt.Errorf("%s: %w", s.Where(""), err)}
	}
	present := map[string]bool{}
	for _, n := range names {
		present[n] = true
	}
	var created time.Time // the committed one's
	infos := make([]ckptInfo, 0, len(refs))
	for _, ref := range refs {
		in := ckptInfo{Ref: refText(ref), Run: ref.Run, ID: ref.ID}
		m, err := readMeta(ctx, s, ref)
		if err != nil {
			in.Status, in.Problem = statusIncomplete, err.Error()
			infos = append(infos, in)
			continue
		}
		in.Created, in.Offsets, in.Sources, in.Files = m.Created, m.Offsets, m.Sources, len(m.Files)
		if m.Watermark != nil {
			t := time.UnixMilli(*m.Watermark)
			in.Watermark = &t
		}
		var missing []string
		for _, f := range m.Files {
			in.Bytes += f.Size
			if !present[f.Name] {
				missing = append(missing, s.Where(f.Name))
			}
		}
		if len(missing) > 0 && gone(ctx, s, ref) {
			continue // removed meanwhile by a running job's retention
		}
		if len(missing) > 0 {
			in.Status, in.Problem = statusIncomplete, fmt.Sprintf("missing %d of its %d files: %s", len(missing), len(m.Files), strings.Join(missing, ", "))
		}
		if committed != nil && ref == *committed {
			created = m.Created
			if in.Status == "" {
				in.Status = statusCommitted
			} else {
				in.Problem += " (it is the committed checkpoint: a restore fails; run kord verify)"
			}
		}
		infos = append(infos, in)
	}
	if committed != nil && created.IsZero() {
		found := false
		for _, in := range infos {
			found = found || in.Run == committed.Run && in.ID == committed.ID
		}
		if !found {
			infos = append(infos, ckptInfo{Ref: refText(*committed), Run: committed.Run, ID: committed.ID, Status: statusIncomplete,
				Problem: "the committed checkpoint's metadata is not in " + s.Where("") + ": a restore fails (checkpoint.ErrCommittedMissing)"})
		}
	}
	for i := range infos {
		in := &infos[i]
		if in.Status != "" {
			continue
		}
		switch {
		case committed == nil || in.Created.After(created):
			in.Status = statusDurable
		default:
			in.Status = statusOrphaned
		}
	}
	return infos, nil
}

// readMeta reads and decodes ref's metadata.
func readMeta(ctx context.Context, s checkpoint.Storage, ref checkpoint.Ref) (*checkpoint.Metadata, error) {
	name := layout.MetaName(ref.Run, ref.ID)
	b, err := s.Get(ctx, name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("no metadata %s", s.Where(name))
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", s.Where(name), err)
	}
	return checkpoint.DecodeMetadata(s.Where(name), b)
}

// pick returns the checkpoint --checkpoint names ("run/id"), or else the
// committed one, or else the newest.
func pick(ctx context.Context, s checkpoint.Storage, spec string) (checkpoint.Ref, error) {
	if spec != "" {
		run, id, ok := strings.Cut(spec, "/")
		n, err := strconv.ParseUint(id, 10, 64)
		if !ok || err != nil {
			return checkpoint.Ref{}, usagef("--checkpoint %s: want RUN/ID, as kord checkpoints prints", spec)
		}
		return checkpoint.Ref{Run: run, ID: n}, nil
	}
	if ref, ok, err := checkpoint.ReadCommitted(ctx, s); err == nil && ok {
		return ref, nil
	}
	refs, err := checkpoint.ListCheckpoints(ctx, s)
	if err != nil {
		return checkpoint.Ref{}, &exitError{2, fmt.Errorf("%s: %w", s.Where(""), err)}
	}
	if len(refs) == 0 {
		return checkpoint.Ref{}, &exitError{1, fmt.Errorf("%s holds no checkpoint: is it the job's checkpoint directory (keyed.Dir)?", s.Where(""))}
	}
	newest := refs[0]
	var at time.Time
	for _, r := range refs {
		if m, err := readMeta(ctx, s, r); err == nil && m.Created.After(at) {
			newest, at = r, m.Created
		}
	}
	return newest, nil
}

func refText(r checkpoint.Ref) string { return r.Run + "/" + strconv.FormatUint(r.ID, 10) }

func when(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02 15:04:05.000")
}

func offsetsText(offs []checkpoint.PartitionOffset) string {
	sorted := append([]checkpoint.PartitionOffset(nil), offs...)
	sort.Slice(sorted, func(a, b int) bool {
		if sorted[a].Topic != sorted[b].Topic {
			return sorted[a].Topic < sorted[b].Topic
		}
		return sorted[a].Partition < sorted[b].Partition
	})
	parts := make([]string, len(sorted))
	for i, o := range sorted {
		parts[i] = fmt.Sprintf("%s[%d]@%d", o.Topic, o.Partition, o.Offset)
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, " ")
}

func sourcesText(srcs []checkpoint.SourceRef) string {
	parts := make([]string, len(srcs))
	for i, s := range srcs {
		parts[i] = fmt.Sprintf("%s (cluster %s, topic id %s)", s.Topic, orDash(s.Cluster), orDash(s.TopicID))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
