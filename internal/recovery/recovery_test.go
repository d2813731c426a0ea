package recovery

import (
	"fmt"
	"io/fs"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kordproject/kord/checkpoint"
)

func TestDecide(t *testing.T) {
	corrupt := &checkpoint.CorruptError{Path: "ckpt-b-3.meta", Reason: "checksum mismatch"}
	valid := func(bad ...checkpoint.Ref) func(checkpoint.Ref) error {
		return func(r checkpoint.Ref) error {
			for _, b := range bad {
				if b == r {
					return corrupt
				}
			}
			return nil
		}
	}
	a0, a2, b2, b3 := checkpoint.Ref{Run: "a", ID: 0}, checkpoint.Ref{Run: "a", ID: 2}, checkpoint.Ref{Run: "b", ID: 2}, checkpoint.Ref{Run: "b", ID: 3}
	rec := &b3
	for _, tc := range []struct {
		name string
		in   Input
		want Decision
		err  error
	}{
		{"fresh", Input{Valid: valid()}, Decision{Action: Fresh}, nil},
		{"record and valid checkpoint", Input{Recorded: rec, Local: []checkpoint.Ref{a2, b3}, Valid: valid()}, Decision{Action: Restore, Ref: b3}, nil},
		{"record, checkpoint corrupt: stop", Input{Recorded: rec, Local: []checkpoint.Ref{a2, b3}, Valid: valid(b3)}, Decision{}, checkpoint.ErrCommittedMissing},
		{"record, checkpoint missing: stop", Input{Recorded: rec, Local: []checkpoint.Ref{a2}, Valid: valid(b3)}, Decision{}, checkpoint.ErrCommittedMissing},
		{"record, checkpoint corrupt, duplicates accepted", Input{Recorded: rec, Local: []checkpoint.Ref{a0, a2, b3}, Valid: valid(b3), AcceptDuplicates: true}, Decision{Action: Restore, Ref: a2, Fallback: true}, nil},
		{"record, nothing older valid", Input{Recorded: rec, Local: []checkpoint.Ref{a2, b3}, Valid: valid(a2, b3), AcceptDuplicates: true}, Decision{}, checkpoint.ErrCommittedMissing},
		{"no record, marker valid, nothing newer", Input{Local: []checkpoint.Ref{a0, a2}, Marker: &a2, Valid: valid()}, Decision{Action: Restore, Ref: a2}, nil},
		{"no record, marker valid, same id from another run", Input{Local: []checkpoint.Ref{a2, b2}, Marker: &b2, Valid: valid()}, Decision{Action: Restore, Ref: b2}, nil},
		// b3 may have committed after the marker was last written (crash
		// between commit and marker), its record since expired.
		{"no record, marker valid, newer durable checkpoint: stop", Input{Local: []checkpoint.Ref{a2, b3}, Marker: &a2, Valid: valid()}, Decision{}, checkpoint.ErrAmbiguous},
		{"no record, marker valid, newer durable corrupt checkpoint: stop", Input{Local: []checkpoint.Ref{a2, b3}, Marker: &a2, Valid: valid(b3)}, Decision{}, checkpoint.ErrAmbiguous},
		{"no record, marker valid, newer durable checkpoint, duplicates accepted", Input{Local: []checkpoint.Ref{a2, b3}, Marker: &a2, Valid: valid(), AcceptDuplicates: true}, Decision{Action: Restore, Ref: a2, Fallback: true}, nil},
		{"no record, marker names a corrupt checkpoint", Input{Local: []checkpoint.Ref{a2, b3}, Marker: &b3, Valid: valid(b3)}, Decision{}, checkpoint.ErrAmbiguous},
		{"no record, no marker", Input{Local: []checkpoint.Ref{a2, b3}, Valid: valid()}, Decision{}, checkpoint.ErrAmbiguous},
		{"crash during a fresh start", Input{Local: []checkpoint.Ref{a0}, Valid: valid()}, Decision{Action: Fresh}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Decide(tc.in)
			if tc.err != nil {
				require.ErrorIs(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			got.Note = ""
			require.Equal(t, tc.want, got)
		})
	}
	_, err := Decide(Input{Recorded: rec, Local: []checkpoint.Ref{b3}, Valid: valid(b3)})
	require.ErrorContains(t, err, "ckpt-b-3.meta: checksum mismatch", "the error names the file")
	_, err = Decide(Input{Local: []checkpoint.Ref{a2, b3}, Marker: &a2, Valid: valid()})
	for _, s := range []string{"marker names a/2", "newer checkpoint b/3", "AcceptDuplicates"} {
		require.ErrorContains(t, err, s, "the error names the marker, the newer checkpoint and the way out")
	}
}

// TestDecideReadFailure: a checkpoint the storage fails to read (an EIO,
// a bucket that timed out) is neither missing nor corrupt: Decide returns
// the failure, retryable, instead of stopping with ErrCommittedMissing or
// falling back to an older checkpoint and its duplicates.
func TestDecideReadFailure(t *testing.T) {
	eio := &fs.PathError{Op: "read", Path: "/ckpt/ckpt-b-3.meta", Err: syscall.EIO}
	a2, b3 := checkpoint.Ref{Run: "a", ID: 2}, checkpoint.Ref{Run: "b", ID: 3}
	fails := func(bad checkpoint.Ref, err error) func(checkpoint.Ref) error {
		return func(r checkpoint.Ref) error {
			if r == bad {
				return err
			}
			return nil
		}
	}
	for name, in := range map[string]Input{
		"the recorded one":                      {Recorded: &b3, Local: []checkpoint.Ref{a2, b3}, Valid: fails(b3, eio)},
		"the recorded one, duplicates accepted": {Recorded: &b3, Local: []checkpoint.Ref{a2, b3}, Valid: fails(b3, eio), AcceptDuplicates: true},
		"the older one to fall back to": {Recorded: &b3, Local: []checkpoint.Ref{a2, b3}, AcceptDuplicates: true,
			Valid: func(r checkpoint.Ref) error {
				if r == b3 {
					return &checkpoint.CorruptError{Path: "ckpt-b-3.meta", Reason: "checksum mismatch"}
				}
				return eio
			}},
		"the marker's": {Local: []checkpoint.Ref{a2}, Marker: &a2, Valid: fails(a2, eio)},
	} {
		t.Run(name, func(t *testing.T) {
			d, err := Decide(in)
			require.ErrorIs(t, err, syscall.EIO)
			require.ErrorContains(t, err, "/ckpt/ckpt-b-3.meta")
			require.NotErrorIs(t, err, checkpoint.ErrCommittedMissing)
			require.NotErrorIs(t, err, checkpoint.ErrAmbiguous)
			require.False(t, Unusable(err))
			require.Zero(t, d)
		})
	}
	for _, err := range []error{
		fmt.Errorf("%w: checkpoint b/3: no metadata", checkpoint.ErrMissing),
		&checkpoint.CorruptError{Path: "x", Reason: "truncated"},
		fmt.Errorf("%w: version 9", checkpoint.ErrUnsupportedVersion),
	} {
		require.True(t, Unusable(err), "%v", err)
	}
}

func TestCheckOffsets(t *testing.T) {
	ref := checkpoint.Ref{Run: "a", ID: 2}
	ckpt := []checkpoint.PartitionOffset{{Topic: "in", Partition: 0, Offset: 10}, {Topic: "in", Partition: 1, Offset: 20}}
	// recorded lists a group's committed offsets; -1: none for that
	// partition.
	recorded := func(offs ...int64) []checkpoint.PartitionOffset {
		var out []checkpoint.PartitionOffset
		for p, o := range offs {
			if o >= 0 {
				out = append(out, checkpoint.PartitionOffset{Topic: "in", Partition: int32(p), Offset: o})
			}
		}
		return out
	}
	require.NoError(t, CheckOffsets("group g", ref, ckpt, recorded(10, 20)))
	// A partition added after the checkpoint: no offset in the group.
	require.NoError(t, CheckOffsets("group g", ref, ckpt, recorded(10, 20, -1)))
	for name, tc := range map[string]struct {
		recorded []checkpoint.PartitionOffset
		msg      string
	}{
		"different offset":                      {recorded(10, 21), "in[1] is at 21 in group g, 20 in checkpoint a/2"},
		"checkpoint partition missing in group": {recorded(10, -1), "in[1] has no offset in group g, 20 in checkpoint a/2"},
		"group partition missing in checkpoint": {recorded(10, 20, 5), "in[2] is at 5 in group g but not in checkpoint a/2"},
	} {
		t.Run(name, func(t *testing.T) {
			err := CheckOffsets("group g", ref, ckpt, tc.recorded)
			require.ErrorIs(t, err, checkpoint.ErrOffsetsDiffer)
			require.ErrorContains(t, err, tc.msg)
		})
	}
}
