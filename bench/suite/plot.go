package main

import (
	"fmt"
	"image/color"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// plotThroughput draws the output rate over time of each system's run in
// round, one line per system, to file (PNG). The output of an
// exactly-once system comes in steps, one per committed checkpoint or
// transaction: each peak is a commit.
func plotThroughput(all []figures, round, file string) error {
	return plotRuns(all, round, file, "Output visible to a read_committed reader", "results/s (250 ms buckets)", false,
		func(i int, v, _, _ float64) (float64, float64) { return float64(i), v })
}

// plotProgress draws, per system of round, the results visible over time
// (cumulative, in thousands), to file (PNG): each step up is a commit of
// an exactly-once system, and the slope is its throughput.
func plotProgress(all []figures, round, file string) error {
	return plotRuns(all, round, file, "Results committed and visible to a read_committed reader", "results (thousands)", true,
		func(i int, _, total, step float64) (float64, float64) { return float64(i + 1), total / 1000 })
}

// plotRuns draws one line per system of round from its Series: point
// gives the i-th point's x (in steps) and y from the bucket's rate v and
// the running total of results.
func plotRuns(all []figures, round, file, title, ylabel string, legendLeft bool, point func(i int, v, total, step float64) (float64, float64)) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s, round %s", title, round)
	p.X.Label.Text = "seconds since the system started"
	p.Y.Label.Text = ylabel
	drawn := 0
	for _, f := range all {
		if f.Round != round || len(f.Series) == 0 {
			continue
		}
		pts := make(plotter.XYs, len(f.Series))
		total := 0.0
		for i, v := range f.Series {
			total += v * f.SeriesStepSec
			x, y := point(i, v, total, f.SeriesStepSec)
			pts[i].X, pts[i].Y = x*f.SeriesStepSec, y
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return err
		}
		l.Color = systemColor(f.System)
		p.Add(l)
		p.Legend.Add(f.System, l)
		drawn++
	}
	if drawn == 0 {
		return nil
	}
	p.Legend.Top, p.Legend.Left = true, legendLeft
	return p.Save(10*vg.Inch, 5*vg.Inch, file)
}

// palette holds one color per system, in the order of systems() (the
// matplotlib "tab10" colors): a system keeps its color in every plot and
// round, whatever order the round ran in.
var palette = []color.RGBA{
	{31, 119, 180, 255},  // blue
	{255, 127, 14, 255},  // orange
	{44, 160, 44, 255},   // green
	{214, 39, 40, 255},   // red
	{148, 103, 189, 255}, // purple
	{140, 86, 75, 255},   // brown
	{227, 119, 194, 255}, // pink
	{127, 127, 127, 255}, // grey
	{188, 189, 34, 255},  // olive
	{23, 190, 207, 255},  // cyan
}

// systemColor is system's color: by its place in systems(), and for a name
// systems() no longer has (a former run's figures), one past them.
func systemColor(name string) color.Color {
	i := slices.IndexFunc(systems(), func(s system) bool { return s.name == name })
	if i < 0 {
		i = len(systems())
	}
	return palette[i%len(palette)]
}

// plotLatency draws each system's end-to-end latency p50 and p99 (median
// over rounds) as bars, to file (PNG).
func plotLatency(paced []pacedFigures, file string) error {
	type pq struct{ p50, p99 []float64 }
	by := map[string]*pq{}
	var names []string
	for _, f := range paced {
		if f.RecoverySec >= 0 || f.Err != "" {
			continue // recovery runs, and failed ones
		}
		if by[f.System] == nil {
			by[f.System] = &pq{}
			names = append(names, f.System)
		}
		by[f.System].p50 = append(by[f.System].p50, f.LatencyP50Ms)
		by[f.System].p99 = append(by[f.System].p99, f.LatencyP99Ms)
	}
	if len(names) == 0 {
		return nil
	}
	median := func(v []float64) float64 {
		v = slices.Clone(v)
		slices.Sort(v)
		return v[len(v)/2]
	}
	var p50, p99 plotter.Values
	for _, n := range names {
		p50 = append(p50, median(by[n].p50))
		p99 = append(p99, median(by[n].p99))
	}
	p := plot.New()
	p.Title.Text = fmt.Sprintf("End-to-end latency at %d events/s (median over rounds)", paced[0].Rate)
	p.Y.Label.Text = "ms, event produced to result visible"
	w := vg.Points(30)
	b50, err := plotter.NewBarChart(p50, w)
	if err != nil {
		return err
	}
	b50.Color, b50.Offset = color.RGBA{R: 80, G: 130, B: 200, A: 255}, -w/2
	b99, err := plotter.NewBarChart(p99, w)
	if err != nil {
		return err
	}
	b99.Color, b99.Offset = color.RGBA{R: 220, G: 110, B: 60, A: 255}, w/2
	p.Add(b50, b99)
	p.Legend.Add("p50", b50)
	p.Legend.Add("p99", b99)
	p.Legend.Top, p.Legend.Left = true, true
	p.Y.Max *= 1.15 // room for the legend above the bars
	p.NominalX(names...)
	return p.Save(vg.Length(1.6*float64(len(names))+3)*vg.Inch, 5*vg.Inch, file)
}
