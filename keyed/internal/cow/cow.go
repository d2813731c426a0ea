// Package cow is the table keyed state keeps each key group's keys and
// values in: slots indexed by key, copied on write while a snapshot holds
// the table (at key-group granularity), so that a snapshot is taken in
// O(key groups) and encoded while processing goes on.
package cow

import (
	"maps"
	"slices"
)

// Table is one state's keys and values in one key group. Idx maps a key to
// its slot in Vals; deleted slots are reused through Free. The indirection
// lets an existing key be updated without allocating (m[string(key)] = v
// allocates the key string on every assignment; a lookup does not).
//
// A Table is immutable once a snapshot holds it and its Epoch is below
// the backend's (the number of snapshots taken): a write then clones it
// first (copy-on-write), unless every snapshot has been released.
type Table[T any] struct {
	Idx   map[string]uint32
	Vals  []T
	Keys  []string // Keys[i] is slot i's key while slot i is in use
	Free  []uint32
	Epoch uint64 // the backend's epoch when this table was made

	// For a map state: whether Vals[i]'s inner map belongs to this table
	// (OwnAll, or bit i of Owned) or is still shared with the table it was
	// cloned from.
	OwnAll bool
	Owned  []uint64

	// Shared: Idx, Keys and Free are still those of the table this one was
	// cloned from (and that a snapshot holds); Own copies them before a
	// key is added or removed.
	Shared bool
}

// Clone copies t for writing while a snapshot holds t. Only the values are
// copied: the index is shared until a key is added or removed (see Own),
// so that updating existing keys, the common case, costs one copy of Vals
// per key group and checkpoint rather than a map rebuild.
func (t *Table[T]) Clone(epoch uint64) *Table[T] {
	return &Table[T]{Idx: t.Idx, Vals: slices.Clone(t.Vals), Keys: t.Keys, Free: t.Free, Epoch: epoch, Shared: true}
}

// Own gives t its own Idx, Keys and Free before they change.
func (t *Table[T]) Own() {
	if t.Shared {
		t.Idx, t.Keys, t.Free, t.Shared = maps.Clone(t.Idx), slices.Clone(t.Keys), slices.Clone(t.Free), false
	}
}

// Insert stores key, copied, and v in a free slot, indexes it and
// returns the slot.
func (t *Table[T]) Insert(key []byte, v T) uint32 {
	t.Own()
	k := string(key)
	i := t.Slot(k, v)
	t.Idx[k] = i
	return i
}

// Slot stores key and v in a free slot, or a new one, and returns it;
// the caller indexes it.
func (t *Table[T]) Slot(key string, v T) uint32 {
	var i uint32
	if n := len(t.Free); n > 0 {
		i = t.Free[n-1]
		t.Free = t.Free[:n-1]
		t.Vals[i], t.Keys[i] = v, key
	} else {
		i = uint32(len(t.Vals))
		t.Vals = append(t.Vals, v)
		t.Keys = append(t.Keys, key)
	}
	return i
}

// InUse reports, for each slot, whether it holds a key: all but the free
// ones. nil means all.
func (t *Table[T]) InUse() []bool {
	if len(t.Free) == 0 {
		return nil
	}
	use := make([]bool, len(t.Vals))
	for i := range use {
		use[i] = true
	}
	for _, i := range t.Free {
		use[i] = false
	}
	return use
}

// IsOwned reports whether slot i's value belongs to t (see OwnAll).
func (t *Table[T]) IsOwned(i uint32) bool {
	return t.OwnAll || int(i/64) < len(t.Owned) && t.Owned[i/64]&(1<<(i%64)) != 0
}

// SetOwned records that slot i's value belongs to t.
func (t *Table[T]) SetOwned(i uint32) {
	if t.OwnAll {
		return
	}
	for int(i/64) >= len(t.Owned) {
		t.Owned = append(t.Owned, 0)
	}
	t.Owned[i/64] |= 1 << (i % 64)
}
