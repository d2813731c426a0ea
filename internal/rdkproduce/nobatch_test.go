//go:build !cgo || kordnobatch

package rdkproduce_test

import (
	"errors"
	"testing"

	"github.com/kordproject/kord/internal/rdkproduce"
)

// TestUnsupported: with the kordnobatch tag, New fails with ErrUnsupported
// and Enabled is false, so the caller keeps the per-record Produce.
func TestUnsupported(t *testing.T) {
	if rdkproduce.Enabled {
		t.Fatal("Enabled under kordnobatch")
	}
	if _, err := rdkproduce.New(nil); !errors.Is(err, rdkproduce.ErrUnsupported) {
		t.Fatalf("New: %v, want ErrUnsupported", err)
	}
	var w *rdkproduce.Writer
	if _, err := w.Write([]rdkproduce.Record{{Topic: "t"}}); !errors.Is(err, rdkproduce.ErrUnsupported) {
		t.Fatalf("Write: %v, want ErrUnsupported", err)
	}
}
