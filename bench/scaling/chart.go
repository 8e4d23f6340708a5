package main

import (
	"bytes"
	"fmt"
	"html"
	"math"
)

// chart draws the server's CPU per event against the number of sessions
// (left) and against the deltas per run (right), each on a logarithmic x
// axis, with the 50 µs target as a dashed line.
func chart(bySessions, byChunks []Point, base int) []byte {
	const w, h, panel, top, bottom, left = 860, 360, 400, 40, 60, 60
	ymax := 50.0
	for _, p := range append(append([]Point(nil), bySessions...), byChunks...) {
		ymax = math.Max(ymax, p.CPUPerEventUS)
	}
	ymax = math.Ceil(ymax*1.15/20) * 20
	var b bytes.Buffer
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", w, h)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", w, h)
	draw := func(x0 int, title, xlabel string, pts []Point, xOf func(Point) int) {
		plotW, plotH := panel-left-20, h-top-bottom
		if len(pts) == 0 {
			return
		}
		lo, hi := math.Log10(float64(xOf(pts[0]))), math.Log10(float64(xOf(pts[len(pts)-1])))
		if hi <= lo {
			hi = lo + 1
		}
		px := func(v int) float64 {
			return float64(x0+left) + (math.Log10(float64(v))-lo)/(hi-lo)*float64(plotW)
		}
		py := func(us float64) float64 { return float64(top+plotH) - us/ymax*float64(plotH) }
		fmt.Fprintf(&b, `<text x="%d" y="%d" font-weight="bold">%s</text>`+"\n", x0+left, top-15, html.EscapeString(title))
		// Axes, y grid and labels.
		for y := 0.0; y <= ymax; y += ymax / 5 {
			fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#e5e5e5"/>`+"\n", x0+left, py(y), x0+left+plotW, py(y))
			fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%.0f</text>`+"\n", x0+left-6, py(y)+4, y)
		}
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>`+"\n", x0+left, top+plotH, x0+left+plotW, top+plotH)
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>`+"\n", x0+left, top, x0+left, top+plotH)
		fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">%s</text>`+"\n", x0+left+plotW/2, h-15, html.EscapeString(xlabel))
		fmt.Fprintf(&b, `<text transform="translate(%d %d) rotate(-90)" text-anchor="middle">server CPU per event (µs)</text>`+"\n", x0+15, top+plotH/2)
		// The target.
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#c0392b" stroke-dasharray="6 4"/>`+"\n", x0+left, py(50), x0+left+plotW, py(50))
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" fill="#c0392b" text-anchor="end">target 50 µs</text>`+"\n", x0+left+plotW, py(50)-5)
		// The points.
		var line bytes.Buffer
		for i, p := range pts {
			if i > 0 {
				line.WriteByte(' ')
			}
			fmt.Fprintf(&line, "%.1f,%.1f", px(xOf(p)), py(p.CPUPerEventUS))
		}
		fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="#2c6fbb" stroke-width="2"/>`+"\n", line.String())
		for _, p := range pts {
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="4" fill="#2c6fbb"/>`+"\n", px(xOf(p)), py(p.CPUPerEventUS))
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%.0f</text>`+"\n", px(xOf(p)), py(p.CPUPerEventUS)-9, p.CPUPerEventUS)
			fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%d</text>`+"\n", px(xOf(p)), top+plotH+16, xOf(p))
		}
	}
	draw(0, "by concurrent sessions (20 deltas a run)", "sessions, one message each (log scale)", bySessions, func(p Point) int { return p.Sessions })
	draw(panel+40, fmt.Sprintf("by events per run (%d sessions)", base), "deltas per run (log scale)", byChunks, func(p Point) int { return p.Chunks })
	b.WriteString("</svg>\n")
	return b.Bytes()
}
