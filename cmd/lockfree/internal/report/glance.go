package report

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
)

// glanceCell is one approach's violations over a scenario's reports (sweep
// points and rounds summed).
type glanceCell struct {
	violations         int64
	checked, unchecked bool // some result checked; some not checked
	skipped            bool
	failed             bool // some result failed: its run could not be made
}

func (c glanceCell) String() string {
	switch {
	case c.violations > 0:
		return fmt.Sprint(c.violations)
	case c.failed && !c.checked:
		return "failed"
	case c.unchecked || !c.checked && !c.skipped:
		return "—"
	case c.skipped:
		return "skipped"
	}
	return "0"
}

// glance sums reps up per scenario and approach, in the order they come.
func glance(reps []Report) (scenarios []string, order []Approach, cells map[string]map[Approach]*glanceCell) {
	cells = map[string]map[Approach]*glanceCell{}
	for _, rep := range reps {
		if cells[rep.Scenario] == nil {
			cells[rep.Scenario] = map[Approach]*glanceCell{}
			scenarios = append(scenarios, rep.Scenario)
		}
		for _, r := range rep.Results {
			if !slices.Contains(order, r.Approach) {
				order = append(order, r.Approach)
			}
			c := cells[rep.Scenario][r.Approach]
			if c == nil {
				c = &glanceCell{}
				cells[rep.Scenario][r.Approach] = c
			}
			switch {
			case r.Skipped != "":
				c.skipped = true
			case r.Failed != "":
				c.failed = true
			case r.Checked:
				c.checked = true
				c.violations += r.Violations
			default:
				c.unchecked = true
			}
		}
	}
	slices.SortStableFunc(order, func(a, b Approach) int { return rank(a) - rank(b) })
	return scenarios, order, cells
}

func rank(a Approach) int {
	if i := slices.Index([]Approach{Alternative, FencedLock, NaiveLock, RedisLock, Raw}, a); i >= 0 {
		return i
	}
	return 5
}

// WriteGlance writes the verdict at a glance: a grid of the violations each
// approach's check found in each scenario ("—" not checked), then one
// sentence on what each approach got wrong where, in the words of each
// scenario's verdict, wrapped at width columns.
func WriteGlance(w io.Writer, reps []Report, width int) {
	scenarios, order, cells := glance(reps)
	if len(scenarios) == 0 {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "  violations\t")
	for _, a := range order {
		fmt.Fprintf(tw, "%s\t", a)
	}
	fmt.Fprintln(tw)
	for _, s := range scenarios {
		fmt.Fprintf(tw, "  %s\t", s)
		for _, a := range order {
			c, ok := cells[s][a]
			if !ok {
				fmt.Fprint(tw, "\t")
				continue
			}
			fmt.Fprintf(tw, "%s\t", c)
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
	fmt.Fprintln(w, wrap(glanceSentence(scenarios, order, cells), width, "  ", "  "))
}

// glanceSentence is "naive-lock showed 12 anomalies in inventory and
// mis-applied 3 events in events (2 of 4 scenarios); alternative,
// fenced-lock and raw: nothing wrong in any scenario", each scenario's count
// in the words of its verdict.
func glanceSentence(scenarios []string, order []Approach, cells map[string]map[Approach]*glanceCell) string {
	var parts, failures []string
	var clean, unchecked []Approach
	for _, a := range order {
		var lost, failed []string
		ran, checkedAll := 0, true
		for _, s := range scenarios {
			c, ok := cells[s][a]
			if ok && c.failed {
				failed = append(failed, s)
			}
			if !ok || (c.skipped || c.failed) && !c.checked && !c.unchecked {
				continue
			}
			ran++
			if c.violations > 0 {
				h := harmOf(s)
				lost = append(lost, fmt.Sprintf(h.brief()+" in %s", plural(int(c.violations), h.One, h.Many), s))
			}
			checkedAll = checkedAll && !c.unchecked && c.checked
		}
		if len(failed) > 0 {
			failures = append(failures, fmt.Sprintf("%s failed in %s", a, andStrings(failed)))
		}
		switch {
		case ran == 0:
		case len(lost) > 0:
			parts = append(parts, fmt.Sprintf("%s %s (%d of %s)", a, andStrings(lost), len(lost), plural(ran, "scenario", "scenarios")))
		case checkedAll:
			clean = append(clean, a)
		default:
			unchecked = append(unchecked, a)
		}
	}
	if len(clean) > 0 {
		parts = append(parts, and(clean)+": nothing wrong in any scenario")
	}
	if len(unchecked) > 0 {
		parts = append(parts, and(unchecked)+": not checked everywhere (—), nothing found where checked")
	}
	parts = append(parts, failures...)
	return strings.Join(parts, "; ") + "."
}
