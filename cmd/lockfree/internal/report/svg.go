package report

import (
	"fmt"
	"html"
	"math"
	"strings"
)

// Color is the color of an approach in every chart: green for the
// alternative, blue for the fenced lock, red and orange for the unfenced
// locks, grey for raw SQL.
func Color(a Approach) string {
	switch a {
	case Alternative:
		return "#2e7d32"
	case FencedLock:
		return "#1565c0"
	case NaiveLock:
		return "#c62828"
	case RedisLock:
		return "#ef6c00"
	case Raw:
		return "#757575"
	}
	return "#6d4c41"
}

var esc = html.EscapeString

// SVGChart draws, per scenario, two bar panels: throughput (ops/s) and p99
// latency (ms) of each approach, with violations (or "not checked") under
// the bars. It is a standalone SVG file.
func SVGChart(reps []Report) string {
	const panelW, panelH, head = 380, 250, 30
	width := 2*panelW + 60
	height := len(reps)*(panelH+head+20) + 20
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", width, height)
	b.WriteString(`<rect width="100%" height="100%" fill="white"/>` + "\n")
	for i, rep := range reps {
		y0 := 20 + i*(panelH+head+20)
		fmt.Fprintf(&b, `<text x="20" y="%d" font-size="15" font-weight="bold">%s — %s</text>`+"\n", y0+15, esc(rep.Scenario), esc(rep.describe()))
		fmt.Fprintf(&b, `<g transform="translate(20,%d)">%s</g>`+"\n", y0+head, barPanel(rep, throughputMetric, panelW, panelH))
		fmt.Fprintf(&b, `<g transform="translate(%d,%d)">%s</g>`+"\n", 40+panelW, y0+head, barPanel(rep, p99Metric, panelW, panelH))
	}
	b.WriteString("</svg>\n")
	return b.String()
}

// metric is what a bar panel shows.
type metric struct {
	title, format string
	value         func(Result) float64
}

var (
	throughputMetric = metric{"throughput (ops/s, higher is better)", "%.0f", func(r Result) float64 { return r.OpsPerSec }}
	p99Metric        = metric{"p99 latency (ms, lower is better)", "%.1f", func(r Result) float64 { return r.P99ms }}
)

// barPanel draws one metric's bars, one per approach, as SVG elements in a
// w×h box whose origin is the top left.
func barPanel(rep Report, m metric, w, h int) string {
	var b strings.Builder
	fmt.Fprintf(&b, `<text x="0" y="12" font-weight="bold" fill="#333">%s</text>`, esc(m.title))
	base := h - 40
	fmt.Fprintf(&b, `<line x1="0" y1="%d" x2="%d" y2="%d" stroke="#999"/>`, base, w, base)
	maxV := 0.0
	for _, r := range rep.Results {
		maxV = max(maxV, m.value(r))
	}
	if maxV == 0 {
		maxV = 1
	}
	n := max(1, len(rep.Results))
	slot := w / n
	barW := min(56, slot-24)
	for j, r := range rep.Results {
		x := j*slot + (slot-barW)/2
		cx := x + barW/2
		fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">%s</text>`, cx, base+15, esc(string(r.Approach)))
		if !r.Ran() {
			fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle" fill="#777">%s</text>`, cx, base-6, r.missing())
			continue
		}
		v := m.value(r)
		bh := int(v / maxV * float64(base-40))
		fmt.Fprintf(&b, `<rect class="bar" x="%d" y="%d" width="%d" height="%d" fill="%s"><title>%s: %s</title></rect>`,
			x, base-bh, barW, bh, Color(r.Approach), esc(string(r.Approach)), fmt.Sprintf(m.format, v))
		fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">`+m.format+`</text>`, cx, base-bh-4, v)
		switch {
		case !r.Checked:
			fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle" fill="#777">not checked</text>`, cx, base+29)
		case r.Violations > 0:
			fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle" fill="#c62828" font-weight="bold">%d violations</text>`, cx, base+29, r.Violations)
		default:
			fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle" fill="#2e7d32">0 violations</text>`, cx, base+29)
		}
	}
	return b.String()
}

// series is one line of a line chart; NaN marks a missing point, where the
// line breaks.
type series struct {
	name  string
	color string
	ys    []float64
	// dashed lines mark approaches whose check found violations at some
	// point.
	dashed bool
	// failed marks, by index, the missing points at which the approach
	// failed: an × on the axis.
	failed map[int]bool
}

// lineChart draws series against xs (spaced by their logarithm, as sweeps
// grow by factors) as a standalone <svg> of w×h.
func lineChart(title, xLabel string, xs []int, ss []series, w, h int) string {
	const left, right, top, bottom = 58, 110, 28, 38
	pw, ph := float64(w-left-right), float64(h-top-bottom)
	maxY := 0.0
	for _, s := range ss {
		for _, y := range s.ys {
			if !math.IsNaN(y) {
				maxY = max(maxY, y)
			}
		}
	}
	step := niceStep(maxY / 4)
	top4 := step * math.Ceil(maxY/step)
	if top4 == 0 {
		top4 = 1
	}
	xpos := func(i int) float64 {
		if len(xs) == 1 {
			return left + pw/2
		}
		lo, hi := math.Log(float64(xs[0])), math.Log(float64(xs[len(xs)-1]))
		if hi == lo {
			return left + pw*float64(i)/float64(len(xs)-1)
		}
		return left + pw*(math.Log(float64(xs[i]))-lo)/(hi-lo)
	}
	ypos := func(y float64) float64 { return top + ph - ph*y/top4 }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="line-chart" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %d %d" width="%d" height="%d" font-family="sans-serif" font-size="11">`, w, h, w, h)
	fmt.Fprintf(&b, `<text x="%d" y="16" font-weight="bold" font-size="12" fill="#333">%s</text>`, left, esc(title))
	for y := 0.0; y <= top4+step/2; y += step {
		fmt.Fprintf(&b, `<line x1="%d" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#eee"/><text x="%d" y="%.1f" text-anchor="end" fill="#666">%s</text>`,
			left, left+pw, ypos(y), ypos(y), left-6, ypos(y)+4, compact(y))
	}
	for i, x := range xs {
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%d" y2="%.1f" stroke="#eee"/><text x="%.1f" y="%.1f" text-anchor="middle" fill="#666">%d</text>`,
			xpos(i), xpos(i), top, top+ph, xpos(i), top+ph+14, x)
	}
	fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle" fill="#333">%s</text>`, left+pw/2, h-4, esc(xLabel))
	for k, s := range ss {
		dash := ""
		if s.dashed {
			dash = ` stroke-dasharray="5 3"`
		}
		var pts []string
		line := func() {
			if len(pts) > 0 {
				fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"%s/>`, strings.Join(pts, " "), s.color, dash)
			}
			pts = nil
		}
		for i, y := range s.ys {
			if i >= len(xs) {
				break
			}
			if math.IsNaN(y) {
				line()
				if s.failed[i] {
					fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle" font-weight="bold" fill="%s">×<title>%s failed at %d</title></text>`, xpos(i), top+ph-4, s.color, esc(s.name), xs[i])
				}
				continue
			}
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", xpos(i), ypos(y)))
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"><title>%s at %d: %s</title></circle>`, xpos(i), ypos(y), s.color, esc(s.name), xs[i], compact(y))
		}
		line()
		ly := float64(top + 14 + 16*k)
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="%s" stroke-width="2"%s/><text x="%.1f" y="%.1f" fill="#333">%s</text>`,
			left+pw+10, left+pw+26, ly, ly, s.color, dash, left+pw+30, ly+4, esc(s.name))
	}
	b.WriteString("</svg>")
	return b.String()
}

// niceStep rounds x up to 1, 2 or 5 times a power of ten.
func niceStep(x float64) float64 {
	if x <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(x)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= x {
			return m * p
		}
	}
	return 10 * p
}

// compact prints a figure in a few characters: 950, 12k, 1.5M, 0.25.
func compact(y float64) string {
	switch {
	case y >= 1e6:
		return strings.TrimSuffix(fmt.Sprintf("%.1f", y/1e6), ".0") + "M"
	case y >= 1e4:
		return fmt.Sprintf("%.0fk", y/1e3)
	case y >= 1e3:
		return strings.TrimSuffix(fmt.Sprintf("%.1f", y/1e3), ".0") + "k"
	case y >= 10 || y == 0:
		return fmt.Sprintf("%.0f", y)
	default:
		return strings.TrimRight(strings.TrimRight(fmt.Sprintf("%.2f", y), "0"), ".")
	}
}
