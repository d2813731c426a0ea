package filesink_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/kordproject/kord/checkpoint"
	"github.com/kordproject/kord/filesink"
	"github.com/kordproject/kord/keyed"
	"github.com/kordproject/kord/keyed/connector"
	"github.com/kordproject/kord/vfs"
)

// benchRow is a row of the main job's results, with parquet tags.
type benchRow struct {
	UUID   string `json:"uuid" parquet:"uuid"`
	Seq    int64  `json:"seq" parquet:"seq"`
	Count  int64  `json:"count" parquet:"count"`
	Action string `json:"action" parquet:"action"`
}

// BenchmarkLand: b.N rows from a memory source through a passing stage to
// a memory sink standing for Kafka, with and without a file sink beside
// it on the OS's file system (a temporary directory), by format and with
// compaction; checkpoint every 1 s. ns/op is per row.
func BenchmarkLand(b *testing.B) {
	actions := []string{"view", "click", "add_to_cart", "purchase"}
	for _, tc := range []struct {
		name   string
		format filesink.Format[benchRow]
		opts   []filesink.Opt
	}{
		{"kafka-only", nil, nil},
		{"jsonl-zstd", filesink.JSONLines[benchRow](filesink.Zstd), nil},
		{"parquet-zstd", filesink.Parquet[benchRow](filesink.Zstd), nil},
		{"parquet-zstd-compact", filesink.Parquet[benchRow](filesink.Zstd), []filesink.Opt{filesink.CompactEvery(time.Minute)}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			src := keyed.NewMemorySource[benchRow]("events", 4, true)
			for i := range b.N {
				u := i % 10_000
				src.Append(int32(u%4), []byte(fmt.Sprint(u)), benchRow{UUID: fmt.Sprintf("%08x-0000-4000-8000-%012x", u, u), Seq: int64(i / 10_000), Count: int64(i/10_000 + 1), Action: actions[i%4]})
			}
			dir := b.TempDir()
			j := keyed.NewJob("bench", keyed.Dir(b.TempDir()), keyed.CheckpointInterval(time.Second))
			rows := keyed.ProcessFunc(keyed.ByPartition(keyed.FromSource(j, "events", 2, connector.Source[benchRow](src))), "pass", 2,
				func(_ []byte, r benchRow, out *keyed.Collector[benchRow]) error { out.Emit(r); return nil })
			keyed.ToSink(rows, "kafka", connector.Sink[benchRow](&discard{}))
			if tc.format != nil {
				keyed.ToSink(rows, "lake", connector.Sink[benchRow](filesink.New(filesink.Dir(vfs.Default(), dir), tc.format,
					append([]filesink.Opt{filesink.BucketBy(func(r benchRow) string { return "action=" + r.Action })}, tc.opts...)...)))
			}
			b.ResetTimer()
			if err := j.Run(context.Background()); err != nil {
				b.Fatal(err)
			}
		})
	}
}

// discard is a first sink that keeps nothing and records each commit.
type discard struct{ rec *connector.Recorded }

func (d *discard) Reset(context.Context, connector.SinkInfo) error { return nil }
func (d *discard) Write(context.Context, uint64, benchRow) error   { return nil }
func (d *discard) Commit(_ context.Context, ref checkpoint.Ref, offsets []checkpoint.PartitionOffset) error {
	d.rec = &connector.Recorded{Ref: ref, Offsets: offsets, Where: "discard"}
	return nil
}
func (d *discard) Recorded(context.Context) (*connector.Recorded, error) { return d.rec, nil }
