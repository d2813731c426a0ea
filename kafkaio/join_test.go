package kafkaio_test

import (
	"context"
	"encoding/json"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kordproject/kord/internal/rig/kafkatest"
	"github.com/kordproject/kord/kafkaio"
	"github.com/kordproject/kord/keyed"
	"github.com/kordproject/kord/serde"
)

type tier struct {
	Tier int `json:"tier"`
}

type purchase struct {
	ID int `json:"id"`
}

type tiered struct {
	User  string `json:"user"`
	ID    int    `json:"id"`
	Tier  int    `json:"tier"`
	Found bool   `json:"found"`
}

// TestTableJoinCompactedTopic: keyed.TableJoin of a topic of purchases with
// a compacted topic of users' tiers, through kafkaio's sources: the rows
// are keyed by their Kafka record keys (keyed.KeyByRecordKey), a
// tombstone (a null value, read through serde.Nullable) deletes its
// user's row, and the two topics have different partition counts (the
// records are shuffled by key). Each purchase meets its user's row as of
// its record time, and the results land exactly once, on kfake and on the
// real broker.
func TestTableJoinCompactedTopic(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		tiers := c.CreateTopic(t, 3, map[string]string{"cleanup.policy": "compact"})
		purchases, out := c.CreateTopic(t, 2, nil), c.CreateTopic(t, 1, nil)
		at := func(ms int64) time.Time { return time.UnixMilli(1_700_000_000_000 + ms) }
		row := func(user string, tr int, ms int64) *kgo.Record {
			v, _ := json.Marshal(tier{Tier: tr})
			return &kgo.Record{Topic: tiers, Key: []byte(user), Value: v, Timestamp: at(ms)}
		}
		buy := func(user string, id int, ms int64) *kgo.Record {
			v, _ := json.Marshal(purchase{ID: id})
			return &kgo.Record{Topic: purchases, Key: []byte(user), Value: v, Timestamp: at(ms)}
		}
		kc := c.Client(t)
		recs := []*kgo.Record{
			row("u1", 1, 1000), row("u2", 2, 1000), row("u1", 10, 5000),
			{Topic: tiers, Key: []byte("u2"), Value: nil, Timestamp: at(6000)}, // u2 deleted
			buy("u1", 1, 2000), buy("u2", 2, 3000), buy("u3", 3, 4000), buy("u1", 4, 7000), buy("u2", 5, 8000),
		}
		require.NoError(t, kc.ProduceSync(ctx, recs...).FirstErr())

		j := keyed.NewJob(kafkatest.TopicName(t), keyed.Dir(t.TempDir()))
		ps := keyed.FromSource(j, "purchases", 0, kafkaio.NewSource(client(c), purchases, serde.JSON[purchase](), kafkaio.Bounded())).Watermarks(0)
		ts := keyed.FromSource(j, "tiers", 0, kafkaio.NewSource(client(c), tiers, serde.Nullable(serde.JSON[tier]()), kafkaio.Bounded())).Watermarks(0)
		joined := keyed.TableJoin(keyed.KeyByRecordKey("user", ps), keyed.KeyByRecordKey("user", ts), "tier", 0, serde.JSON[purchase](), serde.JSON[tier](),
			func(user []byte, p purchase, row tier, found bool) (tiered, bool) {
				return tiered{User: string(user), ID: p.ID, Tier: row.Tier, Found: found}, true
			})
		keyed.ToSink(joined, "tiered", kafkaio.NewSink(client(c), out, serde.JSON[tiered]()))
		require.NoError(t, j.Run(ctx))

		var got []tiered
		for _, r := range c.ReadAll(t, out, 5, true, 30*time.Second) {
			var x tiered
			require.NoError(t, json.Unmarshal(r.Value, &x))
			got = append(got, x)
		}
		sort.Slice(got, func(a, b int) bool { return got[a].ID < got[b].ID })
		require.Equal(t, []tiered{
			{User: "u1", ID: 1, Tier: 1, Found: true},
			{User: "u2", ID: 2, Tier: 2, Found: true},
			{User: "u3", ID: 3},
			{User: "u1", ID: 4, Tier: 10, Found: true},
			{User: "u2", ID: 5}, // after the tombstone
		}, got)
	})
}
