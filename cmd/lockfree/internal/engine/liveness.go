package engine

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/history"
	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/report"
)

// The liveness check: each key is served within a bound. A key waits while
// a request on it is pending from a worker under no fault of its own (a
// stopped, stalled or cut-off worker's wait is the fault's) and no fault
// hits the whole run (a restart, a failover); it is served when a request
// on it completes (accepted, or refused by the mechanism). Its stall is the
// time it waited between two completions; one longer than the bound is a
// violation.
//
// A client that asks only for the keys it owns (the accounts alternative's
// members) leaves an orphaned key no request to wait on: the whole run is
// also held to the bound — no key served while some worker runs under no
// fault — which one key (the default) makes that key's check.

// allKeys is the key of the whole run's stall.
const allKeys = "*"

// stallBound is how long a key may wait: one lease, which a stopped holder
// keeps the key for; then one operation's time (Params.OpTimeout: 2 s plus
// twice the lease by default), which a request may spend waiting its turn
// or its patience out (a holder stalled while it renews keeps the key at
// most three leases and a margin); then stallRetry for the request that
// follows it.
func stallBound(prot Protection, p Params) time.Duration {
	return prot.Lease + p.OpTimeout + stallRetry
}

// stallRetry is the time the liveness bound allows the request that
// follows one that waited its whole operation timeout: a second, for a
// loaded machine.
const stallRetry = time.Second

// span is a span of history time, from inclusive, to exclusive.
type span struct{ from, to history.Time }

// wait is a key's longest wait: the completions (or window edges) around
// it, and how long the key waited between them.
type wait struct {
	key      string
	from, to history.Time
	waited   history.Time
}

// checkLiveness adds a stall violation to rep for each key (and the whole
// run) that waited longer than the bound in the measured window w, and
// fills in res's figures of the check.
func (r *run) checkLiveness(res *report.Result, rep *history.Findings, ops []history.Op, w window) {
	r.mon.mu.Lock()
	workers := slices.Sorted(maps.Keys(r.mon.goT))
	r.mon.mu.Unlock()
	byWorker, global := r.excused(w)
	// The checks read history clients: each of a worker's clients is
	// excused its worker's faults.
	clients := r.cfg.clientsOf(workers)
	byClient := map[int][]span{}
	for _, c := range clients {
		byClient[c] = byWorker[r.cfg.workerOf(c)]
	}
	workers = clients
	bound := stallBound(r.prot, r.params)
	res.StallBoundMs = float64(bound) / 1e6
	stalls := keyStalls(ops, w, workers, exclusions{byClient: byClient, global: global, unleased: r.prot.Lease == 0})
	if s, ok := runStall(ops, w, workers, exclusions{byClient: byClient, global: global, unleased: r.prot.Lease == 0}); ok {
		stalls = append(stalls, s)
	}
	for _, v := range stallViolations(stalls, bound, r.prot, rep.Base) {
		rep.Add(v)
	}
	for _, s := range stalls {
		res.LongestWaitMs = max(res.LongestWaitMs, float64(s.waited)/1e6)
		if time.Duration(s.waited) > bound {
			res.Stalls = append(res.Stalls, report.Stall{Key: s.key, Ms: float64(s.waited) / 1e6,
				FromS: r.log.seconds(s.from), ToS: r.log.seconds(s.to)})
		}
	}
}

// exclusions are the spans a wait is excused in: by worker, by key, and
// for all.
type exclusions struct {
	// byClient: a worker's own faults, drawn on its lane (pause, stall,
	// isolate, crash, and the faults drawn as these), and its holds at
	// points.
	byClient map[int][]span
	// unleased: the approach has no lease (Protection.Lease 0), nothing
	// for another to wait out: a key whose request a fault holds (a
	// stopped client's transaction, its row locks) stays held until the
	// fault ends, and every wait on it meanwhile is the fault's.
	unleased bool
	// global: the faults of the whole run (restart, failover).
	global []span
}

// excused returns the spans of the faults (exclusions). A hold is excused
// whether or not its fault took effect: a worker stopped at a point by an
// arm that counted nothing waited on the harness all the same.
func (r *run) excused(w window) (map[int][]span, []span) {
	r.log.mu.Lock()
	at := func(s float64) history.Time { return r.log.base + history.Time(s*1e9) }
	byClient := map[int][]span{}
	for c, ss := range r.log.spans {
		for _, s := range ss {
			if s.Kind != report.SpanLease {
				byClient[c] = append(byClient[c], span{at(s.Start), at(s.End)})
			}
		}
	}
	var global []span
	for _, s := range r.log.global {
		global = append(global, span{at(s.Start), at(s.End)})
	}
	r.log.mu.Unlock()
	r.mon.mu.Lock()
	points, owners := slices.Clone(r.mon.points), maps.Clone(r.mon.owners)
	r.mon.mu.Unlock()
	for c, ss := range holds(points, owners, w) {
		byClient[c] = append(byClient[c], ss...)
	}
	return byClient, global
}

// holds returns, by worker, the spans it was held at a point by the
// harness: from an arm's point to the worker's next resumed event; from a
// late gate's (modeLate, which reports no resume) to the worker's next
// membership lease granted or extended, which only a cleared gate lets
// through; to w's end when none came.
func holds(points []pointSeen, owners map[int][]event, w window) map[int][]span {
	slices.SortStableFunc(points, func(a, b pointSeen) int { return cmp.Compare(a.ev.T, b.ev.T) })
	open := map[int]pointSeen{}
	byClient := map[int][]span{}
	add := func(p pointSeen, to history.Time) { byClient[p.client] = append(byClient[p.client], span{p.ev.T, to}) }
	for _, p := range points {
		switch {
		case p.ev.Ev == evPoint && p.ev.Mode == modeLate:
			end := w.to
			for _, ev := range owners[p.client] {
				if ev.Ev == evMember && ev.T > p.ev.T {
					end = min(end, ev.T)
				}
			}
			add(p, end)
		case p.ev.Ev == evPoint:
			if _, ok := open[p.client]; !ok {
				open[p.client] = p
			}
		case p.ev.Ev == evResumed:
			if from, ok := open[p.client]; ok {
				add(from, p.ev.T)
				delete(open, p.client)
			}
		}
	}
	for _, from := range open {
		add(from, w.to)
	}
	return byClient
}

// stallViolations returns a violation for each stall longer than bound.
func stallViolations(stalls []wait, bound time.Duration, prot Protection, base history.Time) []history.Violation {
	var vs []history.Violation
	sec := func(t history.Time) float64 { return float64(t-base) / 1e9 }
	lease := "no lease"
	if prot.Lease > 0 {
		lease = fmt.Sprintf("%s %v", prot.What, prot.Lease)
	}
	for _, s := range stalls {
		if time.Duration(s.waited) <= bound {
			continue
		}
		what := "key " + s.key
		if s.key == allKeys {
			what = "the run (no key served)"
		}
		vs = append(vs, history.Violation{Key: s.key, Anomaly: history.Stall,
			Text: fmt.Sprintf("%s waited %v to be served, between %.2fs and %.2fs, over the bound of %v (%s, an operation's time, then %v)",
				what, time.Duration(s.waited).Round(time.Millisecond), sec(s.from), sec(s.to), bound, lease, stallRetry)})
	}
	return vs
}

// keyStalls returns each key's longest stall in w, by key, of the keys
// that waited at all: the operations of workers are those the check reads
// (others, such as a check's reads, are left out); a wait in ex's spans of
// its worker, its key or all is excused.
func keyStalls(ops []history.Op, w window, workers []int, ex exclusions) []wait {
	pending := map[string][]span{}
	served := map[string][]history.Time{}
	ends := callEnds(ops, w)
	out := map[int][]span{} // by worker, its faults' spans and the whole run's
	for _, c := range workers {
		out[c] = union(ex.byClient[c], ex.global)
	}
	held := map[string][]span{} // by key, while a fault held a request on it
	for i := range ops {
		op := &ops[i]
		if _, ok := slices.BinarySearch(workers, op.Client); !ok {
			continue
		}
		if isServed(op) {
			served[op.Key] = append(served[op.Key], op.Return)
		}
		s := span{max(op.Call, w.from), min(ends[i], w.to)}
		if s.from >= s.to {
			continue
		}
		pending[op.Key] = append(pending[op.Key], subtract([]span{s}, out[op.Client])...)
		if ex.unleased {
			held[op.Key] = append(held[op.Key], intersect([]span{s}, out[op.Client])...)
		}
	}
	for k, ss := range held {
		pending[k] = subtract(union(pending[k], nil), union(ss, nil))
	}
	var stalls []wait
	for _, k := range slices.Sorted(maps.Keys(pending)) {
		if s, ok := longestWait(k, union(pending[k], nil), served[k], w); ok {
			stalls = append(stalls, s)
		}
	}
	return stalls
}

// runStall returns the whole run's longest stall in w: the run waits while
// some worker runs under no fault of its own and none hits the whole run.
// With no lease (ex.unleased), it does not wait while a fault holds a
// request: a stopped transaction's locks may hold up any key (a table's
// unique index, a foreign key), and nothing but the fault's end frees them.
func runStall(ops []history.Op, w window, workers []int, ex exclusions) (wait, bool) {
	var served []history.Time
	var held []span
	ends := callEnds(ops, w)
	for i := range ops {
		op := &ops[i]
		if _, ok := slices.BinarySearch(workers, op.Client); !ok {
			continue
		}
		if isServed(op) {
			served = append(served, op.Return)
		}
		if s := (span{max(op.Call, w.from), min(ends[i], w.to)}); ex.unleased && s.from < s.to {
			held = append(held, intersect([]span{s}, union(ex.byClient[op.Client], ex.global))...)
		}
	}
	all := []span{{w.from, w.to}}
	for _, c := range workers {
		all = intersect(all, union(ex.byClient[c], nil))
	}
	if len(workers) == 0 {
		all = nil
	}
	waiting := subtract([]span{{w.from, w.to}}, union(all, ex.global))
	waiting = subtract(waiting, union(held, nil))
	return longestWait(allKeys, waiting, served, w)
}

// isServed reports whether op completed: accepted, or refused by the
// mechanism; an error or a timeout is no answer.
func isServed(op *history.Op) bool {
	return op.Outcome == history.OK || op.Outcome == history.Fail && op.Meta[MetaRefused] != ""
}

// callEnds returns when each operation stopped waiting: its return, or for
// one of unknown outcome (Return Inf) its client's next call, or w's end.
func callEnds(ops []history.Op, w window) []history.Time {
	ends := make([]history.Time, len(ops))
	byClient := map[int][]int{}
	for i := range ops {
		ends[i] = ops[i].Return
		byClient[ops[i].Client] = append(byClient[ops[i].Client], i)
	}
	for _, is := range byClient {
		slices.SortFunc(is, func(a, b int) int { return cmp.Compare(ops[a].Call, ops[b].Call) })
		for j, i := range is {
			if ends[i] != history.Inf {
				continue
			}
			ends[i] = w.to
			if j+1 < len(is) {
				ends[i] = max(ops[is[j+1]].Call, ops[i].Call)
			}
		}
	}
	return ends
}

// longestWait returns the longest time waiting (a union of spans, sorted)
// covers between two consecutive served times, or w's edges; false when it
// covers none. One pass over both: a key may have many of each.
func longestWait(key string, waiting []span, served []history.Time, w window) (wait, bool) {
	if len(waiting) == 0 {
		return wait{}, false
	}
	cuts := []history.Time{w.from}
	for _, t := range slices.Sorted(slices.Values(served)) {
		if t > w.from && t < w.to {
			cuts = append(cuts, t)
		}
	}
	cuts = append(cuts, w.to)
	var longest wait
	j := 0 // the first span that may reach into the segment
	for i := 0; i+1 < len(cuts); i++ {
		from, to := cuts[i], cuts[i+1]
		for j < len(waiting) && waiting[j].to <= from {
			j++
		}
		var d history.Time
		for k := j; k < len(waiting) && waiting[k].from < to; k++ {
			d += min(waiting[k].to, to) - max(waiting[k].from, from)
		}
		if d > longest.waited {
			longest = wait{key: key, from: from, to: to, waited: d}
		}
	}
	return longest, longest.waited > 0
}

// union returns the spans of a and b merged, sorted, none empty.
func union(a, b []span) []span {
	all := slices.Concat(a, b)
	all = slices.DeleteFunc(all, func(s span) bool { return s.from >= s.to })
	slices.SortFunc(all, func(x, y span) int { return cmp.Compare(x.from, y.from) })
	var out []span
	for _, s := range all {
		if n := len(out); n > 0 && s.from <= out[n-1].to {
			out[n-1].to = max(out[n-1].to, s.to)
			continue
		}
		out = append(out, s)
	}
	return out
}

// subtract returns the parts of the spans of a that no span of b covers; b
// is a union (sorted, merged).
func subtract(a, b []span) []span {
	var out []span
	for _, s := range a {
		from := s.from
		for _, x := range b {
			if x.to <= from || x.from >= s.to {
				continue
			}
			if x.from > from {
				out = append(out, span{from, x.from})
			}
			from = max(from, x.to)
		}
		if from < s.to {
			out = append(out, span{from, s.to})
		}
	}
	return out
}

// intersect returns the parts covered by both a and b, each a union.
func intersect(a, b []span) []span {
	var out []span
	for _, x := range a {
		for _, y := range b {
			if lo, hi := max(x.from, y.from), min(x.to, y.to); lo < hi {
				out = append(out, span{lo, hi})
			}
		}
	}
	return union(out, nil)
}
