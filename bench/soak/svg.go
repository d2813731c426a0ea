package main

import (
	"bytes"
	"fmt"
	"math"
)

// plot draws one panel per series against minutes since the start: the
// samples as a line (RSS with its peak VmHWM dashed), each SIGKILL as a
// grey vertical line, the slope and its limit in the panel's title.
func plot(cfg config, res *result, name string) []byte {
	const w, ph, left, top, gap = 720, 130, 60, 40, 40
	var b bytes.Buffer
	h := top + len(series)*(ph+gap)
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">`+"\n", w, h)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/><text x="%d" y="20" font-size="14">soak %s: %v of input at %d events/s, %d SIGKILLs (grey)</text>`+"\n",
		left, name, cfg.duration, cfg.rate, len(res.kills))
	tmax := 1.0
	if n := len(res.samples); n > 0 {
		tmax = res.samples[n-1].t
	}
	pw := float64(w - left - 20)
	for i, sr := range series {
		y0 := float64(top + i*(ph+gap) + 14)
		ymax := 0.0
		for _, s := range res.samples {
			ymax = max(ymax, sr.y(s))
			if sr.name == "rss" {
				ymax = max(ymax, s.hwm)
			}
		}
		ymax = niceCeil(ymax)
		x := func(t float64) float64 { return float64(left) + pw*t/tmax }
		y := func(v float64) float64 { return y0 + ph - ph*v/ymax }
		title := fmt.Sprintf("%s (%s): slope %+.2f/h, limit %.2f/h", sr.name, sr.unit, res.slopes[sr.name], sr.limit(cfg.limits))
		if sr.unit == "" {
			title = fmt.Sprintf("%s: slope %+.2f/h, limit %.2f/h", sr.name, res.slopes[sr.name], sr.limit(cfg.limits))
		}
		if sr.whole {
			title += " (whole run after its first tenth)"
		} else {
			title += " (per life, after each life's warm-up)"
		}
		fmt.Fprintf(&b, `<text x="%d" y="%.0f">%s</text>`+"\n", left, y0-4, title)
		fmt.Fprintf(&b, `<rect x="%d" y="%.0f" width="%.0f" height="%d" fill="none" stroke="#999"/>`+"\n", left, y0, pw, ph)
		fmt.Fprintf(&b, `<text x="%d" y="%.0f" text-anchor="end">%g</text><text x="%d" y="%.0f" text-anchor="end">0</text>`+"\n", left-4, y0+8, ymax, left-4, y0+ph)
		for _, k := range res.kills {
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%.0f" x2="%.1f" y2="%.0f" stroke="#ccc"/>`+"\n", x(k), y0, x(k), y0+ph)
		}
		line := func(v func(sample) float64, style string) {
			prev := -1
			for _, s := range res.samples {
				if sr.reported && !s.haveReports {
					continue
				}
				if s.life != prev {
					if prev >= 0 {
						b.WriteString(`"/>` + "\n")
					}
					fmt.Fprintf(&b, `<polyline fill="none" %s points="`, style)
					prev = s.life
				}
				fmt.Fprintf(&b, "%.1f,%.1f ", x(s.t), y(v(s)))
			}
			if prev >= 0 {
				b.WriteString(`"/>` + "\n")
			}
		}
		if sr.name == "rss" {
			line(func(s sample) float64 { return s.hwm }, `stroke="#d62728" stroke-dasharray="3,3"`)
		}
		line(sr.y, `stroke="#1f77b4"`)
	}
	// The time axis, under the last panel.
	yb := float64(top + len(series)*(ph+gap) - gap + 28)
	for _, m := range ticks(tmax / 60) {
		fmt.Fprintf(&b, `<text x="%.1f" y="%.0f" text-anchor="middle">%g</text>`, float64(left)+pw*m*60/tmax, yb, m)
	}
	fmt.Fprintf(&b, `<text x="%d" y="%.0f">minutes</text>`+"\n", w-70, yb+14)
	b.WriteString("</svg>\n")
	return b.Bytes()
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}

// ticks are about six round marks from 0 to max.
func ticks(max float64) []float64 {
	step := niceCeil(max / 6)
	var ts []float64
	for t := 0.0; t <= max+1e-9; t += step {
		ts = append(ts, t)
	}
	return ts
}
