package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/history"
	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/report"
)

// result reads the merged history, checks it against the state the run
// left, and fills in the approach's line of the report.
func (r *run) result(ctx context.Context, sch *schema, w window) (report.Result, error) {
	res := report.Result{Approach: r.def.Approach(), Label: r.def.Label()}
	if r.cfg.lanes() > 1 {
		res.Procs = r.cfg.procs()
	}
	ops, err := r.fleet.history()
	if err != nil {
		return res, fmt.Errorf("reading the workers' history: %w", err)
	}
	r.tally(&res, ops, w)
	rep, err := r.check(ctx, sch, ops)
	if err != nil {
		return res, err
	}
	r.checkTenures(rep)
	checkPromises(rep, ops)
	r.checkLiveness(&res, rep, ops, w)
	res.Violations, res.Checked = int64(rep.Violations()), rep.Checked()
	res.Detail = detail(rep)
	res.FaultsInjected = r.log.injectedSoFar()
	if t := r.log.takenOverSoFar(); len(t) > 0 {
		res.TakenOver = t
	}
	for _, f := range r.cfg.Faults {
		res.FaultsInjected[f] += 0 // asked for and never injected shows as 0
	}
	res.Pauses = res.FaultsInjected[Pause]
	for _, inj := range r.injectors {
		if s, ok := inj.(scheduling); ok {
			res.Schedule, res.Keep = s.schedule(), r.cfg.Keep
		}
	}
	res.Timeline = r.timeline(ops, rep)
	res.Metrics = r.fleet.metrics()
	if r.task != nil {
		r.task.Done(res)
	}
	return res, nil
}

// check runs the scenario's check, again while the server comes back from a
// restart.
func (r *run) check(ctx context.Context, sch *schema, ops []history.Op) (*history.Findings, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	sizes := Sizes{Keys: r.cfg.Keys, Clients: r.cfg.Clients}
	for attempt := 1; ; attempt++ {
		rep, err := r.sc.Check(ctx, sch.admin, slices.Clone(ops), sizes)
		if err == nil {
			return rep, nil
		}
		if errors.Is(err, history.ErrInvalid) || attempt == 20 || !Sleep(ctx, 500*time.Millisecond) {
			return nil, fmt.Errorf("checking the history: %w", err)
		}
	}
}

// tally counts the operations of the measured part of each worker's run —
// those it invoked between its go and the halt — and the round trips its
// pool sent meanwhile.
func (r *run) tally(res *report.Result, ops []history.Op, w window) {
	r.mon.mu.Lock()
	goT := maps.Clone(r.mon.goT)
	r.mon.mu.Unlock()
	var latencies []float64
	var returns []history.Time
	kinds, _ := r.sc.(Tallier)
	for i := range ops {
		op := &ops[i]
		g, ok := goT[r.cfg.workerOf(op.Client)]
		if !ok || op.Call < g || op.Call >= w.to {
			continue
		}
		if n, err := strconv.ParseInt(op.Meta["retries"], 10, 64); err == nil {
			res.Retries += n
		}
		switch {
		case op.Outcome == history.OK:
			res.Ops++
			latencies = append(latencies, float64(op.Return-op.Call)/1e6)
			returns = append(returns, op.Return)
			if kinds == nil {
				break
			}
			if k := kinds.Kind(op); k != "" {
				if res.Extra == nil {
					res.Extra = map[string]float64{}
				}
				res.Extra[k]++
			}
		case op.Outcome == history.Unknown:
			res.Uncertain++
		case op.Meta[MetaRefused] != "":
			res.Rejected++
		default:
			res.Errors++
		}
	}
	res.OpsPerSec = float64(res.Ops) / (float64(w.to-w.from) / 1e9)
	slices.Sort(latencies)
	res.P50ms, res.P99ms = percentile(latencies, 0.50), percentile(latencies, 0.99)
	res.LongestStallMs = float64(longestStall(returns, w)) / 1e6
	st := r.fleet.stats()
	if st.Ops > 0 {
		res.RoundTripsPerOp = report.Float(float64(st.RoundTrips) / float64(st.Ops))
		res.StatementsPerOp = report.Float(float64(st.Statements) / float64(st.Ops))
		for k, n := range st.Extra {
			if res.Extra == nil {
				res.Extra = map[string]float64{}
			}
			res.Extra[k+"_per_op"] = float64(n) / float64(st.Ops)
		}
	}
	for k, n := range st.Counts {
		if res.Extra == nil {
			res.Extra = map[string]float64{}
		}
		res.Extra[k] = float64(n)
	}
}

// longestStall is the longest span of w in which no operation completed:
// returns are the completions of the measured operations, in any order.
func longestStall(returns []history.Time, w window) history.Time {
	returns = slices.Sorted(slices.Values(returns))
	longest, last := history.Time(0), w.from
	for _, t := range returns {
		t = min(max(t, w.from), w.to)
		longest, last = max(longest, t-last), t
	}
	return max(longest, w.to-last)
}

// add adds s's figures to w's.
func (w *workerStats) add(s *workerStats) {
	w.Ops += s.Ops
	w.RoundTrips += s.RoundTrips
	w.Statements += s.Statements
	w.OpRoundTrips += s.OpRoundTrips
	w.OpStatements += s.OpStatements
	w.OpRiders += s.OpRiders
	w.Connects += s.Connects
	w.Hits = addCounts(w.Hits, s.Hits)
	w.Extra = addCounts(w.Extra, s.Extra)
	w.Counts = addCounts(w.Counts, s.Counts)
}

// addCounts adds from's counts to to's, and returns to (made when nil and
// from has counts).
func addCounts(to, from map[string]int64) map[string]int64 {
	for k, n := range from {
		if to == nil {
			to = map[string]int64{}
		}
		to[k] += n
	}
	return to
}

func percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[int(float64(len(sorted)-1)*p)]
}

// detail sums a check up: the violations by anomaly and the first one in
// words, or why part of it was not checked.
func detail(rep *history.Findings) string {
	byAnomaly := map[history.Anomaly]int{}
	var first *history.Violation
	var notes []string
	for i := range rep.Keys {
		k := &rep.Keys[i]
		for j := range k.Violations {
			byAnomaly[k.Violations[j].Anomaly]++
			if first == nil {
				first = &k.Violations[j]
			}
		}
		if k.Note != "" {
			notes = append(notes, fmt.Sprintf("key %s: %s", k.Key, k.Note))
		}
	}
	var parts []string
	for _, a := range slices.SortedFunc(maps.Keys(byAnomaly), func(a, b history.Anomaly) int { return cmp.Compare(a, b) }) {
		parts = append(parts, fmt.Sprintf("%d %s", byAnomaly[a], a))
	}
	s := strings.Join(parts, ", ")
	if first != nil {
		s += "; first: " + first.Text
	}
	if len(notes) > 0 {
		if s != "" {
			s += "; "
		}
		s += "not checked: " + strings.Join(notes, "; ")
	}
	return s
}
