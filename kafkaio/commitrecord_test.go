package kafkaio

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCommitRecordRoundTrip(t *testing.T) {
	for _, r := range []commitRecord{
		{Run: "0123456789abcdef", Checkpoint: 0},
		{Run: "r", Checkpoint: 18446744073709551615, Job: "user-behavior.counts"},
		{Run: "r", Checkpoint: 3, Job: "j", Instance: "pod-7"},
	} {
		require.NoError(t, r.validate())
		got, err := parseCommitRecord(r.String())
		require.NoError(t, err)
		require.Equal(t, r, got)
	}
	require.Equal(t, "kord1;run=ab;ckpt=7;job=j", commitRecord{Run: "ab", Checkpoint: 7, Job: "j"}.String())
	require.Equal(t, "kord1;run=ab;ckpt=7;job=j;inst=p1", commitRecord{Run: "ab", Checkpoint: 7, Job: "j", Instance: "p1"}.String())
	// A record of a kord before instances parses without one.
	r, err := parseCommitRecord("kord1;run=ab;ckpt=7;job=j")
	require.NoError(t, err)
	require.Empty(t, r.Instance)
}

func TestValidInstance(t *testing.T) {
	for _, id := range []string{"p0", "pod-7", "a.b_c-D9", strings.Repeat("x", 249)} {
		require.True(t, validInstance(id), id)
	}
	for _, id := range []string{"", "a;b", "a=b", "a b", "é", strings.Repeat("x", 250)} {
		require.False(t, validInstance(id), id)
	}
}

func TestCommitRecordRejects(t *testing.T) {
	for _, s := range []string{
		"", "kord1", "kord2;run=a;ckpt=1", "kord1;run=a", "kord1;ckpt=1", "kord1;run=;ckpt=1",
		"kord1;run=a;ckpt=01", "kord1;run=a;ckpt=-1", "kord1;run=a;ckpt=1;ckpt=2", "kord1;run=a;ckpt=1;junk",
		"kord1;run=a;ckpt=99999999999999999999",
	} {
		_, err := parseCommitRecord(s)
		require.ErrorIs(t, err, errNotCommitRecord, "%q", s)
	}
	// Unknown keys of a later minor addition are ignored.
	r, err := parseCommitRecord("kord1;run=a;ckpt=1;future=x")
	require.NoError(t, err)
	require.Equal(t, commitRecord{Run: "a", Checkpoint: 1}, r)
	require.Error(t, commitRecord{Run: "a;b"}.validate())
	require.Error(t, commitRecord{Run: "a", Job: "x=y"}.validate())
	require.Error(t, commitRecord{Run: "a", Instance: "x;y"}.validate())
	_, err = parseCommitRecord("kord1;run=a;ckpt=1;inst=")
	require.ErrorIs(t, err, errNotCommitRecord)
}

func FuzzParseCommitRecord(f *testing.F) {
	f.Add("kord1;run=0123;ckpt=5;job=j")
	f.Add("kord1;run=a;ckpt=0")
	f.Add(";;==")
	f.Fuzz(func(t *testing.T, s string) {
		r, err := parseCommitRecord(s)
		if err != nil {
			return
		}
		// Whatever parses re-encodes to something that parses the same.
		again, err := parseCommitRecord(r.String())
		if err != nil || again != r {
			t.Fatalf("%q -> %+v -> %q -> %+v, %v", s, r, r.String(), again, err)
		}
	})
}

func TestCommitRecordOf(t *testing.T) {
	r, err := commitRecordOf([]string{"", ""})
	require.NoError(t, err)
	require.Nil(t, r)
	r, err = commitRecordOf([]string{"kord1;run=a;ckpt=2", "", "kord1;run=a;ckpt=2"})
	require.NoError(t, err)
	require.Equal(t, &commitRecord{Run: "a", Checkpoint: 2}, r)
	_, err = commitRecordOf([]string{"kord1;run=a;ckpt=2", "kord1;run=a;ckpt=3"})
	require.ErrorIs(t, err, errRecordsDisagree)
	_, err = commitRecordOf([]string{"someone else's metadata"})
	require.ErrorIs(t, err, errNotCommitRecord)
}
