package statefile

import (
	"sync"
	"sync/atomic"
	"testing"

	"github.com/kordproject/kord/checkpoint"
	"github.com/kordproject/kord/internal/layout"
	"github.com/kordproject/kord/internal/retain"
	"github.com/kordproject/kord/vfs"
	"github.com/kordproject/kord/vfs/errorfs"
)

// BenchmarkWriteCheckpoint writes a checkpoint of 12 key groups of 83,334
// entries (1M keys, 36-byte keys, 8-byte values) to a directory on the real
// filesystem: "encode+write" includes encoding the Avro files, "write" only
// the durable writes (temp, fsync, rename, one directory fsync, metadata).
// It lives here because package checkpoint's tests cannot import this
// package, which imports checkpoint.
// Each iteration deletes the previous checkpoint (timed; a few unlinks).
func BenchmarkWriteCheckpoint(b *testing.B) {
	const groups = 12
	entries := make([][]Entry, groups)
	for kg := range groups {
		entries[kg] = benchEntries(benchPerGroup, kg)
	}
	encode := func(run string, id uint64) map[string][]byte {
		files := make(map[string][]byte, groups)
		var mu sync.Mutex
		var wg sync.WaitGroup
		for kg := range groups {
			wg.Go(func() {
				data, err := EncodeKeyGroup(entries[kg])
				if err != nil {
					panic(err)
				}
				mu.Lock()
				files[layout.StateFileName(run, id, "count", kg)] = data
				mu.Unlock()
			})
		}
		wg.Wait()
		return files
	}
	for _, withEncode := range []bool{true, false} {
		name := "write"
		if withEncode {
			name = "encode+write"
		}
		b.Run(name, func(b *testing.B) {
			var fsyncs atomic.Int64
			counting := errorfs.New(vfs.Default(), func(op errorfs.Op, _ string) error {
				if op == errorfs.OpSync || op == errorfs.OpSyncDir {
					fsyncs.Add(1)
				}
				return nil
			})
			s, err := checkpoint.OpenStore(counting, b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			pre := encode("ab", 0)
			var total int
			for _, d := range pre {
				total += len(d)
			}
			var id uint64
			var perCkpt int64
			for b.Loop() {
				id++
				var files map[string][]byte
				if withEncode {
					files = encode("ab", id)
				} else {
					files = make(map[string][]byte, groups)
					for kg := range groups {
						files[layout.StateFileName("ab", id, "count", kg)] = pre[layout.StateFileName("ab", 0, "count", kg)]
					}
				}
				m := &checkpoint.Metadata{Run: "ab", ID: id, MaxParallelism: groups}
				before := fsyncs.Load()
				if err := checkpoint.WriteCheckpoint(b.Context(), s, m, files); err != nil {
					b.Fatal(err)
				}
				perCkpt = fsyncs.Load() - before
				if id > 1 {
					if err := retain.Committed(b.Context(), s, checkpoint.Ref{Run: "ab", ID: id}, 1); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.SetBytes(int64(total))
			b.ReportMetric(float64(total), "ckpt-bytes")
			b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/ckpt")
			b.ReportMetric(float64(perCkpt), "fsyncs/ckpt")
		})
	}
}
