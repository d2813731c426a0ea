package layout

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestNames(t *testing.T) {
	require.Equal(t, "ckpt-00ff-00000000000000000007.meta", MetaName("00ff", 7))
	require.Equal(t, "ckpt-ab-00000000000000000003.op-count-kg-00005.avro", StateFileName("ab", 3, "count", 5))
	require.Equal(t, "ckpt-ab-18446744073709551615.meta", MetaName("ab", 1<<64-1))
	require.Equal(t, "ckpt-ab-00000000000000000003.", CheckpointPrefix("ab", 3))
}

func TestParseName(t *testing.T) {
	for _, tc := range []struct {
		name string
		want Name
		ok   bool
	}{
		{"COMMITTED", Name{Kind: KindCommitted}, true},
		{"ckpt-0123456789abcdef-00000000000000000042.meta", Name{Kind: KindMeta, Run: "0123456789abcdef", ID: 42}, true},
		{"ckpt-a-00000000000000000000.op-count-kg-00000.avro", Name{Kind: KindState, Run: "a", ID: 0, Operator: "count", KeyGroup: 0}, true},
		{"ckpt-a-00000000000000000001.op-x.y_Z-1-kg-99999.avro", Name{Kind: KindState, Run: "a", ID: 1, Operator: "x.y_Z-1", KeyGroup: 99999}, true},
		// An operator name may itself contain "-kg-": the key group is parsed from the end.
		{"ckpt-a-00000000000000000001.op-a-kg-00001-kg-00002.avro", Name{Kind: KindState, Run: "a", ID: 1, Operator: "a-kg-00001", KeyGroup: 2}, true},
		{"ckpt-a-18446744073709551615.meta", Name{Kind: KindMeta, Run: "a", ID: 1<<64 - 1}, true},

		{"LOCK", Name{}, false},
		{".tmp.ckpt-a-00000000000000000001.meta.3", Name{}, false},
		{"ckpt-A-00000000000000000001.meta", Name{}, false},                                 // uppercase run
		{"ckpt--00000000000000000001.meta", Name{}, false},                                  // empty run
		{"ckpt-a-0000000000000000001.meta", Name{}, false},                                  // 19 digits
		{"ckpt-a-000000000000000000001.meta", Name{}, false},                                // 21 digits
		{"ckpt-a-99999999999999999999.meta", Name{}, false},                                 // overflows uint64
		{"ckpt-a-0000000000000000000x.meta", Name{}, false},                                 // not digits
		{"ckpt-a-00000000000000000001.meta2", Name{}, false},                                // suffix
		{"ckpt-a-00000000000000000001.op--kg-00001.avro", Name{}, false},                    // empty operator
		{"ckpt-a-00000000000000000001.op-a/b-kg-00001.avro", Name{}, false},                 // bad operator char
		{"ckpt-a-00000000000000000001.op-a-kg-0001.avro", Name{}, false},                    // 4-digit key group
		{"ckpt-a-00000000000000000001.op-a-kg-00001.avr", Name{}, false},                    // suffix
		{"ckpt-a-00000000000000000001.op-a-kg-00001", Name{}, false},                        // no suffix
		{"ckpt-a-00000000000000000001.op-kg-00001.avro", Name{}, false},                     // no operator
		{"ckpt-0123456789abcdef0123456789abcdef0-00000000000000000001.meta", Name{}, false}, // run too long
		{"", Name{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := ParseName(tc.name)
			require.Equal(t, tc.ok, ok)
			require.Equal(t, tc.want, got)
			if ok {
				require.Equal(t, tc.name, got.String())
			}
		})
	}
}

func TestValidate(t *testing.T) {
	require.NoError(t, ValidateRun("0123456789abcdef"))
	require.Error(t, ValidateRun(""))
	require.Error(t, ValidateRun("xyz"))
	require.Error(t, ValidateRun("ABCD"))
	require.NoError(t, ValidateOperator("keyed.count-1_v2"))
	require.Error(t, ValidateOperator(""))
	require.Error(t, ValidateOperator("a b"))
	require.Error(t, ValidateOperator("a/b"))
}

func FuzzParseName(f *testing.F) {
	for _, s := range []string{
		"COMMITTED", "LOCK", MetaName("ab", 1), StateFileName("0123456789abcdef", 12, "op.x-kg-1", 7),
		"ckpt-a-99999999999999999999.meta", ".tmp.x.1",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, ok := ParseName(s)
		if !ok {
			if n != (Name{}) {
				t.Fatalf("ParseName(%q) = %+v, false: want zero Name", s, n)
			}
			return
		}
		if got := n.String(); got != s {
			t.Fatalf("ParseName(%q).String() = %q", s, got)
		}
		if n2, ok := ParseName(n.String()); !ok || n2 != n {
			t.Fatalf("re-parse of %q: %+v, %v", s, n2, ok)
		}
	})
}

func TestSplitOperator(t *testing.T) {
	for _, tc := range []struct {
		in, op, state string
		ok            bool
	}{
		{"count.total", "count", "total", true},
		{"op_1-a.st-2", "op_1-a", "st-2", true},
		{"count", "", "", false},  // an operator instance's own state
		{"a.b.c", "", "", false},  // more than one '.'
		{".total", "", "", false}, // no operator
		{"count.", "", "", false}, // no state
		{"", "", "", false},
	} {
		op, state, ok := SplitOperator(tc.in)
		require.Equal(t, tc.ok, ok, tc.in)
		require.Equal(t, tc.op, op, tc.in)
		require.Equal(t, tc.state, state, tc.in)
		if ok {
			require.NoError(t, ValidateOperator(tc.in), "a split name is a valid operator slot")
		}
	}
}
