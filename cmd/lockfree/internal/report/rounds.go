package report

import (
	"fmt"
	"slices"
)

// Rounds summarises a run whose approaches ran interleaved, round by round
// (round 1: every approach, round 2: every approach, …), so that a drift of
// the machine's load hits every approach alike.
type Rounds struct {
	N int `json:"n"`
	// Ratios compare the alternative's ops/s with the fenced lock's and
	// with raw's, round by round.
	Ratios []Ratio `json:"ratios,omitempty"`
}

// Ratio is Of's throughput divided by To's: the median of the per-round
// ratios and their spread.
type Ratio struct {
	Of       Approach  `json:"of"`
	To       Approach  `json:"to"`
	Median   float64   `json:"median"`
	Min      float64   `json:"min"`
	Max      float64   `json:"max"`
	PerRound []float64 `json:"per_round"`
}

// Tie reports whether 1 lies within the measured spread: the two approaches
// could not be told apart.
func (r Ratio) Tie() bool { return len(r.PerRound) > 1 && r.Min <= 1 && 1 <= r.Max }

// Ratio returns the round ratio of of to to, if the report has one.
func (rep Report) Ratio(of, to Approach) (Ratio, bool) {
	if rep.Rounds == nil {
		return Ratio{}, false
	}
	for _, r := range rep.Rounds.Ratios {
		if r.Of == of && r.To == to {
			return r, true
		}
	}
	return Ratio{}, false
}

// MergeRounds folds the reports of one scenario's rounds, each holding some
// of its approaches, into one report. Each approach's ops/s and latencies
// are the medians over its rounds, its counts (operations, violations, …)
// are totals, and it counts as checked only when every round was. Rounds
// gets the per-round ratios of the alternative to the fenced lock and to
// raw. rounds[i] holds the reports of round i, in approach order.
func MergeRounds(rounds [][]Report) Report {
	var out Report
	byApproach := map[Approach][]Result{}
	var order []Approach
	for _, round := range rounds {
		for _, rep := range round {
			if out.Scenario == "" {
				out = rep
				out.Results, out.Notes, out.Rounds = nil, nil, nil
			}
			for _, n := range rep.Notes {
				if !slices.Contains(out.Notes, n) {
					out.Notes = append(out.Notes, n)
				}
			}
			for _, r := range rep.Results {
				if _, ok := byApproach[r.Approach]; !ok {
					order = append(order, r.Approach)
				}
				byApproach[r.Approach] = append(byApproach[r.Approach], r)
			}
		}
	}
	for _, a := range order {
		out.Results = append(out.Results, mergeResults(byApproach[a]))
	}
	out.Rounds = &Rounds{N: len(rounds)}
	for _, to := range []Approach{FencedLock, Raw} {
		if r, ok := roundRatio(byApproach[Alternative], byApproach[to]); ok {
			r.Of, r.To = Alternative, to
			out.Rounds.Ratios = append(out.Rounds.Ratios, r)
		}
	}
	return out
}

func mergeResults(rs []Result) Result {
	m := rs[0]
	m.Checked = true
	m.Ops, m.Retries, m.Rejected, m.Violations, m.Errors, m.Uncertain, m.Pauses, m.Submitted = 0, 0, 0, 0, 0, 0, 0, 0
	m.FaultsInjected, m.TakenOver, m.Extra, m.Timeline, m.Metrics = nil, nil, nil, nil, nil
	var ops, p50, p99 []float64
	for i, r := range rs {
		switch {
		case r.Skipped != "":
			return r
		case r.Failed != "":
			r.Failed = fmt.Sprintf("round %d: %s", i+1, r.Failed)
			return r
		}
		ops, p50, p99 = append(ops, r.OpsPerSec), append(p50, r.P50ms), append(p99, r.P99ms)
		m.Ops += r.Ops
		m.Retries += r.Retries
		m.Rejected += r.Rejected
		m.Violations += r.Violations
		m.Checked = m.Checked && r.Checked
		m.Errors += r.Errors
		m.Uncertain += r.Uncertain
		m.Pauses += r.Pauses
		m.Submitted += r.Submitted
		m.LongestStallMs = max(m.LongestStallMs, r.LongestStallMs)
		m.FaultsInjected = addCounts(m.FaultsInjected, r.FaultsInjected)
		m.TakenOver = addCounts(m.TakenOver, r.TakenOver)
		m.Extra = addCounts(m.Extra, r.Extra)
		m.Metrics = MergeMetrics(m.Metrics, r.Metrics)
		if r.Timeline != nil && (m.Timeline == nil || r.Violations > 0) {
			m.Timeline = r.Timeline // the round that shows the most
		}
	}
	m.OpsPerSec, m.P50ms, m.P99ms = Median(ops), Median(p50), Median(p99)
	m.RoundsOpsPerSec = ops
	return m
}

func addCounts[K comparable, V int64 | float64](dst, src map[K]V) map[K]V {
	if len(src) == 0 {
		return dst
	}
	if dst == nil {
		dst = map[K]V{}
	}
	for k, v := range src {
		dst[k] += v
	}
	return dst
}

// roundRatio divides of's ops/s by to's, round by round (both ran in each
// round, in the same order).
func roundRatio(of, to []Result) (Ratio, bool) {
	n := min(len(of), len(to))
	var r Ratio
	for i := 0; i < n; i++ {
		if !of[i].Ran() || !to[i].Ran() || to[i].OpsPerSec <= 0 {
			continue
		}
		r.PerRound = append(r.PerRound, of[i].OpsPerSec/to[i].OpsPerSec)
	}
	if len(r.PerRound) == 0 {
		return Ratio{}, false
	}
	r.Median = Median(r.PerRound)
	r.Min, r.Max = slices.Min(r.PerRound), slices.Max(r.PerRound)
	return r, true
}

// Median returns the median of xs (the mean of the middle two for an even
// count), or 0 for none. It does not modify xs.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
