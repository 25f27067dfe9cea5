package cli

import (
	"fmt"
	"html"
	"strings"

	"github.com/lockfree-go/lockfree/internal/scenario"
)

var colors = map[scenario.Approach]string{
	scenario.Alternative: "#2e7d32",
	scenario.FencedLock:  "#1565c0",
	scenario.NaiveLock:   "#c62828",
	scenario.Raw:         "#757575",
}

// svgChart draws, per scenario, two bar groups: throughput (ops/s) and p99
// latency (ms) of each approach, with violations marked under the bars.
func svgChart(reps []scenario.Report) string {
	const (
		panelW, panelH = 360, 220
		barW           = 40
		top            = 50
	)
	width := 2*panelW + 40
	height := len(reps)*(panelH+top+30) + 20
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	for i, rep := range reps {
		y0 := 20 + i*(panelH+top+30)
		fmt.Fprintf(&b, `<text x="20" y="%d" font-size="15" font-weight="bold">%s — %s, %d clients, %d keys, faults %s</text>`+"\n",
			y0+15, html.EscapeString(rep.Scenario), rep.Backend, rep.Clients, rep.Keys, html.EscapeString(faultList(rep.Faults)))
		panels := []struct {
			title string
			value func(scenario.Result) float64
			unit  string
		}{
			{"throughput (ops/s, higher is better)", func(r scenario.Result) float64 { return r.OpsPerSec }, "%.0f"},
			{"p99 latency (ms, lower is better)", func(r scenario.Result) float64 { return r.P99ms }, "%.1f"},
		}
		for p, panel := range panels {
			x0 := 20 + p*(panelW+20)
			fmt.Fprintf(&b, `<text x="%d" y="%d">%s</text>`+"\n", x0, y0+top-15, panel.title)
			fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#999"/>`+"\n", x0, y0+top+panelH-40, x0+panelW, y0+top+panelH-40)
			maxV := 0.0
			for _, r := range rep.Results {
				maxV = max(maxV, panel.value(r))
			}
			if maxV == 0 {
				maxV = 1
			}
			for j, r := range rep.Results {
				v := panel.value(r)
				h := int(v / maxV * float64(panelH-70))
				x := x0 + 15 + j*(barW+40)
				base := y0 + top + panelH - 40
				color := colors[r.Approach]
				if color == "" {
					color = "#555"
				}
				fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="%s"/>`+"\n", x, base-h, barW, h, color)
				fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">`+panel.unit+`</text>`+"\n", x+barW/2, base-h-4, v)
				fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">%s</text>`+"\n", x+barW/2, base+14, r.Approach)
				if r.Violations > 0 {
					fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle" fill="#c62828">%d violations</text>`+"\n", x+barW/2, base+28, r.Violations)
				} else {
					fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle" fill="#2e7d32">0 violations</text>`+"\n", x+barW/2, base+28)
				}
			}
		}
	}
	b.WriteString("</svg>\n")
	return b.String()
}
