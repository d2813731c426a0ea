package main

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// DurationStats summarises a sample of durations, in milliseconds.
// Percentiles are nearest-rank: p99 is the smallest sample with at least
// 99% of the samples at or below it.
type DurationStats struct {
	Count  int     `json:"count"`
	MeanMs float64 `json:"mean_ms"`
	MinMs  float64 `json:"min_ms"`
	P50Ms  float64 `json:"p50_ms"`
	P90Ms  float64 `json:"p90_ms"`
	P95Ms  float64 `json:"p95_ms"`
	P99Ms  float64 `json:"p99_ms"`
	MaxMs  float64 `json:"max_ms"`
}

func durationStats(ds []time.Duration) DurationStats {
	if len(ds) == 0 {
		return DurationStats{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	var sum time.Duration
	for _, d := range s {
		sum += d
	}
	return DurationStats{
		Count:  len(s),
		MeanMs: ms(sum) / float64(len(s)),
		MinMs:  ms(s[0]),
		P50Ms:  ms(rank(s, 0.50)),
		P90Ms:  ms(rank(s, 0.90)),
		P95Ms:  ms(rank(s, 0.95)),
		P99Ms:  ms(rank(s, 0.99)),
		MaxMs:  ms(s[len(s)-1]),
	}
}

// rank returns the nearest-rank q-quantile of sorted s (len(s) > 0).
func rank(s []time.Duration, q float64) time.Duration {
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[min(max(i, 0), len(s)-1)]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func (s DurationStats) String() string {
	return fmt.Sprintf("n=%d mean=%.1fms min=%.1fms p50=%.1fms p90=%.1fms p95=%.1fms p99=%.1fms max=%.1fms",
		s.Count, s.MeanMs, s.MinMs, s.P50Ms, s.P90Ms, s.P95Ms, s.P99Ms, s.MaxMs)
}
