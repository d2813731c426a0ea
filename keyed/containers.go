package keyed

import (
	"encoding/binary"
	"fmt"

	"github.com/kordproject/kord/serde"
)

// Snapshot encodings of list and map state values, the Entry.Value of a
// key's list or map in a key-group file. Both are a version byte then
// length-prefixed items, every length an unsigned varint:
//
//	list:  0x01  n  n × (len  element)             n >= 1, elements in order
//	map:   0x01  n  n × (klen key  vlen value)      n >= 1, keys distinct
//
// where element, key and value are their serdes' encodings. An empty list or
// map is no state and is never written. Lengths are minimal varints. The
// decoders never panic and allocate no more than the input's length allows.
const containerFormat = 0x01

func appendFramed[V any](dst, scratch []byte, c serde.Serde[V], v V) (out, scratchOut []byte, err error) {
	scratch, err = c.Encode(scratch[:0], v)
	if err != nil {
		return dst, scratch, err
	}
	dst = binary.AppendUvarint(dst, uint64(len(scratch)))
	return append(dst, scratch...), scratch, nil
}

func appendList[V any](dst, scratch []byte, c serde.Serde[V], list []V) (out, scratchOut []byte, err error) {
	dst = append(dst, containerFormat)
	dst = binary.AppendUvarint(dst, uint64(len(list)))
	for _, v := range list {
		if dst, scratch, err = appendFramed(dst, scratch, c, v); err != nil {
			return dst, scratch, err
		}
	}
	return dst, scratch, nil
}

func appendMap[K comparable, V any](dst, scratch []byte, kc serde.Serde[K], vc serde.Serde[V], m map[K]V) (out, scratchOut []byte, err error) {
	dst = append(dst, containerFormat)
	dst = binary.AppendUvarint(dst, uint64(len(m)))
	for k, v := range m {
		if dst, scratch, err = appendFramed(dst, scratch, kc, k); err != nil {
			return dst, scratch, err
		}
		if dst, scratch, err = appendFramed(dst, scratch, vc, v); err != nil {
			return dst, scratch, err
		}
	}
	return dst, scratch, nil
}

type framedReader struct {
	b   []byte
	off int
}

func (r *framedReader) uvarint() (uint64, error) {
	v, n := binary.Uvarint(r.b[r.off:])
	if n <= 0 {
		if n == 0 {
			return 0, fmt.Errorf("truncated length at byte %d", r.off)
		}
		return 0, fmt.Errorf("length overflows 64 bits at byte %d", r.off)
	}
	if n > 1 && r.b[r.off+n-1] == 0 {
		return 0, fmt.Errorf("overlong length at byte %d", r.off) // one encoding per value
	}
	r.off += n
	return v, nil
}

func (r *framedReader) item() ([]byte, error) {
	n, err := r.uvarint()
	if err != nil {
		return nil, err
	}
	if n > uint64(len(r.b)-r.off) {
		return nil, fmt.Errorf("item of %d bytes at byte %d with %d left", n, r.off, len(r.b)-r.off)
	}
	v := r.b[r.off : r.off+int(n) : r.off+int(n)]
	r.off += int(n)
	return v, nil
}

// header reads the version byte and the item count, at least 1 and at most
// what the remaining bytes can hold at minItemBytes bytes an item.
func (r *framedReader) header(minItemBytes int) (int, error) {
	if len(r.b) == 0 {
		return 0, fmt.Errorf("empty value")
	}
	if r.b[0] != containerFormat {
		return 0, fmt.Errorf("format byte 0x%02x, want 0x%02x", r.b[0], containerFormat)
	}
	r.off = 1
	n, err := r.uvarint()
	if err != nil {
		return 0, err
	}
	if n == 0 {
		return 0, fmt.Errorf("no items (an empty container is never written)")
	}
	if n > uint64((len(r.b)-r.off)/minItemBytes) {
		return 0, fmt.Errorf("%d items in %d bytes", n, len(r.b)-r.off)
	}
	return int(n), nil
}

func decodeList[V any](b []byte, c serde.Serde[V]) ([]V, error) {
	r := framedReader{b: b}
	n, err := r.header(1)
	if err != nil {
		return nil, fmt.Errorf("list: %w", err)
	}
	list := make([]V, n)
	for i := range list {
		item, err := r.item()
		if err != nil {
			return nil, fmt.Errorf("list element %d: %w", i, err)
		}
		if list[i], err = c.Decode(item); err != nil {
			return nil, fmt.Errorf("list element %d: %w", i, err)
		}
	}
	if r.off != len(b) {
		return nil, fmt.Errorf("list: %d bytes after the last element", len(b)-r.off)
	}
	return list, nil
}

func decodeMap[K comparable, V any](b []byte, kc serde.Serde[K], vc serde.Serde[V]) (map[K]V, error) {
	r := framedReader{b: b}
	n, err := r.header(2)
	if err != nil {
		return nil, fmt.Errorf("map: %w", err)
	}
	m := make(map[K]V, n)
	for i := range n {
		kb, err := r.item()
		if err != nil {
			return nil, fmt.Errorf("map entry %d key: %w", i, err)
		}
		vb, err := r.item()
		if err != nil {
			return nil, fmt.Errorf("map entry %d value: %w", i, err)
		}
		k, err := kc.Decode(kb)
		if err != nil {
			return nil, fmt.Errorf("map entry %d key: %w", i, err)
		}
		v, err := vc.Decode(vb)
		if err != nil {
			return nil, fmt.Errorf("map entry %d value: %w", i, err)
		}
		if _, dup := m[k]; dup {
			return nil, fmt.Errorf("map entry %d: duplicate key %v", i, k)
		}
		m[k] = v
	}
	if r.off != len(b) {
		return nil, fmt.Errorf("map: %d bytes after the last entry", len(b)-r.off)
	}
	return m, nil
}
