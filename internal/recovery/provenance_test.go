package recovery

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kordproject/kord/checkpoint"
)

func TestCheckProvenance(t *testing.T) {
	m := &checkpoint.Metadata{Run: "a", ID: 7, MaxParallelism: 2,
		Offsets: []checkpoint.PartitionOffset{{Topic: "in", Partition: 0, Offset: 5}, {Topic: "in", Partition: 1, Offset: 9}, {Topic: "old", Partition: 0, Offset: 3}},
		Sources: []checkpoint.SourceRef{{Topic: "in", Cluster: "C1", TopicID: "T1"}}}
	for _, tc := range []struct {
		name    string
		current []checkpoint.SourceRef
		unknown []string
		cluster bool // a mismatch of the cluster
		topic   bool // a mismatch of the topic id only
	}{
		{"same", []checkpoint.SourceRef{{Topic: "in", Cluster: "C1", TopicID: "T1"}}, nil, false, false},
		{"other cluster", []checkpoint.SourceRef{{Topic: "in", Cluster: "C2", TopicID: "T9"}}, nil, true, false},
		{"other cluster, same topic id", []checkpoint.SourceRef{{Topic: "in", Cluster: "C2", TopicID: "T1"}}, nil, true, false},
		{"recreated topic", []checkpoint.SourceRef{{Topic: "in", Cluster: "C1", TopicID: "T2"}}, nil, false, true},
		{"cluster unknown now, topic recreated", []checkpoint.SourceRef{{Topic: "in", TopicID: "T2"}}, nil, false, true},
		{"topic id unknown now, same cluster", []checkpoint.SourceRef{{Topic: "in", Cluster: "C1"}}, nil, false, false},
		{"a topic the checkpoint records nothing of", []checkpoint.SourceRef{{Topic: "old", Cluster: "C1", TopicID: "T5"}}, []string{"old"}, false, false},
		{"a new source", []checkpoint.SourceRef{{Topic: "new", Cluster: "C9", TopicID: "T9"}}, nil, false, false},
		{"no sources known now", nil, nil, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			unknown, err := CheckProvenance(m, tc.current)
			require.Equal(t, tc.unknown, unknown)
			if !tc.cluster && !tc.topic {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, checkpoint.ErrProvenance)
			var pe *checkpoint.ProvenanceError
			require.True(t, errors.As(err, &pe))
			require.Equal(t, tc.cluster, pe.OtherCluster())
			require.Equal(t, checkpoint.Ref{Run: "a", ID: 7}, pe.Checkpoint)
			require.Contains(t, err.Error(), "a/7")
			require.Contains(t, err.Error(), `"in"`)
			if tc.cluster {
				require.Contains(t, err.Error(), `cluster "C1"`)
				require.Contains(t, err.Error(), `cluster "`+tc.current[0].Cluster+`"`)
			} else {
				require.Contains(t, err.Error(), `topic id "T1"`)
				require.Contains(t, err.Error(), "deleted and created again")
			}
		})
	}
}
