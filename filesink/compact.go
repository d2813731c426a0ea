package filesink

import (
	"bufio"
	"encoding/gob"
	"errors"
	"fmt"
	"io"
	"time"
)

// compact merges, for each bucket whose merge is due (CompactEvery's
// interval since its last, or final), its pieces into one file of the
// format, staged as checkpoint id's: it replaces the pieces among the
// pending files, and deletes them when it is published. Called with s.mu
// held, at a barrier.
func (s *Sink[T]) compact(id uint64, final bool) error {
	now := time.Now()
	byBucket := map[string][]file{}
	var order []string
	for _, f := range s.pending {
		if !f.Piece {
			continue
		}
		if _, ok := byBucket[f.Bucket]; !ok {
			order = append(order, f.Bucket)
		}
		byBucket[f.Bucket] = append(byBucket[f.Bucket], f)
	}
	for _, b := range order {
		last, ok := s.merged[b]
		if !ok {
			s.merged[b], last = now, now // the bucket's first pieces start its interval
		}
		if !final && now.Sub(last) < s.cfg.compact {
			continue
		}
		merged, err := s.merge(id, b, byBucket[b])
		if err != nil {
			return err
		}
		hit(pointAfterMerge)
		s.merged[b] = now
		replaced := map[string]bool{}
		for _, p := range byBucket[b] {
			replaced[p.Staging] = true
		}
		kept := s.pending[:0]
		for _, f := range s.pending {
			if !replaced[f.Staging] {
				kept = append(kept, f)
			}
		}
		s.pending = append(kept, merged)
	}
	return nil
}

// merge writes the rows of pieces, in order, into one new file of
// bucket, durable, staged as checkpoint id's.
func (s *Sink[T]) merge(id uint64, bucket string, pieces []file) (file, error) {
	p, err := s.startPart(s.ctx, bucket, false)
	if err != nil {
		return file{}, err
	}
	for _, pc := range pieces {
		if err := s.copyRows(pc, p); err != nil {
			p.f.abandon()
			return file{}, err
		}
		p.Pieces = append(p.Pieces, pc.Staging)
	}
	if err := p.w.Close(); err != nil {
		p.f.abandon()
		return file{}, s.errorf("closing %s: %w", p.Staging, err)
	}
	if err := p.f.finish(); err != nil {
		return file{}, s.errorf("making %s durable: %w", p.Staging, err)
	}
	f := p.file
	f.ID = id
	return f, nil
}

// copyRows writes every row of piece pc into p.
func (s *Sink[T]) copyRows(pc file, p *part[T]) error {
	r, err := s.t.open(s.ctx, pc.Staging)
	if err != nil {
		return s.errorf("reading piece %s: %w", pc.Staging, err)
	}
	defer r.Close()
	dec := gob.NewDecoder(bufio.NewReaderSize(r, 64<<10))
	var n int64
	for {
		var v T
		if err := dec.Decode(&v); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return s.errorf("piece %s, row %d: %w", pc.Staging, n+1, err)
		}
		if err := p.w.Write(v); err != nil {
			return s.errorf("%s: %w", p.Staging, err)
		}
		n++
		p.Rows++
	}
	if n != pc.Rows {
		return s.errorf("piece %s holds %d rows, its checkpoint says %d", pc.Staging, n, pc.Rows)
	}
	return nil
}

// pieces is the format of a piece: Go's gob encoding of each row.
type pieces[T any] struct{}

func (pieces[T]) Ext() string { return ".gob" }
func (pieces[T]) Bulk() bool  { return false }
func (pieces[T]) NewWriter(w io.Writer) (RowWriter[T], error) {
	// gob writes a message per row: buffered, not a write(2) each.
	bw := bufio.NewWriterSize(w, 64<<10)
	cw := &countingWriter{w: bw}
	return &pieceWriter[T]{cw: cw, bw: bw, enc: gob.NewEncoder(cw)}, nil
}

type pieceWriter[T any] struct {
	cw  *countingWriter
	bw  *bufio.Writer
	enc *gob.Encoder
}

func (p *pieceWriter[T]) Write(v T) error {
	if err := p.enc.Encode(v); err != nil {
		return fmt.Errorf("piece (gob of %T): %w", v, err)
	}
	return nil
}
func (p *pieceWriter[T]) Size() int64  { return p.cw.n }
func (p *pieceWriter[T]) Close() error { return p.bw.Flush() }
