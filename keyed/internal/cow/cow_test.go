package cow

import (
	"slices"
	"testing"
)

// TestCloneSharesIndexUntilOwned: a clone copies the values only; writing
// a value leaves the original's as it was, and adding or removing a key
// (after Own) leaves the original's index, keys and free slots as they
// were.
func TestCloneSharesIndexUntilOwned(t *testing.T) {
	orig := &Table[int]{Idx: map[string]uint32{}, OwnAll: true}
	for i, k := range []string{"a", "b", "c"} {
		orig.Insert([]byte(k), i)
	}
	c := orig.Clone(1)
	if !c.Shared || c.Epoch != 1 || c.OwnAll {
		t.Fatalf("clone: shared %v, epoch %d, ownAll %v", c.Shared, c.Epoch, c.OwnAll)
	}
	c.Vals[c.Idx["b"]] = 10
	if orig.Vals[orig.Idx["b"]] != 1 {
		t.Fatalf("a write to the clone changed the original's value")
	}
	i := c.Idx["a"]
	c.Own()
	delete(c.Idx, "a")
	c.Vals[i], c.Keys[i] = 0, ""
	c.Free = append(c.Free, i)
	c.Insert([]byte("d"), 4)
	if _, ok := orig.Idx["a"]; !ok || len(orig.Free) != 0 || !slices.Equal(orig.Keys, []string{"a", "b", "c"}) {
		t.Fatalf("removing and adding keys in the clone changed the original: idx %v, keys %v, free %v", orig.Idx, orig.Keys, orig.Free)
	}
	if c.Idx["d"] != i || c.InUse() != nil {
		t.Fatalf("the freed slot %d was not reused: idx %v, in use %v", i, c.Idx, c.InUse())
	}
}

// TestOwned: a clone owns no value until SetOwned; a table made with
// OwnAll owns every value.
func TestOwned(t *testing.T) {
	c := (&Table[int]{Idx: map[string]uint32{}, OwnAll: true}).Clone(1)
	for _, i := range []uint32{0, 63, 64, 200} {
		if c.IsOwned(i) {
			t.Fatalf("slot %d owned before SetOwned", i)
		}
		c.SetOwned(i)
		if !c.IsOwned(i) {
			t.Fatalf("slot %d not owned after SetOwned", i)
		}
	}
	if c.IsOwned(1) || c.IsOwned(65) {
		t.Fatal("SetOwned owned other slots")
	}
	if !(&Table[int]{OwnAll: true}).IsOwned(1000) {
		t.Fatal("OwnAll does not own every slot")
	}
}
