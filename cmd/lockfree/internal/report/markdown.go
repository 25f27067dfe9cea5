package report

import (
	"fmt"
	"strings"
)

// Markdown renders reports as Markdown: per scenario a heading, the setting,
// the table, the approaches' labels and notes, and the verdict; then the
// sweeps and the closing paragraph. The first three lines of each scenario
// (heading, blank, setting) keep their shape: scripts/results.sh cuts them.
func Markdown(reps []Report) string {
	var b strings.Builder
	for _, rep := range reps {
		fmt.Fprintf(&b, "### %s\n\n%s\n\n", rep.Scenario, rep.describe())
		cols := columns(rep)
		b.WriteString("| approach |")
		for _, c := range cols {
			fmt.Fprintf(&b, " %s |", c.head)
		}
		b.WriteString("\n|---|" + strings.Repeat("---:|", len(cols)) + "\n")
		for _, r := range rep.Results {
			fmt.Fprintf(&b, "| %s |", r.Approach)
			for i, c := range cols {
				cell := c.cell(r)
				if !r.Ran() {
					cell = "" // the first column says why, the rest are a gap
					if i == 0 {
						cell = r.missing()
					}
				}
				fmt.Fprintf(&b, " %s |", mdEscape(cell))
			}
			b.WriteString("\n")
		}
		b.WriteString("\n")
		for _, r := range rep.Results {
			fmt.Fprintf(&b, "- `%s`: %s\n", r.Approach, mdEscape(describeResult(r)))
		}
		for _, n := range rep.Notes {
			fmt.Fprintf(&b, "- note: %s\n", mdEscape(n))
		}
		fmt.Fprintf(&b, "\n**Verdict.** %s\n\n", mdEscape(Judge(rep).String()))
	}
	for _, s := range Sweeps(reps) {
		markdownSweep(&b, s)
	}
	if len(reps) > 0 {
		fmt.Fprintf(&b, "%s\n", mdEscape(Closing(reps)))
	}
	return b.String()
}

func markdownSweep(b *strings.Builder, s Sweep) {
	fmt.Fprintf(b, "### %s: sweep over clients %s and keys %s\n\n| clients | keys |", s.Scenario, ints(s.Clients), ints(s.Keys))
	for _, a := range s.Order {
		fmt.Fprintf(b, " %s ops/s | %s p99 ms | %s round trips/op |", a, a, a)
	}
	b.WriteString("\n|---:|---:|" + strings.Repeat("---:|---:|---:|", len(s.Order)) + "\n")
	for _, p := range s.Points {
		fmt.Fprintf(b, "| %d | %d |", p.Clients, p.Keys)
		for _, a := range s.Order {
			if _, failed := p.Failed[a]; failed {
				b.WriteString(" failed | | |")
			} else if sum, ok := p.By[a]; ok {
				fmt.Fprintf(b, " %.0f | %.2f | %s |", sum.OpsPerSec, sum.P99ms, optional(sum.RoundTripsPerOp))
			} else {
				b.WriteString(" — | — | — |")
			}
		}
		b.WriteString("\n")
	}
	b.WriteString("\n")
	if fs := s.Failures(); len(fs) > 0 {
		for _, f := range fs {
			fmt.Fprintf(b, "- failed: %s\n", mdEscape(f))
		}
		b.WriteString("\n")
	}
}

// mdEscape keeps text from breaking a table or turning into markup.
var mdEscape = strings.NewReplacer("|", `\|`, "\n", " ", "<", "&lt;", ">", "&gt;").Replace
