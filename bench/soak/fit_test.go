package main

import (
	"math"
	"testing"
)

// TestPooledSlope: lives that each start from a level of their own and
// grow alike share one slope; lives flat at levels that differ have none,
// though a fit over the whole run would see one.
func TestPooledSlope(t *testing.T) {
	var grow, saw []sample
	for life := 0; life < 3; life++ {
		for i := 0; i < 10; i++ {
			tt := float64(life*100 + i*10)
			grow = append(grow, sample{t: tt, life: life, rss: 50 + 7*float64(life) + 0.5*float64(i*10)})
			saw = append(saw, sample{t: tt, life: life, rss: 50 + 20*float64(life)})
		}
	}
	rss := func(s sample) float64 { return s.rss }
	all := func(sample) bool { return true }
	if got, ok := pooledSlope(grow, rss, all); !ok || math.Abs(got-0.5) > 1e-9 {
		t.Errorf("growing lives: slope %v (%v), want 0.5", got, ok)
	}
	if got, ok := pooledSlope(saw, rss, all); !ok || math.Abs(got) > 1e-9 {
		t.Errorf("flat lives at rising levels: slope %v (%v), want 0", got, ok)
	}
	if _, ok := pooledSlope(saw, rss, func(sample) bool { return false }); ok {
		t.Error("no samples kept, and yet a slope")
	}
}
