package filesink

import (
	"bytes"
	"fmt"
	"io"

	"github.com/golang/snappy"
	"github.com/klauspost/compress/zstd"

	"github.com/kordproject/kord/serde"
)

// JSONLines writes one JSON document per line (JSON Lines, newline
// delimited JSON): each row as serde.JSON[T] encodes it (encoding/json's
// bytes), then "\n". The file's extension is ".jsonl".
//
// With Snappy, the whole stream is compressed in Snappy's framing format
// (the one snappy's command line tools and python-snappy read; extension
// ".jsonl.sz"); with Zstd, as Zstandard frames (extension ".jsonl.zst",
// which zstd and DuckDB's read_json read). A compressed stream is a
// concatenation of frames, so a file can be continued after a restore: the
// format is not Bulk.
//
// An unknown Compression fails NewWriter.
func JSONLines[T any](c Compression) Format[T] {
	return jsonLines[T]{c: c, enc: serde.JSON[T]()}
}

type jsonLines[T any] struct {
	c   Compression
	enc serde.Serde[T]
}

func (f jsonLines[T]) Ext() string {
	switch f.c {
	case Snappy:
		return ".jsonl.sz"
	case Zstd:
		return ".jsonl.zst"
	}
	return ".jsonl"
}

func (jsonLines[T]) Bulk() bool { return false }

func (f jsonLines[T]) name() string {
	if f.c == Uncompressed {
		return "jsonl"
	}
	return "jsonl (" + f.c.String() + ")"
}

func (f jsonLines[T]) NewWriter(w io.Writer) (RowWriter[T], error) {
	jw := &jsonWriter[T]{f: f, cw: &countingWriter{w: w}}
	switch f.c {
	case Uncompressed:
		jw.out = jw.cw
	case Snappy:
		s := snappy.NewBufferedWriter(jw.cw)
		jw.out, jw.end = s, s.Close
	case Zstd:
		z, err := zstd.NewWriter(jw.cw, zstd.WithEncoderConcurrency(1))
		if err != nil {
			return nil, fmt.Errorf("filesink: %s: %w", f.name(), err)
		}
		jw.out, jw.end = z, z.Close
	default:
		return nil, fmt.Errorf("filesink: jsonl: unknown compression %v", f.c)
	}
	return jw, nil
}

type jsonWriter[T any] struct {
	f      jsonLines[T]
	cw     *countingWriter // w, counted
	out    io.Writer       // cw, or a compressor writing to it
	end    func() error    // Close: likewise, and the compressor is done; nil when uncompressed
	buf    []byte
	closed bool
}

func (j *jsonWriter[T]) Write(v T) error {
	if j.closed {
		return fmt.Errorf("filesink: %s: write: %w", j.f.name(), errClosed)
	}
	b, err := j.f.enc.Encode(j.buf[:0], v)
	if err != nil {
		return fmt.Errorf("filesink: %s: encode %T: %w", j.f.name(), v, err)
	}
	// encoding/json escapes a newline in a string; a MarshalJSON that
	// returns one is compacted away. Checked all the same: a newline
	// inside a row would make two lines of one.
	if bytes.IndexByte(b, '\n') >= 0 {
		return fmt.Errorf("filesink: %s: the JSON of a %T has a newline", j.f.name(), v)
	}
	j.buf = append(b, '\n')
	if _, err := j.out.Write(j.buf); err != nil {
		return fmt.Errorf("filesink: %s: write: %w", j.f.name(), err)
	}
	return nil
}

// Size is the bytes written to w so far: a compressed stream's last frame
// lags until its compressor writes it out.
func (j *jsonWriter[T]) Size() int64 { return j.cw.n }

func (j *jsonWriter[T]) Close() error {
	if j.closed {
		return fmt.Errorf("filesink: %s: close: %w", j.f.name(), errClosed)
	}
	j.closed = true
	if j.end == nil {
		return nil
	}
	if err := j.end(); err != nil {
		return fmt.Errorf("filesink: %s: close: %w", j.f.name(), err)
	}
	return nil
}
