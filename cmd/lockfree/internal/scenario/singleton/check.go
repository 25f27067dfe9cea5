package singleton

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/history"
	"github.com/lockfree-go/lockfree/internal/short"
)

// The violations of the scenario besides history's: a closing written
// after one of a higher term, and one whose sums are not its ledger's.
const (
	staleLeader history.Anomaly = "stale leader"
	incomplete  history.Anomaly = "incomplete ledger"
)

// Closing is one closing found after a run, with the sums of its period's
// ledger then.
type Closing struct {
	// ID orders the closings as they were inserted.
	ID       int64
	Job      string
	Period   int64
	Total    int64
	Entries  int64
	Term     int64
	ClosedBy string
	// LedgerTotal and LedgerEntries are the period's ledger's.
	LedgerTotal   int64
	LedgerEntries int64
}

const sqlSingletonClosings = `SELECT c.id, c.job, c.period, c.total, c.entries, c.term, c.closed_by,
	coalesce(l.total, 0), coalesce(l.entries, 0)
FROM closings c LEFT JOIN (
	SELECT job, period, sum(amount) AS total, count(*) AS entries FROM ledger GROUP BY job, period
) l ON l.job = c.job AND l.period = c.period
ORDER BY c.id`

func readClosings(ctx context.Context, db *pgxpool.Pool) ([]Closing, error) {
	rows, err := db.Query(ctx, sqlSingletonClosings)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Closing
	for rows.Next() {
		var c Closing
		if err := rows.Scan(&c.ID, &c.Job, &c.Period, &c.Total, &c.Entries, &c.Term, &c.ClosedBy, &c.LedgerTotal, &c.LedgerEntries); err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

// Check holds closings, in the order they were inserted, and ops, every
// one a KindClose, to the scenario's rules, job by job: each period from
// start up to the job's last closing closed exactly once (Duplicate, Gap),
// never after a closing of a higher term (stale leader), with its period's
// whole ledger (incomplete), by an operation of the job that was not
// refused (Phantom); and each run told it closed a period finds its closing
// (Missing).
func Check(ops []history.Op, closings []Closing, start int64) (*history.Findings, error) {
	effects := make([]history.Effect, len(closings))
	for i, c := range closings {
		effects[i] = history.Effect{Key: c.Job, Seq: c.Period, By: c.ClosedBy}
	}
	inv, err := history.NewInvariant("singleton", ops, effects, KindClose)
	if err != nil {
		return nil, err
	}
	byJob := map[string][]Closing{}
	for _, c := range closings {
		byJob[c.Job] = append(byJob[c.Job], c)
	}
	for _, job := range inv.Keys() {
		cs := byJob[job]
		checkPeriods(inv, job, cs, start)
		checkTerms(inv, job, cs)
		checkLedger(inv, job, cs)
		for _, e := range inv.Effects(job) {
			inv.Made(job, e, "a closing")
		}
		checkTold(inv, job, cs)
	}
	return inv.Findings(), nil
}

// checkPeriods finds the periods of job closed more than once, and those
// skipped below its last closing.
func checkPeriods(inv *history.Invariant, job string, cs []Closing, start int64) {
	by := map[int64][]history.Effect{}
	last := start - 1
	for _, c := range cs {
		by[c.Period] = append(by[c.Period], history.Effect{Key: job, Seq: c.Period, By: c.ClosedBy})
		last = max(last, c.Period)
	}
	for p := start; p <= last; p++ {
		switch es := by[p]; {
		case len(es) == 0:
			inv.Add(job, history.Violation{Anomaly: history.Gap,
				Text: fmt.Sprintf("job %s's period %d was never closed, though period %d was", short.Quote(job), p, last)})
		case len(es) > 1:
			inv.Add(job, history.Violation{Anomaly: history.Duplicate, Marks: inv.Marks(es, history.Culprit),
				Text: fmt.Sprintf("job %s's period %d was closed %d times%s", short.Quote(job), p, len(es), inv.ByWhom(es))})
		}
	}
	for p := range by {
		if p < start {
			inv.Add(job, history.Violation{Anomaly: history.Phantom, Marks: inv.Marks(by[p], history.Culprit),
				Text: fmt.Sprintf("job %s's period %d, before the run's first (%d), was closed", short.Quote(job), p, start)})
		}
	}
}

// checkTerms finds the closings of job written after one of a higher term:
// by a leader or holder that had been superseded. Closings of no term (0)
// are not judged.
func checkTerms(inv *history.Invariant, job string, cs []Closing) {
	var top *Closing
	for i := range cs {
		c := &cs[i]
		if c.Term == 0 {
			continue
		}
		if top != nil && c.Term < top.Term {
			es := []history.Effect{{Key: job, Seq: c.Period, By: c.ClosedBy}}
			inv.Add(job, history.Violation{Anomaly: staleLeader, Marks: inv.Marks(es, history.Culprit),
				Text: fmt.Sprintf("job %s's period %d was closed in term %d%s, after period %d was closed in term %d",
					short.Quote(job), c.Period, c.Term, inv.ByWhom(es), top.Period, top.Term)})
			continue
		}
		top = c
	}
}

// checkLedger finds the closings of job whose sums are not those of their
// period's ledger.
func checkLedger(inv *history.Invariant, job string, cs []Closing) {
	for _, c := range cs {
		if c.Total == c.LedgerTotal && c.Entries == c.LedgerEntries {
			continue
		}
		es := []history.Effect{{Key: job, Seq: c.Period, By: c.ClosedBy}}
		inv.Add(job, history.Violation{Anomaly: incomplete, Marks: inv.Marks(es, history.Culprit),
			Text: fmt.Sprintf("job %s's period %d was closed%s with %d entries totalling %d, but its ledger holds %d totalling %d",
				short.Quote(job), c.Period, inv.ByWhom(es), c.Entries, c.Total, c.LedgerEntries, c.LedgerTotal)})
	}
}

// checkTold finds the runs of job told they closed a period whose closing
// is not theirs, or not there.
func checkTold(inv *history.Invariant, job string, cs []Closing) {
	for _, op := range inv.Ops(job) {
		var out CloseOutput
		if op.Outcome != history.OK || json.Unmarshal(op.Output, &out) != nil || !out.Closed {
			continue
		}
		if slices.ContainsFunc(cs, func(c Closing) bool { return c.ClosedBy == op.ID() && c.Period == out.Period }) {
			continue
		}
		inv.Add(job, history.Violation{Anomaly: history.Missing, Marks: []history.Mark{{Op: *op, Role: history.Witness}},
			Text: fmt.Sprintf("%s was told it closed period %d, but no closing of it is there", inv.Did(op, "run"), out.Period)})
	}
}
