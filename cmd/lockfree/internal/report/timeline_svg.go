package report

import (
	"fmt"
	"math"
	"strings"
)

// Timeline geometry, in SVG units (the SVG scales to its container).
const (
	tlWidth  = 1100
	tlLeft   = 110
	tlRight  = 16
	tlTop    = 8
	tlLane   = 28
	tlBottom = 30
)

// timelineSVG draws t: one lane per worker with its lease tenures (bars
// labelled with the token), faults (shaded), accepted and rejected writes
// (ticks), uncertain writes, and violations linked by an arrow to the write
// they clobbered. id prefixes the SVG's element ids, which must be unique in
// the page.
func timelineSVG(t Timeline, a Approach, id string) string {
	end := t.End
	if end <= t.Start {
		end = t.Start + 1
	}
	plot := float64(tlWidth - tlLeft - tlRight)
	x := func(s float64) float64 {
		return tlLeft + plot*(math.Min(math.Max(s, t.Start), end)-t.Start)/(end-t.Start)
	}
	h := tlTop + tlLane*len(t.Lanes) + tlBottom
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="timeline-svg" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %d %d" width="100%%" font-family="sans-serif" font-size="11" role="img" aria-label="timeline of %s">`,
		tlWidth, h, esc(string(a)))
	fmt.Fprintf(&b, `<defs><pattern id="%[1]s-hatch" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><rect width="6" height="6" fill="#eceff1"/><line x1="0" y1="0" x2="0" y2="6" stroke="#90a4ae" stroke-width="2.5"/></pattern>`+
		`<marker id="%[1]s-arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse"><path d="M0,0L10,5L0,10z" fill="#b71c1c"/></marker></defs>`, id)
	pos := map[string][2]float64{}
	for i, l := range t.Lanes {
		y := float64(tlTop + tlLane*i)
		if i%2 == 1 {
			fmt.Fprintf(&b, `<rect x="0" y="%.0f" width="%d" height="%d" fill="#fafafa"/>`, y, tlWidth, tlLane)
		}
		fmt.Fprintf(&b, `<text x="%d" y="%.0f" text-anchor="end" fill="#333">%s</text>`, tlLeft-8, y+tlLane/2+4, esc(clip(l.Name, 16)))
		// Faults first, so that the lease a paused worker still believes it
		// holds shows on top of its pause.
		for _, lease := range []bool{false, true} {
			for _, sp := range l.Spans {
				if (sp.Kind == SpanLease) == lease {
					drawSpan(&b, sp, x(sp.Start), x(sp.End), y, a, l.Name, id)
				}
			}
		}
		for _, m := range l.Marks {
			if m.ID != "" {
				pos[m.ID] = [2]float64{x(m.At), y + tlLane/2}
			}
		}
	}
	for _, sp := range t.Spans {
		drawGlobalSpan(&b, sp, x(sp.Start), x(sp.End), float64(tlTop+tlLane*len(t.Lanes)))
	}
	drawMarks(&b, t, x, pos, id)
	drawAxis(&b, t.Start, end, x, float64(tlTop+tlLane*len(t.Lanes)))
	b.WriteString("</svg>")
	return b.String()
}

func drawSpan(b *strings.Builder, sp Span, x0, x1, y float64, a Approach, lane, id string) {
	w := math.Max(x1-x0, 1.5)
	tip := fmt.Sprintf("%s: %s %.2fs–%.2fs", lane, sp.Kind, sp.Start, sp.End)
	if sp.Label != "" {
		tip += " (" + sp.Label + ")"
	}
	switch sp.Kind {
	case SpanLease:
		fmt.Fprintf(b, `<rect class="span lease" x="%.1f" y="%.0f" width="%.1f" height="%d" rx="3" fill="%s" fill-opacity="0.22" stroke="%s" stroke-width="1"><title>%s</title></rect>`,
			x0, y+6, w, tlLane-12, Color(a), Color(a), esc(tip))
		label := sp.Label
		if w <= 6*float64(len(label))+6 {
			label = strings.TrimPrefix(label, "token ")
		}
		if label != "" && w > 6*float64(len(label))+6 {
			fmt.Fprintf(b, `<text x="%.1f" y="%.0f" fill="%s" font-size="10" font-weight="bold">%s</text>`, x0+4, y+tlLane/2+4, darker(a), esc(label))
		}
	default:
		fill, label := spanStyle(sp.Kind, id)
		fmt.Fprintf(b, `<rect class="span %s" x="%.1f" y="%.0f" width="%.1f" height="%d" fill="%s" stroke="#78909c" stroke-width="0.8"><title>%s</title></rect>`,
			esc(string(sp.Kind)), x0, y+2, w, tlLane-4, fill, esc(tip))
		if w > 58 {
			fmt.Fprintf(b, `<text x="%.1f" y="%.0f" text-anchor="middle" fill="#37474f" font-size="10" font-weight="bold">%s</text>`, x0+w/2, y+tlLane/2+4, esc(label))
		}
	}
}

// spanStyle is the fill and the word drawn on a fault span.
// darker is the approach's color for text on its own light tint.
func darker(a Approach) string {
	switch a {
	case FencedLock:
		return "#0d47a1"
	case NaiveLock:
		return "#8e0000"
	}
	return Color(a)
}

func spanStyle(k SpanKind, id string) (fill, label string) {
	switch k {
	case SpanPause:
		return "url(#" + id + "-hatch)", "paused"
	case SpanIsolate:
		return "#ffe0b2", "isolated"
	case SpanStall:
		return "#fff9c4", "stalled"
	}
	return "#e1bee7", string(k)
}

func drawGlobalSpan(b *strings.Builder, sp Span, x0, x1, bottom float64) {
	label := string(sp.Kind)
	if sp.Label != "" {
		label += ": " + sp.Label
	}
	fmt.Fprintf(b, `<rect class="span global %s" x="%.1f" y="%d" width="%.1f" height="%.0f" fill="#7b1fa2" fill-opacity="0.12"><title>%s %.2fs–%.2fs</title></rect>`,
		esc(string(sp.Kind)), x0, tlTop, math.Max(x1-x0, 2), bottom-tlTop, esc(label), sp.Start, sp.End)
	fmt.Fprintf(b, `<text x="%.1f" y="%.0f" fill="#6a1b9a" font-size="10">%s</text>`, x0+3, bottom+22, esc(clip(label, 30)))
}

// drawMarks draws every mark, then the arrows from violations to the writes
// they clobbered, on top of everything.
func drawMarks(b *strings.Builder, t Timeline, x func(float64) float64, pos map[string][2]float64, id string) {
	var links strings.Builder
	clobbered := map[string]bool{}
	for _, l := range t.Lanes {
		for _, m := range l.Marks {
			if m.Kind == MarkViolation && m.Ref != "" {
				clobbered[m.Ref] = true
			}
		}
	}
	for i, l := range t.Lanes {
		y := float64(tlTop+tlLane*i) + tlLane/2
		for _, m := range l.Marks {
			mx := x(m.At)
			tip := markTip(l.Name, m)
			switch m.Kind {
			case MarkWrite:
				fmt.Fprintf(b, `<line class="mark write" x1="%.1f" x2="%.1f" y1="%.0f" y2="%.0f" stroke="#263238" stroke-width="1.4"><title>%s</title></line>`, mx, mx, y-8, y+8, esc(tip))
				if clobbered[m.ID] {
					fmt.Fprintf(b, `<circle class="mark clobbered" cx="%.1f" cy="%.0f" r="7" fill="none" stroke="#b71c1c" stroke-width="2"><title>%s — later overwritten by a stale write</title></circle>`, mx, y, esc(tip))
				}
			case MarkRejected:
				fmt.Fprintf(b, `<path class="mark rejected" d="M%.1f,%.0fl8,8m0,-8l-8,8" stroke="#ef6c00" stroke-width="2.2"><title>%s</title></path>`, mx-4, y-4, esc(tip))
			case MarkUncertain:
				fmt.Fprintf(b, `<circle class="mark uncertain" cx="%.1f" cy="%.0f" r="4" fill="white" stroke="#607d8b" stroke-width="1.5"><title>%s</title></circle>`, mx, y, esc(tip))
			case MarkViolation:
				fmt.Fprintf(b, `<g class="mark violation"><circle cx="%.1f" cy="%.0f" r="7.5" fill="#c62828" stroke="white" stroke-width="1.5"/><text x="%.1f" y="%.0f" text-anchor="middle" fill="white" font-size="11" font-weight="bold">!</text><title>%s</title></g>`,
					mx, y, mx, y+4, esc(tip))
				if to, ok := pos[m.Ref]; ok {
					// A curve from the stale write back to the write it
					// overwrote, bowed so that it stays visible when both
					// are on neighbouring lanes.
					cx, cy := (mx+to[0])/2, math.Min(y, to[1])-18
					fmt.Fprintf(&links, `<path class="clobber-link" d="M%.1f,%.0f Q%.1f,%.0f %.1f,%.0f" fill="none" stroke="#b71c1c" stroke-width="1.8" stroke-dasharray="4 2" marker-end="url(#%s-arrow)"><title>%s</title></path>`,
						mx, y-7, cx, cy, to[0], to[1]-7, id, esc(tip))
				}
			}
		}
	}
	b.WriteString(links.String())
}

func markTip(lane string, m Mark) string {
	what := map[MarkKind]string{MarkWrite: "write accepted", MarkRejected: "write rejected", MarkUncertain: "write of unknown fate",
		MarkViolation: "stale write accepted: violation"}[m.Kind]
	s := fmt.Sprintf("%s: %s at %.3fs", lane, what, m.At)
	if m.Key != "" {
		s += ", key " + clip(m.Key, 40)
	}
	if m.Label != "" {
		s += " — " + m.Label
	}
	return s
}

func drawAxis(b *strings.Builder, start, end float64, x func(float64) float64, y float64) {
	fmt.Fprintf(b, `<line x1="%d" x2="%d" y1="%.0f" y2="%.0f" stroke="#90a4ae"/>`, tlLeft, tlWidth-tlRight, y, y)
	step := niceStep((end - start) / 10)
	for s := math.Ceil(start/step) * step; s <= end+step/1000; s += step {
		fmt.Fprintf(b, `<line x1="%.1f" x2="%.1f" y1="%.0f" y2="%.0f" stroke="#90a4ae"/><text x="%.1f" y="%.0f" text-anchor="middle" fill="#546e7a">%ss</text>`,
			x(s), x(s), y, y+4, x(s), y+15, compact(s))
	}
}

// clip shortens s to n runes with an ellipsis.
func clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
