package keyed_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kordproject/kord/keyed"
	"github.com/kordproject/kord/keyed/connector"
	"github.com/kordproject/kord/partitioner"
	"github.com/kordproject/kord/vfs"
)

// stamper is the counter, noting for every event the time and key its
// Collector reports.
type stamper struct {
	counter
	seen *sync.Map // "uuid/seq" → [2]any{time.Time, string key}
}

func (s *stamper) Process(key []byte, e event, out *keyed.Collector[result]) error {
	s.seen.Store(fmt.Sprintf("%s/%d", e.UUID, e.Seq), [2]any{out.Timestamp(), string(out.Key())})
	return s.counter.Process(key, e, out)
}

// recordTime is the Kafka timestamp the tests give an event.
func recordTime(e event, p int32) time.Time {
	return time.UnixMilli(1_700_000_000_000 + e.Seq*1000 + int64(p))
}

// stampedInput is input with every record's timestamp set (recordTime).
func stampedInput(partitions, keys, n int) (*keyed.MemorySource[event], map[string]int64) {
	src := keyed.NewMemorySource[event]("events", partitions, true)
	seq := map[string]int64{}
	for i := 0; i < n; i++ {
		u := fmt.Sprintf("user-%04d", i%keys)
		p := partitioner.KeyPartition([]byte(u), partitions)
		e := event{UUID: u, Seq: seq[u]}
		src.AppendAt(p, []byte(u), e, recordTime(e, p))
		seq[u]++
	}
	return src, seq
}

// TestRecordTimestamps: every record reaches its operator with its own
// time (Collector.Timestamp) and key (Collector.Key), in both keying
// modes: the record's Kafka timestamp, or with Stream.Timestamps what the
// extractor takes from the value.
func TestRecordTimestamps(t *testing.T) {
	for _, c := range []struct {
		name    string
		keyBy   bool
		extract bool
	}{{"by partition", false, false}, {"key by", true, false}, {"key by, extractor", true, true}, {"by partition, extractor", false, true}} {
		t.Run(c.name, func(t *testing.T) {
			src, want := stampedInput(4, 50, 5_000)
			seen := &sync.Map{}
			j := keyed.NewJob("stamps", keyed.FS(vfs.NewMem()), keyed.Dir("/ckpt"), keyed.CheckpointInterval(5*time.Millisecond))
			s := keyed.FromSource(j, "events", 2, connector.Source[event](src))
			if c.extract {
				s = s.Timestamps(func(e event, rt time.Time) time.Time {
					require.False(t, rt.IsZero(), "the extractor gets the record's own timestamp")
					return time.UnixMilli(2_000_000_000_000 + e.Seq)
				})
			}
			k := keyed.ByPartition(s)
			if c.keyBy {
				k = keyed.KeyBy("uuid", func(e event) []byte { return []byte(e.UUID) }, s)
			}
			sink := keyed.NewMemorySink[result]()
			out := keyed.Process(k, "count", 3, func() keyed.Operator[event, result] { return &stamper{seen: seen} })
			keyed.ToSink(out, "results", connector.Sink[result](sink))
			require.NoError(t, j.Run(context.Background()))
			checkOutput(t, sink.Committed(), want)
			n := 0
			for u, count := range want {
				for q := int64(0); q < count; q++ {
					v, ok := seen.Load(fmt.Sprintf("%s/%d", u, q))
					require.True(t, ok)
					got := v.([2]any)
					e := event{UUID: u, Seq: q}
					wantTime := recordTime(e, partitioner.KeyPartition([]byte(u), 4))
					if c.extract {
						wantTime = time.UnixMilli(2_000_000_000_000 + q)
					}
					require.True(t, wantTime.Equal(got[0].(time.Time)), "%s/%d: time %v, want %v", u, q, got[0], wantTime)
					require.Equal(t, u, got[1], "the collector's key")
					n++
				}
			}
			require.Equal(t, 5_000, n)
		})
	}
}

// TestBadExtractedTimestamp: an extractor that gives no time for a record
// fails the job for good, naming the record; nothing is processed without
// a time.
func TestBadExtractedTimestamp(t *testing.T) {
	src, _ := stampedInput(2, 10, 200)
	j := keyed.NewJob("stamps", keyed.FS(vfs.NewMem()), keyed.Dir("/ckpt"), keyed.CheckpointInterval(5*time.Millisecond),
		keyed.RestartStrategy(keyed.FixedDelay(3, 0)))
	s := keyed.FromSource(j, "events", 1, connector.Source[event](src)).Timestamps(func(e event, rt time.Time) time.Time {
		if e.UUID == "user-0003" && e.Seq == 5 {
			return time.Time{}
		}
		return rt
	})
	seen := &sync.Map{}
	out := keyed.Process(keyed.ByPartition(s), "count", 1, func() keyed.Operator[event, result] { return &stamper{seen: seen} })
	keyed.ToSink(out, "results", connector.Sink[result](keyed.NewMemorySink[result]()))
	err := j.Run(context.Background())
	require.ErrorIs(t, err, keyed.ErrPermanent)
	p := partitioner.KeyPartition([]byte("user-0003"), 2)
	require.ErrorContains(t, err, fmt.Sprintf("events[%d] offset", p))
	require.ErrorContains(t, err, "timestamp extractor")
	_, processed := seen.Load("user-0003/5")
	require.False(t, processed, "the record without a time was processed")
}
