package checkpoint

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestDecide(t *testing.T) {
	corrupt := errors.New("ckpt-b-3.meta: checksum mismatch")
	valid := func(bad ...CheckpointRef) func(CheckpointRef) error {
		return func(r CheckpointRef) error {
			for _, b := range bad {
				if b == r {
					return corrupt
				}
			}
			return nil
		}
	}
	a0, a2, b2, b3 := CheckpointRef{"a", 0}, CheckpointRef{"a", 2}, CheckpointRef{"b", 2}, CheckpointRef{"b", 3}
	rec := &CommitRecord{Run: "b", Checkpoint: 3}
	for _, tc := range []struct {
		name string
		in   RecoveryInput
		want Decision
		err  error
	}{
		{"fresh", RecoveryInput{Valid: valid()}, Decision{Action: Fresh}, nil},
		{"record and valid checkpoint", RecoveryInput{Record: rec, Local: []CheckpointRef{a2, b3}, Valid: valid()}, Decision{Action: Restore, Ref: b3}, nil},
		{"record, checkpoint corrupt: stop", RecoveryInput{Record: rec, Local: []CheckpointRef{a2, b3}, Valid: valid(b3)}, Decision{}, ErrCommittedMissing},
		{"record, checkpoint missing: stop", RecoveryInput{Record: rec, Local: []CheckpointRef{a2}, Valid: valid(b3)}, Decision{}, ErrCommittedMissing},
		{"record, checkpoint corrupt, duplicates accepted", RecoveryInput{Record: rec, Local: []CheckpointRef{a0, a2, b3}, Valid: valid(b3), AcceptDuplicates: true}, Decision{Action: Restore, Ref: a2, Fallback: true}, nil},
		{"record, nothing older valid", RecoveryInput{Record: rec, Local: []CheckpointRef{a2, b3}, Valid: valid(a2, b3), AcceptDuplicates: true}, Decision{}, ErrCommittedMissing},
		{"no record, marker valid, nothing newer", RecoveryInput{Local: []CheckpointRef{a0, a2}, Marker: &a2, Valid: valid()}, Decision{Action: Restore, Ref: a2}, nil},
		{"no record, marker valid, same id from another run", RecoveryInput{Local: []CheckpointRef{a2, b2}, Marker: &b2, Valid: valid()}, Decision{Action: Restore, Ref: b2}, nil},
		// b3 may have committed after the marker was last written (crash
		// between commit and marker), its record since expired.
		{"no record, marker valid, newer durable checkpoint: stop", RecoveryInput{Local: []CheckpointRef{a2, b3}, Marker: &a2, Valid: valid()}, Decision{}, ErrAmbiguous},
		{"no record, marker valid, newer durable corrupt checkpoint: stop", RecoveryInput{Local: []CheckpointRef{a2, b3}, Marker: &a2, Valid: valid(b3)}, Decision{}, ErrAmbiguous},
		{"no record, marker valid, newer durable checkpoint, duplicates accepted", RecoveryInput{Local: []CheckpointRef{a2, b3}, Marker: &a2, Valid: valid(), AcceptDuplicates: true}, Decision{Action: Restore, Ref: a2, Fallback: true}, nil},
		{"no record, marker names a corrupt checkpoint", RecoveryInput{Local: []CheckpointRef{a2, b3}, Marker: &b3, Valid: valid(b3)}, Decision{}, ErrAmbiguous},
		{"no record, no marker", RecoveryInput{Local: []CheckpointRef{a2, b3}, Valid: valid()}, Decision{}, ErrAmbiguous},
		{"crash during a fresh start", RecoveryInput{Local: []CheckpointRef{a0}, Valid: valid()}, Decision{Action: Fresh}, nil},
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
	_, err := Decide(RecoveryInput{Record: rec, Local: []CheckpointRef{b3}, Valid: valid(b3)})
	require.ErrorContains(t, err, "ckpt-b-3.meta: checksum mismatch", "the error names the file")
	_, err = Decide(RecoveryInput{Local: []CheckpointRef{a2, b3}, Marker: &a2, Valid: valid()})
	for _, s := range []string{"marker names a/2", "newer checkpoint b/3", "AcceptDuplicates"} {
		require.ErrorContains(t, err, s, "the error names the marker, the newer checkpoint and the way out")
	}
}

func TestCommitRecordOf(t *testing.T) {
	r, err := CommitRecordOf([]string{"", ""})
	require.NoError(t, err)
	require.Nil(t, r)
	r, err = CommitRecordOf([]string{"kord1;run=a;ckpt=2", "", "kord1;run=a;ckpt=2"})
	require.NoError(t, err)
	require.Equal(t, &CommitRecord{Run: "a", Checkpoint: 2}, r)
	_, err = CommitRecordOf([]string{"kord1;run=a;ckpt=2", "kord1;run=a;ckpt=3"})
	require.ErrorIs(t, err, ErrRecordsDisagree)
	_, err = CommitRecordOf([]string{"someone else's metadata"})
	require.ErrorIs(t, err, ErrNotCommitRecord)
}

func TestCheckOffsets(t *testing.T) {
	ref := CheckpointRef{"a", 2}
	ckpt := []PartitionOffset{{"in", 0, 10}, {"in", 1, 20}}
	// recorded lists a group's committed offsets; -1: none for that
	// partition.
	recorded := func(offs ...int64) []PartitionOffset {
		var out []PartitionOffset
		for p, o := range offs {
			if o >= 0 {
				out = append(out, PartitionOffset{Topic: "in", Partition: int32(p), Offset: o})
			}
		}
		return out
	}
	require.NoError(t, CheckOffsets("group g", ref, ckpt, recorded(10, 20)))
	// A partition added after the checkpoint: no offset in the group.
	require.NoError(t, CheckOffsets("group g", ref, ckpt, recorded(10, 20, -1)))
	for name, tc := range map[string]struct {
		recorded []PartitionOffset
		msg      string
	}{
		"different offset":                      {recorded(10, 21), "in[1] is at 21 in group g, 20 in checkpoint a/2"},
		"checkpoint partition missing in group": {recorded(10, -1), "in[1] has no offset in group g, 20 in checkpoint a/2"},
		"group partition missing in checkpoint": {recorded(10, 20, 5), "in[2] is at 5 in group g but not in checkpoint a/2"},
	} {
		t.Run(name, func(t *testing.T) {
			err := CheckOffsets("group g", ref, ckpt, tc.recorded)
			require.ErrorIs(t, err, ErrOffsetsDiffer)
			require.ErrorContains(t, err, tc.msg)
		})
	}
}
