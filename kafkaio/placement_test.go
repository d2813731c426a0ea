package kafkaio_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kordproject/kord/internal/rig/kafkatest"
	"github.com/kordproject/kord/kafkaio"
	"github.com/kordproject/kord/keyed"
	"github.com/kordproject/kord/keyed/connector"
	"github.com/kordproject/kord/metrics"
	"github.com/kordproject/kord/partitioner"
	"github.com/kordproject/kord/serde"
)

// TestCheckPlacement, on kfake and the real broker: an input written as
// goka's emitters write it (sarama's FNV-1a rule), read by a job keyed by
// partition that checks it.
//   - Checking for Java's rule and failing: the job fails at the first
//     misplaced record, naming its topic, partition, offset, key and the
//     rule.
//   - Checking for sarama's rule: the job runs to the end.
//   - Checking for Java's rule and reporting: the job runs to the end and
//     counts exactly the records Java's rule places elsewhere.
//
// And a sink with Placement(SaramaHash) writes each result where sarama's
// rule places its key.
func TestCheckPlacement(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		const parts, n = 3, 120
		in := c.CreateTopic(t, parts, nil)
		kc := c.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		seq := map[string]int64{}
		misplaced := 0
		for i := range n {
			u := fmt.Sprintf("user-%d", i%20)
			v, err := json.Marshal(event{UUID: u, Seq: seq[u]})
			require.NoError(t, err)
			seq[u]++
			p := partitioner.SaramaHash.Partition([]byte(u), parts)
			if p != partitioner.Java.Partition([]byte(u), parts) {
				misplaced++
			}
			require.NoError(t, kc.ProduceSync(ctx, &kgo.Record{Topic: in, Partition: p, Key: []byte(u), Value: v}).FirstErr())
		}
		require.NotZero(t, misplaced, "some keys land elsewhere under Java's rule")

		cl := client(c)
		run := func(check kafkaio.Opt, sinkOpts ...kafkaio.Opt) (*keyed.Job, string, error) {
			out := c.CreateTopic(t, parts, nil)
			name := strings.ReplaceAll(kafkatest.TopicName(t), "/", ".")
			j := keyed.NewJob(name, keyed.Dir(t.TempDir()), keyed.CheckpointInterval(100*time.Millisecond))
			s := keyed.FromSource(j, "events", 1, kafkaio.NewSource(cl, in, serde.JSON[event](), kafkaio.Bounded(), check))
			o := keyed.Process(keyed.ByPartition(s), "count", 1, func() keyed.Operator[event, result] { return &counter{} })
			keyed.ToSink(o, "results", connector.Sink[result](kafkaio.NewSink(cl, out, serde.JSON[result](), append([]kafkaio.Opt{byUUID}, sinkOpts...)...)))
			rctx, rcancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer rcancel()
			return j, out, j.Run(rctx)
		}

		_, _, err := run(kafkaio.CheckPlacement(partitioner.Java, true))
		require.Error(t, err)
		require.ErrorIs(t, err, keyed.ErrPermanent)
		require.Regexp(t, quoteDots(in)+`\[\d\] offset \d+: key "user-\d+" is in partition \d, where the java rule places it in partition \d of 3`, err.Error())

		_, out, err := run(kafkaio.CheckPlacement(partitioner.SaramaHash, true), kafkaio.Placement(partitioner.SaramaHash))
		require.NoError(t, err)
		for _, r := range c.ReadAll(t, out, n, true, time.Minute) {
			require.Equal(t, partitioner.SaramaHash.Partition(r.Key, parts), r.Partition, "the sink placed %s by sarama's rule", r.Key)
		}

		j, _, err := run(kafkaio.CheckPlacement(partitioner.Java, false))
		require.NoError(t, err)
		var counted float64
		j.Collect(func(s metrics.Sample) {
			if s.Name == "kord_source_misplaced_records_total" {
				counted = s.Value
			}
		})
		require.Equal(t, float64(misplaced), counted)
	})
}

func quoteDots(s string) string { return strings.ReplaceAll(s, ".", `\.`) }
