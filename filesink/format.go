package filesink

// Placeholder until the formats land (branch formats): the interfaces and
// JSON lines, uncompressed.

import (
	"encoding/json"
	"io"
)

type Compression uint8

const (
	Uncompressed Compression = iota
	Snappy
	Zstd
)

type Format[T any] interface {
	Ext() string
	NewWriter(w io.Writer) (RowWriter[T], error)
	Bulk() bool
}

type RowWriter[T any] interface {
	Write(v T) error
	Size() int64
	Close() error
}

func JSONLines[T any](c Compression) Format[T] { return jsonLines[T]{} }

type jsonLines[T any] struct{}

func (jsonLines[T]) Ext() string { return ".jsonl" }
func (jsonLines[T]) Bulk() bool  { return false }
func (jsonLines[T]) NewWriter(w io.Writer) (RowWriter[T], error) {
	return &jsonWriter[T]{w: w}, nil
}

type jsonWriter[T any] struct {
	w io.Writer
	n int64
}

func (j *jsonWriter[T]) Write(v T) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	n, err := j.w.Write(b)
	j.n += int64(n)
	return err
}
func (j *jsonWriter[T]) Size() int64  { return j.n }
func (j *jsonWriter[T]) Close() error { return nil }
