package load

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"strings"
)

// The chart's geometry, in SVG user units.
const (
	svgWidth   = 960
	svgHeight  = 520
	plotLeft   = 70
	plotTop    = 70
	plotRight  = 640
	plotBottom = 460
)

// seriesColors are distinguishable on white and in grey print, in
// LatencyNames order.
var seriesColors = []string{"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b"}

// WriteSVG draws the latency distributions as cumulative distribution
// curves on one chart: x is the latency on a log scale, y the share of
// samples at or below it, one series (a <g class="series"
// data-metric="NAME">) per metric, so p50, p90 and p99 read off where a
// curve crosses 50, 90 and 99. It is plain SVG written by hand: no
// script, no external resource, viewable in any browser.
func (rep *Report) WriteSVG(w io.Writer) error {
	var b bytes.Buffer
	elo, ehi := rep.latencyDecades()
	lo, hi := math.Pow(10, float64(elo)), math.Pow(10, float64(ehi))
	x := func(v float64) float64 {
		v = math.Max(v, lo)
		return plotLeft + (math.Log10(v)-math.Log10(lo))/(math.Log10(hi)-math.Log10(lo))*(plotRight-plotLeft)
	}
	y := func(pct float64) float64 { return plotBottom - pct/100*(plotBottom-plotTop) }

	fmt.Fprintf(&b, `<?xml version="1.0" encoding="UTF-8"?>`+"\n")
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n",
		svgWidth, svgHeight, svgWidth, svgHeight)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", svgWidth, svgHeight)
	wl := rep.Workload
	title := "rein bench: latency distributions (cumulative, log scale)"
	sub := fmt.Sprintf("%d sessions × %d messages, %d deltas %s apart, %d tool call(s), stops %.0f%% (%s); ",
		wl.Sessions, wl.Messages, wl.Chunks, msDuration(wl.ChunkDelayMS), wl.ToolCalls, wl.StopFraction*100, wl.StopMode)
	if rep.Target.InProcess {
		sub += "in-process server, store " + rep.Target.Store
	} else {
		sub += "server " + rep.Target.URL
	}
	fmt.Fprintf(&b, `<text x="%d" y="28" font-size="16" font-weight="bold">%s</text>`+"\n", plotLeft, esc(title))
	fmt.Fprintf(&b, `<text x="%d" y="48" fill="#555">%s</text>`+"\n", plotLeft, esc(sub))

	// Grid: a vertical line per decade (and at 2× and 5×), horizontal
	// lines at the percentiles the table reports.
	b.WriteString(`<g class="grid" stroke="#ddd" stroke-width="1">` + "\n")
	for e := elo; e <= ehi; e++ {
		for _, m := range []float64{1, 2, 5} {
			if e == ehi && m != 1 {
				break
			}
			v := m * math.Pow(10, float64(e))
			stroke := ""
			if m != 1 {
				stroke = ` stroke="#f0f0f0"`
			}
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d"%s/>`+"\n", x(v), plotTop, x(v), plotBottom, stroke)
		}
	}
	for _, p := range []float64{0, 25, 50, 75, 90, 99, 100} {
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f"/>`+"\n", plotLeft, y(p), plotRight, y(p))
	}
	b.WriteString("</g>\n")
	b.WriteString(`<g class="axes" fill="#333">` + "\n")
	for e := elo; e <= ehi; e++ {
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", x(math.Pow(10, float64(e))), plotBottom+18, esc(axisLabel(e)))
	}
	// p100 would print over p99; the top edge is the maximum.
	for _, p := range []float64{0, 25, 50, 75, 90, 99} {
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">p%g</text>`+"\n", plotLeft-8, y(p)+4, p)
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">latency</text>`+"\n", (plotLeft+plotRight)/2, plotBottom+40)
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#999"/>`+"\n", plotLeft, plotTop, plotRight-plotLeft, plotBottom-plotTop)
	b.WriteString("</g>\n")

	for i, l := range rep.Latencies {
		color := seriesColors[i%len(seriesColors)]
		label := latencyLabels[l.Name]
		if label == "" {
			label = l.Name
		}
		fmt.Fprintf(&b, `<g class="series" data-metric="%s" data-count="%d">`+"\n", esc(l.Name), l.Count)
		if len(l.CDFMS) > 0 {
			var pts strings.Builder
			for p, v := range l.CDFMS {
				fmt.Fprintf(&pts, "%.1f,%.1f ", x(v), y(float64(p)))
			}
			fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", color, strings.TrimSpace(pts.String()))
		}
		ly := plotTop + 10 + i*44
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="3"/>`+"\n", plotRight+20, ly, plotRight+44, ly, color)
		fmt.Fprintf(&b, `<text x="%d" y="%d">%s</text>`+"\n", plotRight+52, ly+4, esc(label))
		detail := "no samples"
		if l.Count > 0 {
			detail = fmt.Sprintf("n=%d  p50 %s  p99 %s  max %s ms", l.Count, msCell(l.P50MS), msCell(l.P99MS), msCell(l.MaxMS))
		}
		fmt.Fprintf(&b, `<text x="%d" y="%d" fill="#555" font-size="11">%s</text>`+"\n", plotRight+52, ly+20, esc(detail))
		b.WriteString("</g>\n")
	}
	b.WriteString("</svg>\n")
	_, err := w.Write(b.Bytes())
	return err
}

// latencyDecades is the chart's x range as powers of ten of
// milliseconds: whole decades around every sample, with latencies below
// a microsecond drawn at one.
func (rep *Report) latencyDecades() (lo, hi int) {
	vlo, vhi := math.Inf(1), math.Inf(-1)
	for _, l := range rep.Latencies {
		for _, v := range l.CDFMS {
			v = math.Max(v, 0.001)
			vlo, vhi = math.Min(vlo, v), math.Max(vhi, v)
		}
	}
	if math.IsInf(vlo, 1) {
		return -1, 3
	}
	lo, hi = int(math.Floor(math.Log10(vlo))), int(math.Ceil(math.Log10(vhi)))
	if hi <= lo {
		hi = lo + 1
	}
	return lo, hi
}

// axisLabel names the decade 10^e milliseconds.
func axisLabel(e int) string {
	units := []struct {
		name string
		exp  int // the unit is 10^exp ms
	}{{"s", 3}, {"ms", 0}, {"µs", -3}}
	for _, u := range units {
		if e >= u.exp || u.name == "µs" {
			v := "1" + strings.Repeat("0", max(e-u.exp, 0))
			return v + " " + u.name
		}
	}
	return ""
}

// esc escapes text for XML content and attribute values.
func esc(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}
