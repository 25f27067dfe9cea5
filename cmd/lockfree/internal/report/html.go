package report

import (
	"fmt"
	"html/template"
	"io"
	"math"
	"slices"
	"strings"
	"time"
)

// Timeline drawing limits: beyond them Cap thins the timeline and says so.
const (
	maxTimelineLanes = 24
	maxTimelineMarks = 2500
)

// HTMLOptions tunes WriteHTML. The zero value is ready to use.
type HTMLOptions struct {
	// Title heads the page; "lockfree compare" when empty.
	Title string
	// Generated is when the report was made; the zero time leaves it out
	// (golden files and screenshots stay stable).
	Generated time.Time
	// Command is the command line that produced the reports, shown as is.
	Command string
}

// WriteHTML writes reps as one self-contained HTML page: the verdict first,
// then the sweeps, then per scenario its table, its throughput and latency
// charts and a timeline per approach when one was recorded. The page loads
// nothing from anywhere (inline CSS and SVG, no script).
func WriteHTML(w io.Writer, reps []Report, opts HTMLOptions) error {
	if opts.Title == "" {
		opts.Title = "lockfree compare"
	}
	page := htmlPage{Title: opts.Title, Command: opts.Command, Closing: Closing(reps)}
	if !opts.Generated.IsZero() {
		page.Generated = opts.Generated.UTC().Format("2006-01-02 15:04 UTC")
	}
	sweeps := Sweeps(reps)
	swept := map[string]bool{}
	for i, sw := range sweeps {
		swept[sw.Scenario] = true
		v := htmlSweep(sw, i)
		page.Sweeps = append(page.Sweeps, v)
		page.Cards = append(page.Cards, card{ID: v.ID, Name: sw.Scenario, Point: v.Axes, Lost: v.Lost, Chips: v.Chips, Lines: []string{v.Verdict}})
	}
	for i, rep := range reps {
		sv := htmlScenario(rep, i, swept[rep.Scenario])
		page.Scenarios = append(page.Scenarios, sv)
		if !sv.InSweep {
			page.Cards = append(page.Cards, card{ID: sv.ID, Name: sv.Name, Lost: sv.Lost, Chips: sv.Chips,
				Lines: []string{sv.Safety, sv.Speed}, Injected: sv.Injected})
		}
	}
	return pageTemplate.Execute(w, page)
}

type htmlPage struct {
	Title, Generated, Command, Closing string
	Cards                              []card
	Scenarios                          []scenarioView
	Sweeps                             []sweepView
}

// card is one verdict at the top of the page: a scenario's, or a sweep's.
type card struct {
	ID, Name, Point string
	Lost            bool
	Chips           []chip
	Lines           []string
	Injected        string
}

type scenarioView struct {
	ID, Name, Setting string
	Point             string // "16 clients · 1 key" in a sweep
	InSweep           bool
	Safety, Speed     string
	Injected          string
	Lost              bool
	Chips             []chip
	Heads             []headView
	Rows              []rowView
	Notes             []string
	Charts            []template.HTML
	Timelines         []timelineView
	Ratios            []string
	Metrics           []metricRow
	// Schedules are the random schedules, when the run drew them.
	Schedules []scheduleView
	Seed      uint64
}

// scheduleView is one approach's random schedule, and the command that
// replays it when the approach showed violations.
type scheduleView struct{ Approach, Text, Replay, Shrunk string }

// metricRow is one series of an approach's metrics (--metrics).
type metricRow struct{ Approach, Color, Name, Attrs, Value string }

// metricRows lists the series of every approach, and says which approach
// recorded none; nothing when the run collected no metrics.
func metricRows(rep Report) []metricRow {
	if !rep.HasMetrics() {
		return nil
	}
	var rows []metricRow
	for _, r := range rep.Results {
		if !r.Ran() {
			continue
		}
		if len(r.Metrics) == 0 {
			rows = append(rows, metricRow{Approach: string(r.Approach), Color: Color(r.Approach), Name: "(none: no lockfree component)"})
		}
		for _, m := range r.Metrics {
			rows = append(rows, metricRow{Approach: string(r.Approach), Color: Color(r.Approach), Name: m.Name, Attrs: attrsText(m.Attrs), Value: m.text()})
		}
	}
	return rows
}

type headView struct{ Head, Title string }

type chip struct{ Approach, Text, Class, Color string }

type rowView struct {
	Approach, Color, Label, Missing string // Missing: why it did not run
	Cells                           []string
	Bad                             bool
}

type timelineView struct {
	Approach, Color, Label, Summary, Note string
	SVG                                   template.HTML
	// CloseUp zooms on the moment that explains the approach's fate.
	CloseUp        template.HTML
	CloseUpCaption string
}

type sweepView struct {
	ID, Scenario, Axes string
	Verdict            string
	Lost               bool
	Chips              []chip
	Charts             []template.HTML
}

func htmlScenario(rep Report, i int, inSweep bool) scenarioView {
	v := Judge(rep)
	sv := scenarioView{
		ID: fmt.Sprintf("s%d-%s", i, slug(rep.Scenario)), Name: rep.Scenario, Setting: rep.describe(), InSweep: inSweep,
		Safety: v.safety(), Speed: v.speed(), Injected: v.Injected, Lost: len(v.Losses) > 0,
		Notes: rep.Notes,
	}
	cols := columns(rep)
	for _, c := range cols {
		sv.Heads = append(sv.Heads, headView{c.head, c.title})
	}
	if inSweep {
		sv.Point = plural(rep.Clients, "client", "clients") + " · " + plural(rep.Keys, "key", "keys")
	}
	for _, r := range rep.Results {
		sv.Chips = append(sv.Chips, resultChip(r))
		row := rowView{Approach: string(r.Approach), Color: Color(r.Approach), Label: describeResult(r), Missing: r.why(),
			Bad: r.Checked && r.Violations > 0}
		for _, c := range cols {
			row.Cells = append(row.Cells, c.cell(r))
		}
		sv.Rows = append(sv.Rows, row)
	}
	if rep.Rounds != nil {
		for _, r := range rep.Rounds.Ratios {
			sv.Ratios = append(sv.Ratios, fmt.Sprintf("%s ÷ %s: median %s×, spread %s–%s× over %d rounds (%s)",
				r.Of, r.To, ratio(r.Median), ratio(r.Min), ratio(r.Max), len(r.PerRound), tieWord(r)))
		}
	}
	if len(rep.Results) > 0 {
		sv.Charts = []template.HTML{barSVG(rep, throughputMetric), barSVG(rep, p99Metric)}
	}
	sv.Timelines = timelines(rep, sv.ID)
	sv.Metrics = metricRows(rep)
	sv.Seed = rep.Seed
	for _, r := range rep.Results {
		if len(r.Schedule) == 0 {
			continue
		}
		s := scheduleView{Approach: string(r.Approach), Text: r.ScheduleText()}
		if r.Checked && r.Violations > 0 {
			s.Replay = rep.Replay(r)
		}
		s.Shrunk = rep.ShrunkText(r)
		sv.Schedules = append(sv.Schedules, s)
	}
	return sv
}

func tieWord(r Ratio) string {
	if r.Tie() {
		return "a tie: 1 is within the spread"
	}
	return "outside the spread of a tie"
}

func resultChip(r Result) chip {
	c := chip{Approach: string(r.Approach), Color: Color(r.Approach)}
	switch {
	case !r.Ran():
		c.Text, c.Class = r.missing(), "skip"
	case !r.Checked:
		c.Text, c.Class = "— not checked", "skip"
	case r.Violations > 0:
		c.Text, c.Class = fmt.Sprintf("%d violations", r.Violations), "bad"
	default:
		c.Text, c.Class = "0 violations", "good"
	}
	return c
}

func barSVG(rep Report, m metric) template.HTML {
	const w, h = 520, 260
	return template.HTML(fmt.Sprintf(`<svg class="bar-chart" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %d %d" width="%d" height="%d" font-family="sans-serif" font-size="12">%s</svg>`,
		w, h, w, h, barPanel(rep, m, w, h)))
}

// timelines draws the recorded timelines, the approaches whose check found
// violations first, then the fenced lock (the contrast), then the rest.
func timelines(rep Report, id string) []timelineView {
	rs := slices.Clone(rep.Results)
	rank := func(r Result) int {
		switch {
		case r.Checked && r.Violations > 0:
			return 0
		case r.Approach == FencedLock:
			return 1
		}
		return 2
	}
	slices.SortStableFunc(rs, func(a, b Result) int { return rank(a) - rank(b) })
	var out []timelineView
	for j, r := range rs {
		if r.Timeline == nil || len(r.Timeline.Lanes) == 0 {
			continue
		}
		t := Cap(*r.Timeline, maxTimelineLanes, maxTimelineMarks)
		tv := timelineView{Approach: string(r.Approach), Color: Color(r.Approach), Label: r.Label,
			Summary: timelineSummary(t, r), Note: t.Note,
			SVG: template.HTML(timelineSVG(t, r.Approach, fmt.Sprintf("%s-t%d", id, j)))}
		// A close-up only when it shows much more than the whole run does.
		if from, to, what, ok := Focus(t); ok && to-from < (t.End-t.Start)/2 {
			tv.CloseUpCaption = fmt.Sprintf("close-up of %.2fs–%.2fs: %s", from, to, what)
			tv.CloseUp = template.HTML(timelineSVG(Window(t, from, to), r.Approach, fmt.Sprintf("%s-z%d", id, j)))
		}
		out = append(out, tv)
	}
	return out
}

// timelineSummary counts what the timeline shows.
func timelineSummary(t Timeline, r Result) string {
	n := map[MarkKind]int{}
	faults := 0
	for _, l := range t.Lanes {
		for _, m := range l.Marks {
			n[m.Kind]++
		}
		for _, s := range l.Spans {
			if s.Kind != SpanLease {
				faults++
			}
		}
	}
	s := fmt.Sprintf("%d workers, %d faults, %d writes drawn, %d rejected", len(t.Lanes), faults+len(t.Spans), n[MarkWrite], n[MarkRejected])
	if n[MarkUncertain] > 0 {
		s += fmt.Sprintf(", %d uncertain", n[MarkUncertain])
	}
	if n[MarkViolation] > 0 {
		s += fmt.Sprintf(", %d stale writes that broke the data", n[MarkViolation])
	}
	return s
}

func htmlSweep(s Sweep, i int) sweepView {
	sv := sweepView{ID: fmt.Sprintf("sweep%d-%s", i, slug(s.Scenario)), Scenario: s.Scenario,
		Axes: fmt.Sprintf("clients %s × keys %s", ints(s.Clients), ints(s.Keys)), Verdict: SweepVerdict(s)}
	for _, a := range s.Order {
		var lost int64
		var at, unchecked, failed int
		for _, p := range s.Points {
			if _, ok := p.Failed[a]; ok {
				failed++
			}
			if v := p.By[a].Violations; v != nil && *v > 0 {
				lost, at = lost+*v, at+1
			} else if _, ok := p.By[a]; ok && v == nil {
				unchecked++
			}
		}
		c := chip{Approach: string(a), Color: Color(a), Text: "0 violations at any point", Class: "good"}
		switch {
		case at > 0:
			c.Text, c.Class = fmt.Sprintf("%d violations at %d of %d points", lost, at, len(s.Points)), "bad"
			sv.Lost = true
		case unchecked > 0:
			c.Text, c.Class = fmt.Sprintf("— not checked at %d points", unchecked), "skip"
		}
		if failed > 0 {
			c.Text += fmt.Sprintf(", failed at %d", failed)
		}
		sv.Chips = append(sv.Chips, c)
	}
	ops := func(p PointSum) float64 { return p.OpsPerSec }
	p99 := func(p PointSum) float64 { return p.P99ms }
	if len(s.Clients) > 1 {
		for _, k := range s.Keys {
			sv.Charts = append(sv.Charts,
				sweepChart(s, "ops/s by clients, "+plural(k, "key", "keys"), "clients", s.Clients, func(c int) (int, int) { return c, k }, ops),
				sweepChart(s, "p99 ms by clients, "+plural(k, "key", "keys"), "clients", s.Clients, func(c int) (int, int) { return c, k }, p99))
		}
	}
	if len(s.Keys) > 1 {
		for _, c := range s.Clients {
			sv.Charts = append(sv.Charts,
				sweepChart(s, fmt.Sprintf("ops/s by keys, %d clients", c), "keys (1 = one hot row)", s.Keys, func(k int) (int, int) { return c, k }, ops),
				sweepChart(s, fmt.Sprintf("p99 ms by keys, %d clients", c), "keys (1 = one hot row)", s.Keys, func(k int) (int, int) { return c, k }, p99))
		}
	}
	return sv
}

// sweepChart draws one line per approach along xs; at maps an x to its
// (clients, keys) point. An approach whose check found violations anywhere is dashed; its
// line breaks where it has no figure, with an × where it failed.
func sweepChart(s Sweep, title, xLabel string, xs []int, at func(int) (int, int), value func(PointSum) float64) template.HTML {
	var ss []series
	for _, a := range s.Order {
		sr := series{name: string(a), color: Color(a)}
		for _, x := range xs {
			c, k := at(x)
			p, ok := s.At(c, k)
			sum, ok2 := p.By[a]
			if !ok || !ok2 {
				if _, failed := p.Failed[a]; failed {
					if sr.failed == nil {
						sr.failed = map[int]bool{}
					}
					sr.failed[len(sr.ys)] = true
				}
				sr.ys = append(sr.ys, math.NaN())
				continue
			}
			sr.ys = append(sr.ys, value(sum))
			sr.dashed = sr.dashed || (sum.Violations != nil && *sum.Violations > 0)
		}
		ss = append(ss, sr)
	}
	return template.HTML(lineChart(title, xLabel, xs, ss, 520, 250))
}

// slug makes an HTML id out of a name.
func slug(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' {
			return r
		}
		if r >= 'A' && r <= 'Z' {
			return r + 'a' - 'A'
		}
		return '-'
	}, s)
}
