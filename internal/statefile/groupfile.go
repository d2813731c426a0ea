package statefile

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/kordproject/kord/checkpoint"
	"github.com/kordproject/kord/internal/layout"
	"github.com/linkedin/goavro/v2"
)

// Key-group range files. One file holds the entries of many key groups of
// one state, typically every key group a task owns, so that a task writes
// one file per state and checkpoint however many key groups it owns, as
// Flink's keyed state backends write one file per task with key-group
// offsets (flink-runtime, KeyGroupRangeOffsets). Per-file costs (create,
// fsync, rename) dominated checkpoints written one file per key group.
//
// The file is an Avro Object Container File (OCF) whose records have the
// schema groupEntrySchema: the key group, the key and the value, so any Avro
// tool reads a snapshot and sees which key group each entry belongs to. A
// block never spans key groups, and each key group's blocks are contiguous
// and in ascending key-group order. The header metadata carries:
//
//	kord.format   keyGroupsFormat, the version of this layout
//	kord.entries  the decimal number of entries in the file
//	kord.index    for each key group with entries, in order: the key group,
//	              its number of entries and the byte length of its blocks,
//	              each an Avro long (zig-zag varint), after the number of
//	              key groups; the first group's blocks start right after the
//	              header's sync marker
//
// so a reader decodes only the key groups it owns, in parallel, without
// scanning the others (a task restored at another parallelism reads parts
// of several files). Integrity is checked by the CRC32C in the checkpoint
// metadata; the index, the framing and each record's key group are checked
// again on decode.

const (
	groupEntrySchema = `{"type":"record","name":"KeyGroupEntry","namespace":"kord.state","fields":[{"name":"keyGroup","type":"int"},{"name":"key","type":"bytes"},{"name":"value","type":"bytes"}]}`
	keyGroupsFormat  = "keygroups-1"
	indexKey         = "kord.index"
)

var groupEntryCodec = func() *goavro.Codec {
	c, err := goavro.NewCodec(groupEntrySchema)
	if err != nil {
		panic("statefile: key-group entry schema: " + err.Error())
	}
	return c
}()

// GroupEntries yields the entries of the i-th key group passed to
// EncodeKeyGroups. worker, in [0, parallel), names the goroutine calling it,
// so that the caller can keep one set of buffers per worker: the returned
// slice is read before the next call with the same worker and not after.
type GroupEntries func(worker, i int) ([]Entry, error)

// EncodeKeyGroups encodes a key-group range file holding, for each key group
// keyGroups[i] (strictly ascending, each in [0, layout.MaxKeyGroups)), the entries
// that entries(_, i) returns, in that order. Key groups without entries are
// left out of the file. The groups are encoded on up to parallel goroutines
// (GOMAXPROCS when parallel <= 0), all ended before it returns.
func EncodeKeyGroups(keyGroups []int, parallel int, entries GroupEntries) ([]byte, error) {
	var e KeyGroupEncoder
	return e.Encode(keyGroups, parallel, entries)
}

// KeyGroupEncoder encodes key-group range files like EncodeKeyGroups,
// keeping its buffers from one Encode to the next: a checkpoint's file is
// about the size of the last one, and allocating it afresh each time costs
// page faults and copies as large buffers grow. The zero value is ready to
// use; it is not safe for concurrent use.
type KeyGroupEncoder struct {
	body, out []byte   // parallel == 1: the blocks, then the file
	bodies    [][]byte // parallel > 1: each key group's blocks
	counts    []int
	sizes     []int
}

// Encode is EncodeKeyGroups. The returned file is valid until the next
// call.
func (e *KeyGroupEncoder) Encode(keyGroups []int, parallel int, entries GroupEntries) ([]byte, error) {
	for i, kg := range keyGroups {
		if err := layout.ValidateKeyGroup(kg); err != nil {
			return nil, err
		}
		if i > 0 && kg <= keyGroups[i-1] {
			return nil, fmt.Errorf("statefile: key groups not strictly ascending: %d after %d", kg, keyGroups[i-1])
		}
	}
	var marker [16]byte
	rand.Read(marker[:]) // never fails
	if parallel <= 0 {
		parallel = runtime.GOMAXPROCS(0)
	}
	parallel = max(1, min(parallel, len(keyGroups)))
	n := len(keyGroups)
	counts := slices.Grow(e.counts[:0], n)[:n]
	sizes := slices.Grow(e.sizes[:0], n)[:n]
	e.counts, e.sizes = counts, sizes
	if parallel == 1 {
		body := e.body[:0]
		for i, kg := range keyGroups {
			es, err := entries(0, i)
			if err != nil {
				return nil, err
			}
			start := len(body)
			body = appendGroupBlocks(body, marker[:], kg, es)
			counts[i], sizes[i] = len(es), len(body)-start
		}
		e.body = body
	} else {
		if len(e.bodies) < n {
			e.bodies = append(e.bodies, make([][]byte, n-len(e.bodies))...)
		}
		errs := make([]error, n)
		var next atomic.Int64
		var wg sync.WaitGroup
		for w := range parallel {
			wg.Go(func() {
				for {
					i := int(next.Add(1) - 1)
					if i >= n {
						return
					}
					es, err := entries(w, i)
					if err != nil {
						errs[i] = err
						continue
					}
					e.bodies[i] = appendGroupBlocks(e.bodies[i][:0], marker[:], keyGroups[i], es)
					counts[i], sizes[i] = len(es), len(e.bodies[i])
				}
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return nil, err
		}
	}
	var index []byte
	groups, total, bodyLen := 0, 0, 0
	for i, kg := range keyGroups {
		bodyLen += sizes[i]
		if counts[i] > 0 {
			groups++
			total += counts[i]
			index = appendLong(index, int64(kg))
			index = appendLong(index, int64(counts[i]))
			index = appendLong(index, int64(sizes[i]))
		}
	}
	index = append(appendLong(nil, int64(groups)), index...)

	b := slices.Grow(e.out[:0], 256+len(groupEntrySchema)+len(index)+bodyLen)
	b = append(b, ocfMagic...)
	b = appendLong(b, 5) // header metadata: one block of five entries
	b = appendString(b, "avro.schema", groupEntrySchema)
	b = appendString(b, "avro.codec", goavro.CompressionNullLabel)
	b = appendString(b, formatKey, keyGroupsFormat)
	b = appendString(b, countKey, strconv.Itoa(total))
	b = appendLong(b, int64(len(indexKey)))
	b = append(b, indexKey...)
	b = appendLong(b, int64(len(index)))
	b = append(b, index...)
	b = appendLong(b, 0)
	b = append(b, marker[:]...)
	if parallel == 1 {
		b = append(b, e.body...)
	} else {
		for _, body := range e.bodies[:n] {
			b = append(b, body...)
		}
	}
	e.out = b
	return b, nil
}

// appendGroupBlocks appends key group kg's entries as OCF blocks of up to
// blockEntries records each.
func appendGroupBlocks(b, sync []byte, kg int, entries []Entry) []byte {
	kgLen := longLen(kg)
	for len(entries) > 0 {
		n := min(len(entries), blockEntries)
		blockSize := 0
		for _, e := range entries[:n] {
			blockSize += kgLen + longLen(len(e.Key)) + len(e.Key) + longLen(len(e.Value)) + len(e.Value)
		}
		b = slices.Grow(b, blockSize+2*binary.MaxVarintLen64+len(sync))
		b = appendLong(b, int64(n))
		b = appendLong(b, int64(blockSize))
		for _, e := range entries[:n] {
			b = appendLong(b, int64(kg))
			b = appendLong(b, int64(len(e.Key)))
			b = append(b, e.Key...)
			b = appendLong(b, int64(len(e.Value)))
			b = append(b, e.Value...)
		}
		b = append(b, sync...)
		entries = entries[n:]
	}
	return b
}

// KeyGroupFile is a key-group range file opened by OpenKeyGroups: its index
// is read and checked, its key groups are decoded on demand.
type KeyGroupFile struct {
	name        string
	b           []byte
	compression string
	sync        []byte
	groups      []groupSpan
}

type groupSpan struct {
	kg       int
	count    int64
	off, end int // the group's blocks are b[off:end]
}

// OpenKeyGroups reads the header and index of a key-group range file read
// from name (used in errors). Malformed input is a *checkpoint.CorruptError naming it;
// it never panics. The returned file refers to b, which must not change.
func OpenKeyGroups(name string, b []byte) (*KeyGroupFile, error) {
	d := ocfDecoder{b: b}
	f, err := d.openGroups(name)
	if err != nil {
		return nil, &checkpoint.CorruptError{Path: name, Reason: fmt.Sprintf("state file at byte %d: %v", d.off, err), Err: err}
	}
	return f, nil
}

func (d *ocfDecoder) openGroups(name string) (*KeyGroupFile, error) {
	meta, compression, sync, err := d.ocfHeader()
	if err != nil {
		return nil, err
	}
	if err := checkFormat(meta, keyGroupsFormat, groupEntryCodec); err != nil {
		return nil, err
	}
	total, err := entryCount(meta)
	if err != nil {
		return nil, err
	}
	index, ok := meta[indexKey]
	if !ok {
		return nil, fmt.Errorf("header metadata has no %s", indexKey)
	}
	id := ocfDecoder{b: index}
	n, err := id.long()
	if err != nil || n < 0 || n > int64(len(index)/3) {
		return nil, fmt.Errorf("%s: number of key groups %d (%v)", indexKey, n, err)
	}
	f := &KeyGroupFile{name: name, b: d.b, compression: compression, sync: sync, groups: make([]groupSpan, n)}
	off, sum := d.off, int64(0)
	for i := range f.groups {
		var v [3]int64
		for j := range v {
			if v[j], err = id.long(); err != nil {
				return nil, fmt.Errorf("%s entry %d: %w", indexKey, i, err)
			}
		}
		kg, count, size := v[0], v[1], v[2]
		switch {
		case kg < 0 || kg >= layout.MaxKeyGroups:
			return nil, fmt.Errorf("%s entry %d: key group %d out of range [0, %d)", indexKey, i, kg, layout.MaxKeyGroups)
		case i > 0 && int(kg) <= f.groups[i-1].kg:
			return nil, fmt.Errorf("%s entry %d: key group %d after %d", indexKey, i, kg, f.groups[i-1].kg)
		case count <= 0 || count > total-sum:
			return nil, fmt.Errorf("%s: key group %d has %d entries, %d of the header's %d left", indexKey, kg, count, total-sum, total)
		case size < 3*count || size > int64(len(d.b)-off): // a record takes 3 bytes or more
			return nil, fmt.Errorf("%s: key group %d has %d bytes of blocks, %d bytes left", indexKey, kg, size, len(d.b)-off)
		}
		f.groups[i] = groupSpan{kg: int(kg), count: count, off: off, end: off + int(size)}
		off += int(size)
		sum += count
	}
	if id.off != len(index) {
		return nil, fmt.Errorf("%s: %d bytes after the last entry", indexKey, len(index)-id.off)
	}
	if sum != total {
		return nil, fmt.Errorf("%s lists %d entries, the header %d", indexKey, sum, total)
	}
	if off != len(d.b) {
		return nil, fmt.Errorf("%d bytes after the last key group's blocks (truncated index or trailing data)", len(d.b)-off)
	}
	return f, nil
}

// Name returns the name the file was opened with.
func (f *KeyGroupFile) Name() string { return f.name }

// Len returns the number of key groups in the file.
func (f *KeyGroupFile) Len() int { return len(f.groups) }

// KeyGroup returns the i-th key group of the file, in ascending order.
func (f *KeyGroupFile) KeyGroup(i int) int { return f.groups[i].kg }

// Entries decodes the i-th key group's entries, checking the framing and
// each record's key group. Errors are *checkpoint.CorruptError naming the file. The
// entries share memory with each other but not with the file's bytes. It is
// safe to call concurrently for different or equal i.
func (f *KeyGroupFile) Entries(i int) ([]Entry, error) {
	g := f.groups[i]
	d := ocfDecoder{b: f.b[:g.end], off: g.off}
	es, err := d.groupEntries(g, f.compression, f.sync)
	if err != nil {
		return nil, &checkpoint.CorruptError{Path: f.name, Reason: fmt.Sprintf("state file at byte %d, key group %d: %v", d.off, g.kg, err), Err: err}
	}
	return es, nil
}

func (d *ocfDecoder) groupEntries(g groupSpan, compression string, sync []byte) ([]Entry, error) {
	entries := make([]Entry, 0, g.count)
	for d.off < len(d.b) {
		// A record takes three bytes or more: a key group and two empty
		// byte strings.
		count, block, err := d.block(compression, sync, 3)
		if err != nil {
			return nil, err
		}
		if count > g.count-int64(len(entries)) {
			return nil, fmt.Errorf("more records than the %d in the index", g.count)
		}
		bd := ocfDecoder{b: block}
		for range count {
			kg, err := bd.long()
			if err != nil {
				return nil, fmt.Errorf("record key group: %w", err)
			}
			if kg != int64(g.kg) {
				return nil, fmt.Errorf("record of key group %d among key group %d's", kg, g.kg)
			}
			var e Entry
			if e.Key, err = bd.bytes(); err != nil {
				return nil, fmt.Errorf("record key: %w", err)
			}
			if e.Value, err = bd.bytes(); err != nil {
				return nil, fmt.Errorf("record value: %w", err)
			}
			entries = append(entries, e)
		}
		if bd.off != len(block) {
			return nil, fmt.Errorf("%d bytes after the last record of a block", len(block)-bd.off)
		}
	}
	if int64(len(entries)) != g.count {
		return nil, fmt.Errorf("%d records, the index says %d", len(entries), g.count)
	}
	return entries, nil
}

// DecodeKeyGroups decodes every key group of a key-group range file: the
// key groups in ascending order and their entries. Errors are
// *checkpoint.CorruptError naming name.
func DecodeKeyGroups(name string, b []byte) (keyGroups []int, entries [][]Entry, err error) {
	f, err := OpenKeyGroups(name, b)
	if err != nil {
		return nil, nil, err
	}
	keyGroups = make([]int, f.Len())
	entries = make([][]Entry, f.Len())
	for i := range f.Len() {
		keyGroups[i] = f.KeyGroup(i)
		if entries[i], err = f.Entries(i); err != nil {
			return nil, nil, err
		}
	}
	return keyGroups, entries, nil
}
