package keyed

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/kordproject/kord/serde"
)

// StateOpt configures a state when it is registered (Value, List, Map).
type StateOpt func(*stateConfig)

type stateConfig struct {
	ttl time.Duration
}

// TTL makes a state's entries expire d after they were last written, in
// processing time: a value, each element of a list, each entry of a map.
// An expired entry is invisible at once (Get, Range and Len do not see
// it; Flink's StateTtlConfig NeverReturnExpired, updated on create and
// write), is removed when it is read, and is left out of every snapshot,
// so that a restore drops it (Flink's cleanupFullSnapshot). An entry never
// read again stays in memory until then. Times are the wall clock's
// milliseconds, saved with each entry, so that an entry expires on time
// across restores; d may change between runs, but a state cannot gain or
// lose its TTL across a restore (its fingerprint says which it is).
func TTL(d time.Duration) StateOpt { return func(c *stateConfig) { c.ttl = d } }

func stateConfigOf(b *Backend, name string, opts []StateOpt) (stateConfig, error) {
	var c stateConfig
	for _, o := range opts {
		o(&c)
	}
	if c.ttl != 0 && c.ttl < time.Millisecond {
		return c, fmt.Errorf("keyed: operator %q state %q: TTL %v: want at least 1 ms", b.operator, name, c.ttl)
	}
	return c, nil
}

// stamped is an entry of a TTL state: its value and when it was last
// written (Unix ms).
type stamped[V any] struct {
	V  V
	At int64
}

// stampedCodec saves an entry of a TTL state: its time, then its value.
type stampedCodec[V any] struct{ c serde.Serde[V] }

func (s stampedCodec[V]) Encode(dst []byte, v stamped[V]) ([]byte, error) {
	return encodeStamped(dst, v.At, s.c, v.V)
}

func (s stampedCodec[V]) Decode(b []byte) (stamped[V], error) {
	at, v, err := decodeStamped(b, s.c, "TTL entry")
	return stamped[V]{V: v, At: at}, err
}

// encodeStamped appends n (8 bytes, big-endian), then v with c: a TTL
// entry's write time, a session window's end.
func encodeStamped[V any](dst []byte, n int64, c serde.Serde[V], v V) ([]byte, error) {
	return c.Encode(binary.BigEndian.AppendUint64(dst, uint64(n)), v)
}

// decodeStamped decodes what encodeStamped wrote; what names it in errors.
func decodeStamped[V any](b []byte, c serde.Serde[V], what string) (int64, V, error) {
	if len(b) < 8 {
		var zero V
		return 0, zero, fmt.Errorf("%s: %d bytes, want at least 8", what, len(b))
	}
	v, err := c.Decode(b[8:])
	return int64(binary.BigEndian.Uint64(b)), v, err
}

func (s stampedCodec[V]) Fingerprint() string { return ttlFingerprint(s.c.Fingerprint()) }

func ttlFingerprint(inner string) string { return "ttl(" + inner + ")" }

// WriterSchema and Resolve make a TTL entry's codec a serde.Resolver when
// its value's is one: resolution is the value's.
func (s stampedCodec[V]) WriterSchema() string { return writerSchema(s.c) }

func (s stampedCodec[V]) Resolve(writer string) (string, func([]byte) (stamped[V], error), error) {
	fp, c, err := resolveInner(s.c, writer)
	if err != nil {
		return "", nil, err
	}
	return ttlFingerprint(fp), stampedCodec[V]{c: c}.Decode, nil
}

// errExpired is what an encodeFunc returns for an entry left out of the
// snapshot (every part of it expired).
var errExpired = errors.New("keyed: expired")

// nowMs is the processing time TTL states use (Unix ms).
func (b *Backend) nowMs() int64 {
	if b.clock != nil {
		return b.clock()
	}
	return time.Now().UnixMilli()
}

// ttl is a TTL state's clock and time to live.
type ttl struct {
	b *Backend
	d int64 // ms
}

func (t ttl) live(at, now int64) bool { return now-at < t.d }

// ttlValueEnc encodes a TTL value, or errExpired, at now.
func ttlValueEnc[V any](c serde.Serde[V], t ttl) func(now int64) encodeFunc[stamped[V]] {
	sc := stampedCodec[V]{c: c}
	return func(now int64) encodeFunc[stamped[V]] {
		return func(dst, scratch []byte, v stamped[V]) ([]byte, []byte, error) {
			if !t.live(v.At, now) {
				return dst, scratch, errExpired
			}
			out, err := sc.Encode(dst, v)
			return out, scratch, err
		}
	}
}

// ttlListEnc encodes a TTL list's live elements, or errExpired, at now.
func ttlListEnc[V any](c serde.Serde[V], t ttl) func(now int64) encodeFunc[[]stamped[V]] {
	sc := serde.Serde[stamped[V]](stampedCodec[V]{c: c})
	return func(now int64) encodeFunc[[]stamped[V]] {
		return func(dst, scratch []byte, list []stamped[V]) ([]byte, []byte, error) {
			live := liveList(list, t, now)
			if len(live) == 0 {
				return dst, scratch, errExpired
			}
			return appendList(dst, scratch, sc, live)
		}
	}
}

// ttlMapEnc encodes a TTL map's live entries, or errExpired, at now.
func ttlMapEnc[K comparable, V any](kc serde.Serde[K], c serde.Serde[V], t ttl) func(now int64) encodeFunc[map[K]stamped[V]] {
	sc := serde.Serde[stamped[V]](stampedCodec[V]{c: c})
	return func(now int64) encodeFunc[map[K]stamped[V]] {
		return func(dst, scratch []byte, m map[K]stamped[V]) ([]byte, []byte, error) {
			live := liveMap(m, t, now)
			if len(live) == 0 {
				return dst, scratch, errExpired
			}
			return appendMap(dst, scratch, kc, sc, live)
		}
	}
}

// liveList returns list's live elements: list itself when all are.
func liveList[V any](list []stamped[V], t ttl, now int64) []stamped[V] {
	for i, e := range list {
		if !t.live(e.At, now) {
			out := append([]stamped[V](nil), list[:i]...)
			for _, e := range list[i+1:] {
				if t.live(e.At, now) {
					out = append(out, e)
				}
			}
			return out
		}
	}
	return list
}

// liveMap returns m's live entries: m itself when all are.
func liveMap[K comparable, V any](m map[K]stamped[V], t ttl, now int64) map[K]stamped[V] {
	for _, e := range m {
		if !t.live(e.At, now) {
			out := maps.Clone(m)
			maps.DeleteFunc(out, func(_ K, e stamped[V]) bool { return !t.live(e.At, now) })
			return out
		}
	}
	return m
}
