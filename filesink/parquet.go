package filesink

import (
	"fmt"
	"io"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/compress"
)

// parquetRowGroupBytes is about how many bytes of rows, uncompressed, a
// Parquet writer buffers before it writes them out as a row group: a file
// holds a row group's column chunks whole, so they are kept in memory
// until then.
const parquetRowGroupBytes = 64 << 20

// Parquet writes a Parquet file with parquet-go
// (github.com/parquet-go/parquet-go), its schema from T, a struct, by
// parquet-go's rules: a column for each exported field, named and shaped
// by its `parquet:"..."` tag (name, optional, timestamp(unit), ...;
// see parquet-go's SchemaOf), a pointer field optional, a nested struct a
// group, a slice a repeated field. Each column's pages are compressed with
// Snappy or Zstd (Parquet's SNAPPY and ZSTD codecs) or not at all. The
// file's extension is ".parquet".
//
// Rows are buffered and written as row groups of about 64 MiB
// (uncompressed); Close writes the last and the footer, without which the
// file cannot be read. So Parquet is Bulk: a file ends at every checkpoint.
//
// NewWriter fails for a T parquet-go cannot make a schema of (not a
// struct, a field type it does not know) and for an unknown Compression.
func Parquet[T any](c Compression) Format[T] {
	return parquetFormat[T]{c: c, rowGroupBytes: parquetRowGroupBytes}
}

type parquetFormat[T any] struct {
	c             Compression
	rowGroupBytes int64 // parquetRowGroupBytes; less in tests
}

func (parquetFormat[T]) Ext() string { return ".parquet" }
func (parquetFormat[T]) Bulk() bool  { return true }

func (f parquetFormat[T]) name() string { return "parquet (" + f.c.String() + ")" }

func (f parquetFormat[T]) NewWriter(w io.Writer) (_ RowWriter[T], err error) {
	var codec compress.Codec
	switch f.c {
	case Uncompressed:
		codec = &parquet.Uncompressed
	case Snappy:
		codec = &parquet.Snappy
	case Zstd:
		codec = &parquet.Zstd
	default:
		return nil, fmt.Errorf("filesink: parquet: unknown compression %v", f.c)
	}
	// parquet-go panics for a T it cannot make a schema of.
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("filesink: %s: schema of %T: %v", f.name(), *new(T), r)
		}
	}()
	pw := &parquetWriter[T]{f: f, w: parquet.NewGenericWriter[T](w, parquet.Compression(codec))}
	pw.done = pw.w.Size()
	return pw, nil
}

type parquetWriter[T any] struct {
	f      parquetFormat[T]
	w      *parquet.GenericWriter[T]
	row    [1]T
	done   int64 // the file's bytes before the row group being buffered (parquet-go buffers its output: w may lag)
	raw    int64 // parquet-go's estimate of the row groups written, when they were buffered
	packed int64 // and their bytes in the file
	closed bool
}

func (p *parquetWriter[T]) Write(v T) (err error) {
	if p.closed {
		return fmt.Errorf("filesink: %s: write: %w", p.f.name(), errClosed)
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("filesink: %s: write %T: %v", p.f.name(), v, r)
		}
	}()
	p.row[0] = v
	_, err = p.w.Write(p.row[:])
	p.row[0] = *new(T) // keep nothing of v
	if err != nil {
		return fmt.Errorf("filesink: %s: write: %w", p.f.name(), err)
	}
	if buffered := p.w.Size() - p.done; buffered >= p.f.rowGroupBytes {
		if err := p.w.Flush(); err != nil {
			return fmt.Errorf("filesink: %s: write row group: %w", p.f.name(), err)
		}
		done := p.w.Size()
		p.raw += buffered
		p.packed += done - p.done
		p.done = done
	}
	return nil
}

// Size is the bytes written to w and the buffered rows as parquet-go
// estimates them (uncompressed), compressed as well as the row groups
// written so far were; not the footer. Until a first row group is
// written, a compressed file's Size is an upper bound, a few times the
// file.
func (p *parquetWriter[T]) Size() int64 {
	buffered := p.w.Size() - p.done
	if p.raw > 0 {
		buffered = buffered * p.packed / p.raw
	}
	return p.done + buffered
}

func (p *parquetWriter[T]) Close() error {
	if p.closed {
		return fmt.Errorf("filesink: %s: close: %w", p.f.name(), errClosed)
	}
	p.closed = true
	if err := p.w.Close(); err != nil {
		return fmt.Errorf("filesink: %s: close: %w", p.f.name(), err)
	}
	return nil
}
