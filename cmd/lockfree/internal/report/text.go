package report

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
)

// column is one column of the results table, shared by every surface.
type column struct {
	head string
	// title explains the column (HTML tooltip).
	title string
	cell  func(Result) string
}

// columns lists the table's columns for rep: the rounds' range and the
// extra columns only when some result has a value for them.
func columns(rep Report) []column {
	cols := []column{
		{"ops/s", "operations acknowledged per second", func(r Result) string { return fmt.Sprintf("%.0f", r.OpsPerSec) }},
		{"p50 ms", "median latency of a successful operation", func(r Result) string { return fmt.Sprintf("%.2f", r.P50ms) }},
		{"p99 ms", "99th percentile latency", func(r Result) string { return fmt.Sprintf("%.2f", r.P99ms) }},
		{"ops", "operations acknowledged", func(r Result) string { return fmt.Sprint(r.Ops) }},
		{"retries", "extra attempts (optimistic conflicts)", func(r Result) string { return fmt.Sprint(r.Retries) }},
		{"rejected", "operations the mechanism refused: correct refusals, not errors", func(r Result) string { return fmt.Sprint(r.Rejected) }},
		{"errors", "failures known not to have taken effect", func(r Result) string { return fmt.Sprint(r.Errors) }},
		{"uncertain", "failures that may have taken effect", func(r Result) string { return fmt.Sprint(r.Uncertain) }},
	}
	var rounds bool
	for _, r := range rep.Results {
		rounds = rounds || len(r.RoundsOpsPerSec) > 1
	}
	if rounds {
		cols = append(cols[:1], append([]column{{"ops/s range", "lowest and highest ops/s over the rounds", func(r Result) string {
			if len(r.RoundsOpsPerSec) == 0 {
				return "—"
			}
			lo, hi := minMax(r.RoundsOpsPerSec)
			return fmt.Sprintf("%.0f–%.0f", lo, hi)
		}}}, cols[1:]...)...)
	}
	// Every table shows what an operation cost the database, so that a
	// comparison is seen to be fair; "—" when it was not measured.
	cols = append(cols,
		column{"round trips/op", "database round trips per operation: everything the workers' pools sent while measured (lock polls, renewals and heartbeats included; a batch is one, BEGIN and COMMIT count), counted by a pgx tracer, over the operations completed", func(r Result) string { return optional(r.RoundTripsPerOp) }},
		column{"statements/op", "SQL statements per operation, counted like round trips", func(r Result) string { return optional(r.StatementsPerOp) }})
	for _, name := range rep.ExtraNames() {
		cols = append(cols, column{strings.ReplaceAll(name, "_", " "), name, func(r Result) string {
			v, ok := r.Extra[name]
			if !ok {
				return "—"
			}
			return extraText(v)
		}})
	}
	return append(cols,
		column{"faults injected", "faults that took effect during the approach's run, and how many of them another worker took over", func(r Result) string { return faultsText(r.Faults(), r.TakenOver) }},
		column{"violations", "broken invariants found afterwards; — means not checked", violations},
	)
}

func violations(r Result) string {
	if !r.Checked {
		return "—"
	}
	return fmt.Sprint(r.Violations)
}

// extraText is a scenario's own count as a cell: a whole number as it is,
// a fraction (a rate per operation) to two decimals.
func extraText(v float64) string {
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

func optional(f *float64) string {
	if f == nil {
		return "—"
	}
	return fmt.Sprintf("%.2f", *f)
}

func minMax(xs []float64) (lo, hi float64) {
	lo, hi = xs[0], xs[0]
	for _, x := range xs {
		lo, hi = min(lo, x), max(hi, x)
	}
	return lo, hi
}

// WriteTable writes one scenario's results as an aligned text table, with
// each approach's label and detail and the report's notes below it.
func WriteTable(w io.Writer, rep Report) {
	fmt.Fprintf(w, "\n%s — %s\n", rep.Scenario, rep.describe())
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	cols := columns(rep)
	fmt.Fprint(tw, "approach\t")
	for _, c := range cols {
		fmt.Fprintf(tw, "%s\t", c.head)
	}
	fmt.Fprintln(tw)
	for _, r := range rep.Results {
		fmt.Fprintf(tw, "%s\t", r.Approach)
		if !r.Ran() {
			fmt.Fprintf(tw, "%s\t%s\n", r.missing(), strings.Repeat("\t", len(cols)-1))
			continue
		}
		for _, c := range cols {
			fmt.Fprintf(tw, "%s\t", c.cell(r))
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
	for _, r := range rep.Results {
		fmt.Fprintf(w, "  %-12s %s\n", r.Approach, describeResult(r))
	}
	writeSchedules(w, rep)
	for _, n := range rep.Notes {
		fmt.Fprintf(w, "  note: %s\n", n)
	}
}

// describeResult is the label, then the detail or why it was skipped.
func describeResult(r Result) string {
	s := r.Label
	if r.Procs > 0 {
		s += fmt.Sprintf(" (its clients in %s)", plural(r.Procs, "process", "processes"))
	}
	switch {
	case !r.Ran():
		s += " — " + r.why()
	case r.Detail != "":
		s += " — " + r.Detail
	}
	if r.Timeline != nil && r.Timeline.Note != "" {
		s += " (timeline: " + r.Timeline.Note + ")"
	}
	return s
}

// WriteVerdicts writes the verdict at a glance (WriteGlance), a verdict per
// report, then the closing paragraph, each wrapped at width columns.
func WriteVerdicts(w io.Writer, reps []Report, width int) {
	if len(reps) == 0 {
		return
	}
	fmt.Fprintln(w, "\nverdict")
	WriteGlance(w, reps, width)
	fmt.Fprintln(w)
	swept := map[string]bool{}
	for _, s := range Sweeps(reps) {
		swept[s.Scenario] = true
		fmt.Fprintln(w, wrap(SweepVerdict(s), width, "  ", "    "))
	}
	for _, rep := range reps {
		if !swept[rep.Scenario] {
			fmt.Fprintln(w, wrap(Judge(rep).String(), width, "  ", "    "))
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, wrap(Closing(reps), width, "  ", "  "))
}

// WriteSweep writes a sweep as one row per point and, per approach, ops/s,
// p99, round trips per operation and violations.
func WriteSweep(w io.Writer, s Sweep) {
	fmt.Fprintf(w, "\n%s — sweep over clients %s and keys %s\n", s.Scenario, ints(s.Clients), ints(s.Keys))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "clients\tkeys\t")
	for _, a := range s.Order {
		fmt.Fprintf(tw, "%s ops/s\tp99 ms\trt/op\tviolations\t", a)
	}
	fmt.Fprintln(tw)
	for _, p := range s.Points {
		fmt.Fprintf(tw, "%d\t%d\t", p.Clients, p.Keys)
		for _, a := range s.Order {
			sum, ok := p.By[a]
			if _, failed := p.Failed[a]; failed {
				fmt.Fprint(tw, "failed\t\t\t\t")
				continue
			}
			if !ok {
				fmt.Fprint(tw, "—\t—\t—\t—\t")
				continue
			}
			v := "—"
			if sum.Violations != nil {
				v = fmt.Sprint(*sum.Violations)
			}
			fmt.Fprintf(tw, "%.0f\t%.2f\t%s\t%s\t", sum.OpsPerSec, sum.P99ms, optional(sum.RoundTripsPerOp), v)
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
	for _, f := range s.Failures() {
		fmt.Fprintf(w, "  failed: %s\n", f)
	}
}

func ints(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, ",")
}

// wrap breaks s into lines of at most width runes, the first indented by
// first and the rest by rest.
func wrap(s string, width int, first, rest string) string {
	var b strings.Builder
	line := first
	for _, word := range strings.Fields(s) {
		if len([]rune(line))+1+len([]rune(word)) > width && strings.TrimSpace(line) != "" {
			b.WriteString(strings.TrimRight(line, " ") + "\n")
			line = rest
		}
		if strings.TrimSpace(line) != "" {
			line += " "
		}
		line += word
	}
	b.WriteString(line)
	return b.String()
}
