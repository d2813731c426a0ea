package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sort"
	"sync"

	"github.com/kordproject/kord/checkpoint"
	"github.com/kordproject/kord/keyed/connector"
)

// LineSink is a toy exactly-once sink written against kord's public
// connector interface (connector.Sink) only: it appends each committed value
// as a line of text to a file. A checkpoint's lines and its commit record
// become visible together: Commit appends the lines, fsyncs them, then
// replaces the record (the file's committed length, the checkpoint and its
// source offsets) by a rename. A crash between the two leaves a tail past
// the recorded length, which the next Reset cuts off, so a reader that
// stops at the recorded length (Lines) sees every result once.
type LineSink[T any] struct {
	path   string
	format func(T) string

	mu      sync.Mutex
	pending map[uint64][]string // epoch -> lines not yet committed
}

// record is what LineSink keeps beside its file: how much of it is
// committed, and the checkpoint that committed it.
type record struct {
	Length  int64                        `json:"length"`
	Run     string                       `json:"run"`
	ID      uint64                       `json:"id"`
	Offsets []checkpoint.PartitionOffset `json:"offsets"`
}

// NewLineSink returns a sink that writes format(v) lines to path.
func NewLineSink[T any](path string, format func(T) string) *LineSink[T] {
	return &LineSink[T]{path: path, format: format, pending: map[uint64][]string{}}
}

var _ connector.Sink[int] = (*LineSink[int])(nil)

func (s *LineSink[T]) recordPath() string { return s.path + ".commit" }

func (s *LineSink[T]) readRecord() (*record, error) {
	b, err := os.ReadFile(s.recordPath())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("linesink: %w", err)
	}
	var r record
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("linesink: %s: %w", s.recordPath(), err)
	}
	return &r, nil
}

// Reset implements connector.Sink: pending lines go, and so does any tail of
// the file past the committed length (a crash between append and record).
func (s *LineSink[T]) Reset(context.Context, connector.SinkInfo) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pending = map[uint64][]string{}
	r, err := s.readRecord()
	if err != nil {
		return err
	}
	length := int64(0)
	if r != nil {
		length = r.Length
	}
	if err := os.Truncate(s.path, length); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("linesink: %w", err)
	}
	return nil
}

// Write implements connector.Sink: v waits, invisible, until its epoch
// commits.
func (s *LineSink[T]) Write(_ context.Context, epoch uint64, v T) error {
	s.mu.Lock()
	s.pending[epoch] = append(s.pending[epoch], s.format(v))
	s.mu.Unlock()
	return nil
}

// Commit implements connector.Sink: the lines of every epoch up to ref.ID are
// appended and made durable, then the record names ref, its offsets and
// the file's new length.
func (s *LineSink[T]) Commit(_ context.Context, ref checkpoint.Ref, offsets []checkpoint.PartitionOffset) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	f, err := os.OpenFile(s.path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("linesink: %w", err)
	}
	defer f.Close()
	w := bufio.NewWriter(f)
	var epochs []uint64
	for e := range s.pending {
		if e <= ref.ID {
			epochs = append(epochs, e)
		}
	}
	sort.Slice(epochs, func(a, b int) bool { return epochs[a] < epochs[b] })
	for _, e := range epochs {
		for _, l := range s.pending[e] {
			w.WriteString(l)
			w.WriteByte('\n')
		}
	}
	if err := w.Flush(); err != nil {
		return fmt.Errorf("linesink: %w", err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("linesink: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("linesink: %w", err)
	}
	b, err := json.Marshal(record{Length: st.Size(), Run: ref.Run, ID: ref.ID, Offsets: offsets})
	if err != nil {
		return err
	}
	tmp := s.recordPath() + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return fmt.Errorf("linesink: %w", err)
	}
	if err := os.Rename(tmp, s.recordPath()); err != nil {
		return fmt.Errorf("linesink: %w", err)
	}
	for _, e := range epochs {
		delete(s.pending, e)
	}
	return nil
}

// Recorded implements connector.Sink: the checkpoint the record names, with
// its offsets.
func (s *LineSink[T]) Recorded(context.Context) (*connector.Recorded, error) {
	r, err := s.readRecord()
	if err != nil || r == nil {
		return nil, err
	}
	return &connector.Recorded{Ref: checkpoint.Ref{Run: r.Run, ID: r.ID}, Offsets: r.Offsets, Where: "line sink " + s.recordPath()}, nil
}

// Lines returns the committed lines of the file at path.
func Lines(path string) ([]string, error) {
	s := &LineSink[struct{}]{path: path}
	r, err := s.readRecord()
	if err != nil || r == nil {
		return nil, err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	var read int64
	for sc.Scan() && read < r.Length {
		read += int64(len(sc.Bytes())) + 1
		out = append(out, sc.Text())
	}
	return out, sc.Err()
}
