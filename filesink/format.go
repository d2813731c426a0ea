package filesink

import (
	"errors"
	"fmt"
	"io"
)

// Compression of a file's data.
type Compression uint8

const (
	Uncompressed Compression = iota
	// Snappy: a file's stream in Snappy's framing format, or the
	// format's own blocks or pages Snappy-compressed.
	Snappy
	// Zstd: Zstandard, likewise.
	Zstd
)

func (c Compression) String() string {
	switch c {
	case Uncompressed:
		return "uncompressed"
	case Snappy:
		return "snappy"
	case Zstd:
		return "zstd"
	}
	return fmt.Sprintf("Compression(%d)", uint8(c))
}

// Format writes rows of type T into files of one kind.
//
// The formats here are JSONLines, Avro and Parquet. A Format is safe for
// concurrent use; each RowWriter is used by one goroutine at a time.
type Format[T any] interface {
	// Ext is the file name's extension, with its dot: ".parquet", ".avro", ".jsonl", ".jsonl.zst", ...
	Ext() string
	// NewWriter starts a file on w. The writer never closes w.
	NewWriter(w io.Writer) (RowWriter[T], error)
	// Bulk says the format must end its file at every checkpoint (a footer, as Parquet's), and cannot be resumed: Flink's BulkFormat.
	Bulk() bool
}

// RowWriter writes one file's rows.
//
// Its errors name the format and what failed. After Close, Write and
// Close return an error.
type RowWriter[T any] interface {
	Write(v T) error
	// Size is about how many bytes the file will have if it closed now (for size rolling); may lag for buffering formats.
	Size() int64
	// Close writes what the file still needs (Parquet's footer, Avro's last block) to w; it does not close w.
	Close() error
}

// errClosed is returned by a row writer's Write and Close after Close.
var errClosed = errors.New("writer closed")

// countingWriter counts the bytes written to w.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
