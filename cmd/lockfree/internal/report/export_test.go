package report

import (
	"fmt"
	"math/rand/v2"
)

// Fixture returns realistic reports for tests and the README screenshot:
// inventory on one hot key under pauses, where the naive lock oversells,
// with a recorded timeline per approach; documents with measured round
// trips, extras and interleaved rounds; and, with sweep, accounts swept over
// clients and keys. It is deterministic.
func Fixture(sweep bool) []Report {
	reps := []Report{fixtureInventory(), fixtureDocuments()}
	if sweep {
		reps = append(reps, fixtureSweep()...)
	}
	return reps
}

func fixtureInventory() Report {
	rep := Report{Scenario: "inventory", Backend: "postgres", Clients: 6, Keys: 1, DurationS: 5, Faults: []Fault{"pause"},
		FaultHow: map[Fault]string{"pause": "SIGSTOPs past the lease, each resumed after another worker took over"}}
	pauses := []float64{0.9, 2.1, 3.3, 4.2}
	for _, a := range []Approach{Alternative, FencedLock, NaiveLock, Raw} {
		tl, writes, rejected, violations := simulate(a, 6, 5, pauses)
		// The recorder kept 1 accepted write in 40, as a capped timeline does.
		tl.Note = "accepted writes thinned to 1 in 40 (all rejected, uncertain and violating writes kept)"
		r := Result{Approach: a, Label: fixtureLabels[a], Ops: writes * 40, OpsPerSec: float64(writes*40) / 5, Rejected: rejected,
			Violations: violations, Checked: true, Pauses: int64(len(pauses)), FaultsInjected: map[Fault]int64{"pause": int64(len(pauses))},
			RoundTripsPerOp: Float(fixtureRT[a]), StatementsPerOp: Float(fixtureRT[a]), Timeline: &tl}
		r.P50ms, r.P99ms = fixtureLatency[a][0], fixtureLatency[a][1]
		if violations > 0 {
			r.Detail = fmt.Sprintf("%d acknowledged sales lost (overwritten), 0 units gone unaccounted, 0 SKUs below zero", violations)
		}
		rep.Results = append(rep.Results, r)
	}
	rep.Results = append(rep.Results, Result{Approach: RedisLock, Label: "Redis SET NX PX lease, unfenced write", Skipped: "no Redis (set --redis or REDIS_ADDR)"})
	return rep
}

var (
	fixtureLabels = map[Approach]string{
		Alternative: "atomic.Decrement: conditional UPDATE … WHERE quantity >= 1",
		FencedLock:  "fencedlock: lock SKU → read → check → fenced write → release",
		NaiveLock:   "lease lock: lock SKU → read → check → unfenced write → release",
		Raw:         "bare UPDATE, no lock",
	}
	fixtureRT      = map[Approach]float64{Alternative: 1, FencedLock: 5, NaiveLock: 4, Raw: 1}
	fixtureLatency = map[Approach][2]float64{Alternative: {2.1, 9.8}, FencedLock: {8.4, 512}, NaiveLock: {7.9, 506}, Raw: {1.9, 8.7}}
)

// simulate plays workers taking turns on one key for seconds; at each of
// pauses, the worker that holds the lease (or is mid-operation) stops for
// twice the 250ms lease and writes when it resumes.
func simulate(a Approach, workers int, seconds float64, pauses []float64) (tl Timeline, writes, rejected, violations int64) {
	rnd := rand.New(rand.NewPCG(7, uint64(len(a))))
	tl = Timeline{Start: 0, End: seconds, Lanes: make([]Lane, workers)}
	for i := range tl.Lanes {
		tl.Lanes[i].Name = fmt.Sprintf("worker %d", i+1)
	}
	locked := a == FencedLock || a == NaiveLock
	token, id := 40, 0
	var lastWrite string
	next := 0
	for t := 0.02; t < seconds; {
		w := rnd.IntN(workers)
		hold := 0.03 + rnd.Float64()*0.05
		if !locked {
			hold = 0.008 + rnd.Float64()*0.01
		}
		lane := &tl.Lanes[w]
		token++
		if next < len(pauses) && t >= pauses[next] {
			next++
			// The holder stops after its read; the lease runs out; another
			// worker takes over and writes; the stopped one resumes.
			resume := t + 0.5 + rnd.Float64()*0.05
			if locked {
				lane.Spans = append(lane.Spans, Span{Kind: SpanLease, Start: t, End: t + 0.25, Label: fmt.Sprintf("token %d", token)})
			}
			lane.Spans = append(lane.Spans, Span{Kind: SpanPause, Start: t + 0.01, End: resume, Label: "SIGSTOP"})
			stale := token
			u := t + 0.26
			for u < resume-0.02 {
				o := (w + 1 + rnd.IntN(workers-1)) % workers
				token++
				h := 0.03 + rnd.Float64()*0.05
				if locked {
					tl.Lanes[o].Spans = append(tl.Lanes[o].Spans, Span{Kind: SpanLease, Start: u, End: u + h, Label: fmt.Sprintf("token %d", token)})
				}
				id++
				lastWrite = fmt.Sprintf("w%d", id)
				tl.Lanes[o].Marks = append(tl.Lanes[o].Marks, Mark{Kind: MarkWrite, At: u + h*0.8, ID: lastWrite, Key: "sku-1", Label: fmt.Sprintf("stock 1000 → %d", 1000-id)})
				writes++
				u += h + 0.002
			}
			switch a {
			case NaiveLock:
				violations++
				lane.Marks = append(lane.Marks, Mark{Kind: MarkViolation, At: resume + 0.003, Key: "sku-1", Ref: lastWrite,
					Label: fmt.Sprintf("token %d wrote the stock it read before its pause, undoing the sale of %s", stale, lastWrite)})
			case FencedLock:
				rejected++
				lane.Marks = append(lane.Marks, Mark{Kind: MarkRejected, At: resume + 0.003, Key: "sku-1", Label: fmt.Sprintf("fenced: token %d < %d", stale, token)})
			default:
				writes++
				id++
				lane.Marks = append(lane.Marks, Mark{Kind: MarkWrite, At: resume + 0.003, ID: fmt.Sprintf("w%d", id), Key: "sku-1", Label: "conditional update applied to the current stock"})
			}
			t = u
			continue
		}
		if locked {
			lane.Spans = append(lane.Spans, Span{Kind: SpanLease, Start: t, End: t + hold, Label: fmt.Sprintf("token %d", token)})
		}
		id++
		lastWrite = fmt.Sprintf("w%d", id)
		kind := MarkWrite
		if rnd.IntN(60) == 0 {
			kind = MarkUncertain
		}
		lane.Marks = append(lane.Marks, Mark{Kind: kind, At: t + hold*0.8, ID: lastWrite, Key: "sku-1"})
		writes++
		t += hold + 0.002
	}
	return tl, writes, rejected, violations
}

func fixtureDocuments() Report {
	rep := Report{Scenario: "documents", Backend: "postgres", Clients: 16, Keys: 1000, DurationS: 5, Faults: []Fault{"pause"}}
	rows := []struct {
		a              Approach
		ops            float64
		p50, p99, rt   float64
		retries, viol  int64
		first, replays float64
	}{
		{Alternative, 2210, 5.1, 31, 3, 412, 0, 11020, 0},
		{FencedLock, 1630, 7.2, 520, 6, 0, 0, 8150, 0},
		{NaiveLock, 1702, 6.9, 515, 5, 0, 23, 8510, 0},
		{Raw, 2390, 4.8, 22, 2, 0, 0, 11950, 0},
	}
	for _, r := range rows {
		res := Result{Approach: r.a, Label: "read, add an edit, write back", Ops: int64(r.ops * 5), OpsPerSec: r.ops, P50ms: r.p50, P99ms: r.p99,
			Retries: r.retries, Violations: r.viol, Checked: r.a != Raw, Pauses: 40, RoundTripsPerOp: Float(r.rt),
			Extra:           map[string]float64{"first_executions": r.first, "replays": r.replays},
			RoundsOpsPerSec: []float64{r.ops * 0.96, r.ops, r.ops * 1.05}}
		rep.Results = append(rep.Results, res)
	}
	rep.Rounds = &Rounds{N: 3, Ratios: []Ratio{
		{Of: Alternative, To: FencedLock, Median: 1.36, Min: 1.28, Max: 1.41, PerRound: []float64{1.28, 1.36, 1.41}},
		{Of: Alternative, To: Raw, Median: 0.93, Min: 0.88, Max: 1.02, PerRound: []float64{0.88, 0.93, 1.02}},
	}}
	rep.Notes = []string{"raw is not checked: it applies edits without reading them back"}
	return rep
}

func fixtureSweep() []Report {
	var reps []Report
	for _, c := range []int{1, 4, 16, 64} {
		for _, k := range []int{1, 100, 10000} {
			rep := Report{Scenario: "accounts", Backend: "postgres", Clients: c, Keys: k, DurationS: 2, Faults: []Fault{}}
			spread := float64(min(c, k))
			for _, a := range []Approach{Alternative, FencedLock, NaiveLock, Raw} {
				var ops, p99 float64
				switch a {
				case Alternative, Raw:
					ops, p99 = 900*float64(c)/(1+float64(c)/(4*spread+4)), 2+0.4*float64(c)/spread
				default:
					ops, p99 = 180*spread/(1+spread/float64(c)), 5+6*float64(c)/spread
				}
				// Raw skips the checks; the naive lock skips the fence.
				f := map[Approach]float64{Raw: 1.12, NaiveLock: 1.15}[a]
				if f == 0 {
					f = 1
				}
				rep.Results = append(rep.Results, Result{Approach: a, OpsPerSec: ops * f, P99ms: p99 / f, Checked: true})
			}
			reps = append(reps, rep)
		}
	}
	return reps
}
