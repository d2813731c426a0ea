package main

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"time"
)

// Record layout. Every value starts with the wall time its input record was
// produced at, so the latency reader can measure from the output alone.
//
//	input value:  [0:8)  produce time, Unix ns, big endian
//	              [8:16) sequence number of the record in its run
//	              [16:)  filler
//	output value: [0:8)  produce time of the input record (copied)
//	              [8:12) input partition
//	              [12:20) input offset
//	              [20:)  the input's filler, bytes reversed
//
// The keyed engine's output (engine.go) is the same with [20:28) replaced by
// the key's count after the record, big endian.
const (
	keyLen              = 36 // a UUID in its text form
	minValueBytes       = 20 // the output header
	minEngineValueBytes = 28 // the output header and the count
)

// keySource gives the key of each input record: written into dst[:keyLen],
// or a slice of its own (librdkafka copies keys when a record is produced).
type keySource interface {
	next(dst []byte) []byte
}

// newKeys returns the keys of one input: users distinct UUIDs (keyPool), or
// a fresh UUID for every record when users is 0.
func newKeys(users int) keySource {
	seed := uint64(time.Now().UnixNano())
	if users <= 0 {
		return newKeyGen(seed)
	}
	return newKeyPool(users, seed)
}

// keyGen makes random version-4 UUID strings, written into a caller's
// buffer (librdkafka copies keys and values, so one buffer serves every
// record).
type keyGen struct {
	r *rand.Rand
}

func newKeyGen(seed uint64) *keyGen {
	return &keyGen{r: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

// next writes a UUID into dst[:36] and returns it.
func (g *keyGen) next(dst []byte) []byte {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], g.r.Uint64())
	binary.BigEndian.PutUint64(b[8:], g.r.Uint64())
	b[6] = b[6]&0x0f | 0x40 // version 4
	b[8] = b[8]&0x3f | 0x80 // RFC 4122 variant
	dst = dst[:keyLen]
	hex.Encode(dst[0:8], b[0:4])
	dst[8] = '-'
	hex.Encode(dst[9:13], b[4:6])
	dst[13] = '-'
	hex.Encode(dst[14:18], b[6:8])
	dst[18] = '-'
	hex.Encode(dst[19:23], b[8:10])
	dst[23] = '-'
	hex.Encode(dst[24:36], b[10:16])
	return dst
}

// keyPool draws keys from a fixed set of random UUIDs, one per user: the
// first len(keys) records get every key once, in turn, so that the state of
// a job that has read them holds every key; later records pick a key at
// random, as users' events come.
type keyPool struct {
	keys [][]byte
	i    int
	r    *rand.Rand
}

func newKeyPool(users int, seed uint64) *keyPool {
	g := newKeyGen(seed)
	p := &keyPool{keys: make([][]byte, users), r: rand.New(rand.NewPCG(seed^0x5bd1e995, seed))}
	for i := range p.keys {
		p.keys[i] = g.next(make([]byte, keyLen))
	}
	return p
}

func (p *keyPool) next([]byte) []byte {
	if p.i < len(p.keys) {
		p.i++
		return p.keys[p.i-1]
	}
	return p.keys[p.r.IntN(len(p.keys))]
}

// fillInput writes an input value of len(dst) bytes.
func fillInput(dst []byte, producedAtNs int64, seq uint64) {
	binary.BigEndian.PutUint64(dst[0:8], uint64(producedAtNs))
	binary.BigEndian.PutUint64(dst[8:16], seq)
	for i := 16; i < len(dst); i++ {
		dst[i] = byte('a' + (seq+uint64(i))%26)
	}
}

// fillOutput writes into dst (len(dst) bytes, at least minValueBytes) the
// output value derived from the input value in, read from partition/offset.
func fillOutput(dst, in []byte, partition int32, offset int64) {
	copy(dst[0:8], in[0:8])
	binary.BigEndian.PutUint32(dst[8:12], uint32(partition))
	binary.BigEndian.PutUint64(dst[12:20], uint64(offset))
	var filler []byte
	if len(in) > 16 {
		filler = in[16:]
	}
	for i := 20; i < len(dst); i++ {
		j := i - 20
		if j < len(filler) {
			dst[i] = filler[len(filler)-1-j]
		} else {
			dst[i] = 0
		}
	}
}

// outputFields is what the verifier and the latency reader need from an
// output value.
type outputFields struct {
	producedAtNs int64
	inPartition  int32
	inOffset     int64
}

func parseOutput(v []byte) (outputFields, error) {
	if len(v) < minValueBytes {
		return outputFields{}, fmt.Errorf("output value of %d bytes, want at least %d", len(v), minValueBytes)
	}
	return outputFields{
		producedAtNs: int64(binary.BigEndian.Uint64(v[0:8])),
		inPartition:  int32(binary.BigEndian.Uint32(v[8:12])),
		inOffset:     int64(binary.BigEndian.Uint64(v[12:20])),
	}, nil
}

// putCount writes a key's count into an engine output value.
func putCount(dst []byte, n int64) { binary.BigEndian.PutUint64(dst[20:28], uint64(n)) }

// countOf reads the count from an engine output value.
func countOf(v []byte) (int64, error) {
	if len(v) < minEngineValueBytes {
		return 0, fmt.Errorf("engine output value of %d bytes, want at least %d", len(v), minEngineValueBytes)
	}
	return int64(binary.BigEndian.Uint64(v[20:28])), nil
}

func producedAt(inputValue []byte) (int64, error) {
	if len(inputValue) < 16 {
		return 0, fmt.Errorf("input value of %d bytes, want at least 16", len(inputValue))
	}
	return int64(binary.BigEndian.Uint64(inputValue[0:8])), nil
}
