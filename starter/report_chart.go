package main

import (
	"fmt"
	"html"
	"math"
	"strings"
)

// chart is one SVG line plot of the report.
type chart struct {
	Title, XLabel, YLabel string
	X                     []string             // tick label of each point
	Series                map[string][]float64 // NaN: no point there
	// Rates: the y axis is fixed at [0, 1], so runs and steps compare at a
	// glance. Fixed: at [Lo, Hi] (points outside drawn at the edge, their
	// value in the tooltip).
	Rates, Fixed bool
	Lo, Hi       float64
}

// steps are the tick labels of PPO steps.
func stepTicks(steps []int) []string {
	out := make([]string, len(steps))
	for i, s := range steps {
		out[i] = fmt.Sprint(s)
	}
	return out
}

func (c chart) yRange() (lo, hi float64, ok bool) {
	if c.Rates {
		return 0, 1, true
	}
	if c.Fixed {
		return c.Lo, c.Hi, true
	}
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, ys := range c.Series {
		for _, y := range ys {
			if !math.IsNaN(y) {
				lo, hi = math.Min(lo, y), math.Max(hi, y)
			}
		}
	}
	if math.IsInf(lo, 0) {
		return 0, 0, false
	}
	if hi == lo {
		hi, lo = hi+0.5, lo-0.5
	}
	return lo, hi, true
}

func (c chart) svg() string {
	const w, h, left, right, top, bottom = 440.0, 210.0, 56.0, 16.0, 20.0, 44.0
	lo, hi, ok := c.yRange()
	if len(c.X) == 0 || !ok {
		return fmt.Sprintf("<h3>%s</h3><p>no data</p>", html.EscapeString(c.Title))
	}
	px := func(i int) float64 {
		if len(c.X) == 1 {
			return left + (w-left-right)/2
		}
		return left + float64(i)*(w-left-right)/float64(len(c.X)-1)
	}
	py := func(y float64) float64 { return h - bottom - (math.Max(lo, math.Min(hi, y))-lo)/(hi-lo)*(h-top-bottom) }
	colors := []string{"#1f77b4", "#d62728", "#2ca02c", "#9467bd"}
	var b strings.Builder
	fmt.Fprintf(&b, `<figure><figcaption>%s</figcaption><svg width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" xmlns="http://www.w3.org/2000/svg" font-family="sans-serif">`, html.EscapeString(c.Title), w, h, w, h)
	fmt.Fprintf(&b, `<line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="#999"/><line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="#999"/>`, left, h-bottom, w-right, h-bottom, left, top, left, h-bottom)
	for _, y := range []float64{lo, (lo + hi) / 2, hi} {
		fmt.Fprintf(&b, `<line x1="%.0f" y1="%.1f" x2="%.0f" y2="%.1f" stroke="#eee"/><text x="%.0f" y="%.1f" font-size="10" text-anchor="end">%.3g</text>`, left, py(y), w-right, py(y), left-4, py(y)+3, y)
	}
	for i, xv := range c.X {
		fmt.Fprintf(&b, `<text x="%.1f" y="%.0f" font-size="10" text-anchor="middle">%s</text>`, px(i), h-bottom+14, html.EscapeString(xv))
	}
	fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" font-size="11" text-anchor="middle">%s</text>`, left+(w-left-right)/2, h-8, html.EscapeString(c.XLabel))
	fmt.Fprintf(&b, `<text x="12" y="%.0f" font-size="11" text-anchor="middle" transform="rotate(-90 12 %.0f)">%s</text>`, top+(h-top-bottom)/2, top+(h-top-bottom)/2, html.EscapeString(c.YLabel))
	for k, name := range sortedStrings(c.Series) {
		col := colors[k%len(colors)]
		var pts []string
		for i, y := range c.Series[name] {
			if math.IsNaN(y) || i >= len(c.X) {
				continue
			}
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(i), py(y)))
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"><title>%s at %s: %.4g</title></circle>`, px(i), py(y), col, html.EscapeString(name), html.EscapeString(c.X[i]), y)
		}
		fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"/>`, strings.Join(pts, " "), col)
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" font-size="11" fill="%s">%s</text>`, w-right-110, top+12+14*float64(k), col, html.EscapeString(name))
	}
	b.WriteString("</svg></figure>")
	return b.String()
}
