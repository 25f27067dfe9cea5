package report

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
)

// Verdict is what a scenario's run showed, in words: who got what wrong, what the
// safe alternative cost or saved against the fenced lock, and what was
// injected.
type Verdict struct {
	Scenario string
	// Losses are the approaches whose check found violations, in report
	// order.
	Losses []Loss
	// Clean were checked and found no violation; Unchecked were not
	// checked; Skipped could not run; Failed ran into an error that left
	// no figures.
	Clean, Unchecked []Approach
	Skipped, Failed  []Loss // Detail holds the reason
	// VsFenced and VsRaw compare the alternative's throughput with the
	// fenced lock's and with raw SQL's; nil when one of them is missing.
	VsFenced, VsRaw *Comparison
	// Injected says what faults took effect and how.
	Injected string
}

// Loss is an approach and what went wrong with it.
type Loss struct {
	Approach   Approach
	Violations int64
	Detail     string
}

// Comparison is one throughput ratio.
type Comparison struct {
	Ratio    float64
	Min, Max float64 // the per-round spread; equal to Ratio for one round
	Rounds   int     // 1 when no rounds were run
	// Tie: 1 lies within the measured spread.
	Tie bool
}

// Harm is what a violation of one scenario is, in the words of its
// verdict: One and Many name a violation ("anomaly", "anomalies"), Bad
// says what an approach did, around a count ("showed %s (stock oversold,
// …)"), and None what an approach without one did ("showed none").
type Harm struct{ One, Many, Bad, None string }

// brief is Bad without its explanation: "showed %s", "got %s wrong".
func (h Harm) brief() string {
	s, _, _ := strings.Cut(h.Bad, " (")
	return s
}

// harms holds each scenario's Harm, as the scenario declared it
// (SetHarm).
var harms = struct {
	sync.RWMutex
	m map[string]Harm
}{m: map[string]Harm{}}

// SetHarm sets the words of scenario's verdicts. The engine calls it when
// a scenario that declares its words registers.
func SetHarm(scenario string, h Harm) {
	harms.Lock()
	defer harms.Unlock()
	harms.m[scenario] = h
}

// harmOf is the words of scenario's verdict: its own, or words that fit
// any scenario.
func harmOf(scenario string) Harm {
	harms.RLock()
	defer harms.RUnlock()
	if h, ok := harms.m[scenario]; ok {
		return h
	}
	return Harm{"violation", "violations", "had %s", "had none"}
}

// Judge computes the verdict of one report.
func Judge(rep Report) Verdict {
	v := Verdict{Scenario: rep.Scenario}
	for _, r := range rep.Results {
		switch {
		case r.Skipped != "":
			v.Skipped = append(v.Skipped, Loss{Approach: r.Approach, Detail: r.Skipped})
		case r.Failed != "":
			v.Failed = append(v.Failed, Loss{Approach: r.Approach, Detail: r.Failed})
		case !r.Checked:
			v.Unchecked = append(v.Unchecked, r.Approach)
		case r.Violations > 0:
			v.Losses = append(v.Losses, Loss{r.Approach, r.Violations, r.Detail})
		default:
			v.Clean = append(v.Clean, r.Approach)
		}
	}
	v.VsFenced = compare(rep, Alternative, FencedLock)
	v.VsRaw = compare(rep, Alternative, Raw)
	v.Injected = injected(rep)
	return v
}

func compare(rep Report, of, to Approach) *Comparison {
	a, ok1 := rep.Result(of)
	b, ok2 := rep.Result(to)
	if !ok1 || !ok2 || !a.Ran() || !b.Ran() {
		return nil
	}
	if r, ok := rep.Ratio(of, to); ok {
		return &Comparison{Ratio: r.Median, Min: r.Min, Max: r.Max, Rounds: len(r.PerRound), Tie: r.Tie()}
	}
	if b.OpsPerSec <= 0 {
		return nil
	}
	x := a.OpsPerSec / b.OpsPerSec
	return &Comparison{Ratio: x, Min: x, Max: x, Rounds: 1}
}

// injected is "pause: 12–14 per approach (how)"; the counts come from each
// result's FaultsInjected (or Pauses).
func injected(rep Report) string {
	lo, hi := map[Fault]int64{}, map[Fault]int64{}
	for _, r := range rep.Results {
		for f, n := range r.Faults() {
			if _, ok := lo[f]; !ok || n < lo[f] {
				lo[f] = n
			}
			hi[f] = max(hi[f], n)
		}
	}
	var parts []string
	for _, f := range rep.Faults {
		if _, ok := hi[f]; !ok {
			hi[f] = 0 // configured, never counted
		}
	}
	for _, f := range sortedKeys(hi) {
		how := rep.FaultHow[f]
		n := fmt.Sprint(hi[f])
		if lo[f] != hi[f] {
			n = fmt.Sprintf("%d–%d", lo[f], hi[f])
		}
		if t := takeovers(rep, f); t != "" {
			how = strings.TrimPrefix(how+"; "+t, "; ")
		}
		switch {
		case hi[f] == 0:
			parts = append(parts, fmt.Sprintf("%s configured, but none took effect (so this run proves nothing about it)", f))
		case how == "":
			parts = append(parts, fmt.Sprintf("%s %s times per approach", f, n))
		default:
			parts = append(parts, fmt.Sprintf("%s %s times per approach (%s)", f, n, how))
		}
	}
	if len(parts) == 0 {
		return "No faults injected: this run measures cost, not safety."
	}
	return "Injected: " + strings.Join(parts, "; ") + "."
}

// takeovers says how many of the faults f of each approach another worker
// took over (Result.TakenOver): "every one taken over" when all were,
// "taken over: alternative 0 of 2, fenced-lock 3 of 3" when some were not,
// and "" when no result counts them.
func takeovers(rep Report, f Fault) string {
	var each []string
	all := true
	for _, r := range rep.Results {
		t, ok := r.TakenOver[f]
		if !ok || !r.Ran() {
			continue
		}
		n := r.Faults()[f]
		all = all && t == n
		each = append(each, fmt.Sprintf("%s %d of %d", r.Approach, t, n))
	}
	switch {
	case len(each) == 0:
		return ""
	case all:
		return "every one taken over"
	}
	return "taken over: " + strings.Join(each, ", ")
}

// Lines returns the verdict as sentences: who got what wrong, the throughput
// ratios, and what was injected.
func (v Verdict) Lines() []string {
	return []string{v.Scenario + ": " + v.safety(), v.speed(), v.Injected}
}

// String is the verdict in one paragraph.
func (v Verdict) String() string {
	var s []string
	for _, l := range v.Lines() {
		if l != "" {
			s = append(s, l)
		}
	}
	return strings.Join(s, " ")
}

func (v Verdict) safety() string {
	h := harmOf(v.Scenario)
	var s []string
	for _, l := range v.Losses {
		noun := h.Many
		if l.Violations == 1 {
			noun = h.One
		}
		s = append(s, fmt.Sprintf("%s "+h.Bad, l.Approach, fmt.Sprintf("%d %s", l.Violations, noun)))
	}
	out := strings.Join(s, ", ")
	if len(v.Clean) > 0 {
		if out != "" {
			out += "; "
		}
		out += fmt.Sprintf("%s %s", and(v.Clean), h.None)
	}
	if len(v.Unchecked) > 0 {
		if out != "" {
			out += "; "
		}
		out += fmt.Sprintf("%s not checked (—)", and(v.Unchecked))
	}
	for _, sk := range v.Skipped {
		if out != "" {
			out += "; "
		}
		out += fmt.Sprintf("%s skipped: %s", sk.Approach, sk.Detail)
	}
	for _, f := range v.Failed {
		if out != "" {
			out += "; "
		}
		out += fmt.Sprintf("%s failed: %s", f.Approach, f.Detail)
	}
	if out == "" {
		out = "nothing ran"
	}
	return out + "."
}

func (v Verdict) speed() string {
	f, r := v.VsFenced, v.VsRaw
	var s string
	switch {
	case f == nil && r == nil:
		return ""
	case f == nil:
		s = "alternative " + vs(*r, "raw SQL")
	default:
		s = "alternative " + vs(*f, "the fenced lock")
		if r != nil {
			s += ", and " + vs(*r, "raw SQL")
		}
	}
	if f != nil && f.Rounds == 1 && f.Ratio > 0.8 && f.Ratio < 1.25 {
		s += "; one round, so this may be noise: --rounds 5 measures the spread"
	}
	return s + "."
}

// vs is "did 4.1× the fenced lock's throughput", "tied with the fenced lock
// on throughput", each with the rounds' spread when measured.
func vs(c Comparison, whom string) string {
	spread := ""
	if c.Rounds > 1 {
		spread = fmt.Sprintf(" (median of %d rounds, spread %s–%s×)", c.Rounds, ratio(c.Min), ratio(c.Max))
	}
	if c.Tie {
		return fmt.Sprintf("tied with %s on throughput at %s×%s", whom, ratio(c.Ratio), spread)
	}
	return fmt.Sprintf("did %s× %s's throughput%s", ratio(c.Ratio), whom, spread)
}

// ratio prints two significant digits: 0.98, 4.1, 12.
func ratio(x float64) string {
	switch {
	case math.IsInf(x, 0) || math.IsNaN(x):
		return "?"
	case x >= 10:
		return fmt.Sprintf("%.0f", x)
	case x >= 1:
		return fmt.Sprintf("%.1f", x)
	default:
		return fmt.Sprintf("%.2f", x)
	}
}

// and joins names as "a", "a and b", "a, b and c".
func and(as []Approach) string {
	s := make([]string, len(as))
	for i, a := range as {
		s[i] = string(a)
	}
	return andStrings(s)
}

// andStrings joins s as "a", "a and b", "a, b and c".
func andStrings(s []string) string {
	if len(s) <= 1 {
		return strings.Join(s, "")
	}
	return strings.Join(s[:len(s)-1], ", ") + " and " + s[len(s)-1]
}

// Closing is the paragraph after all scenarios: what the tables mean, for a
// reader who has never heard of fencing.
func Closing(reps []Report) string {
	lost := false
	for _, rep := range reps {
		for _, r := range rep.Results {
			lost = lost || (r.Checked && r.Violations > 0 && slices.Contains([]Approach{NaiveLock, RedisLock}, r.Approach))
		}
	}
	s := "Every table runs the same workload several ways and then checks the data: " +
		"\"violations\" counts what ended up wrong, and \"—\" means it was not checked. " +
		"A lock with a lease (naive-lock) only tells a client that it held the lock a moment ago; " +
		"a client that pauses past its lease still writes after another took over"
	if lost {
		s += ", which is what the locks without a fence got wrong above. "
	} else {
		s += ". "
	}
	return s + "The fenced lock makes the database refuse such a late write (its token is older), " +
		"and the alternative needs no lock at all because each write carries its own condition; " +
		"the ratios say what that safety costs, or saves."
}

// SweepVerdict says what a sweep showed across its points, in the words of
// the scenario's verdict: which approaches got what wrong, at how many
// points, which failed where, how far apart the alternative and the fenced
// lock were, and where the gap was widest.
func SweepVerdict(s Sweep) string {
	h := harmOf(s.Scenario)
	var bad, clean, unchecked, failures []string
	for _, a := range s.Order {
		var at, total, notChecked, failed int
		for _, p := range s.Points {
			if _, ok := p.Failed[a]; ok {
				failed++
			}
			sum, ok := p.By[a]
			switch {
			case !ok:
			case sum.Violations == nil:
				notChecked++
			case *sum.Violations > 0:
				at++
				total += int(*sum.Violations)
			}
		}
		switch {
		case at > 0:
			bad = append(bad, fmt.Sprintf("%s "+h.Bad+" at %d of %d points", a, plural(total, h.One, h.Many), at, len(s.Points)))
		case notChecked > 0:
			unchecked = append(unchecked, fmt.Sprintf("%s was not checked at %d points", a, notChecked))
		case failed < len(s.Points):
			clean = append(clean, string(a))
		}
		if failed > 0 {
			failures = append(failures, fmt.Sprintf("%s failed at %d of %d points", a, failed, len(s.Points)))
		}
	}
	out := s.Scenario + " over " + fmt.Sprint(len(s.Points)) + " points: " + strings.Join(bad, "; ")
	if len(clean) > 0 {
		if len(bad) > 0 {
			out += "; "
		}
		out += and(approaches(clean)) + " " + h.None + " at any point"
	}
	for _, x := range append(unchecked, failures...) {
		out += "; " + x
	}
	return out + "." + sweepSpeed(s)
}

func approaches(s []string) []Approach {
	as := make([]Approach, len(s))
	for i, x := range s {
		as[i] = Approach(x)
	}
	return as
}

// sweepSpeed is " alternative did 8.1× to 36× the fenced lock's throughput,
// most at 64 clients, 1 keys."
func sweepSpeed(s Sweep) string {
	lo, hi := math.Inf(1), math.Inf(-1)
	var at Point
	for _, p := range s.Points {
		a, ok1 := p.By[Alternative]
		f, ok2 := p.By[FencedLock]
		if !ok1 || !ok2 || f.OpsPerSec <= 0 {
			continue
		}
		r := a.OpsPerSec / f.OpsPerSec
		lo = min(lo, r)
		if r > hi {
			hi, at = r, p
		}
	}
	if math.IsInf(lo, 1) {
		return ""
	}
	return fmt.Sprintf(" alternative did %s× to %s× the fenced lock's throughput, the most at %s on %s.",
		ratio(lo), ratio(hi), plural(at.Clients, "client", "clients"), plural(at.Keys, "key", "keys"))
}

// plural is "1 key" or "3 keys".
func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}
