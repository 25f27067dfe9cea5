package orders

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/history"
)

const (
	sqlOrdersView  = `SELECT order_id, n, by FROM order_view ORDER BY id`
	sqlOrdersLines = `SELECT id, lines FROM orders`
)

// gap is the anomaly of a line applied after a line of its order that is
// not the one before it: the lines between were written and not applied
// (yet), or are lost.
const gap history.Anomaly = "gap"

// check holds the read model, in the order applied, and each order's last
// line number to ops (Lines).
func check(ctx context.Context, db *pgxpool.Pool, ops []history.Op) (*history.Findings, error) {
	rows, err := db.Query(ctx, sqlOrdersView)
	if err != nil {
		return nil, err
	}
	var view []history.Effect
	e := history.Effect{}
	if _, err := pgx.ForEachRow(rows, []any{&e.Key, &e.Seq, &e.By}, func() error {
		view = append(view, e)
		return nil
	}); err != nil {
		return nil, err
	}
	rows, err = db.Query(ctx, sqlOrdersLines)
	if err != nil {
		return nil, err
	}
	written := map[string]int64{}
	var id string
	var n int64
	if _, err := pgx.ForEachRow(rows, []any{&id, &n}, func() error {
		written[id] = n
		return nil
	}); err != nil {
		return nil, err
	}
	return Lines(ops, view, written)
}

// Lines checks the read model view — the lines applied, in the order
// applied: Key the order, Seq the line number, By the operation that added
// it — against ops and written, each order's last line number in the
// database: each order's lines applied one after another from 1 to its last
// (none twice, none skipped, none out of order); each line added by an
// operation of its order that was not refused; each request applied at most
// once, each accepted one exactly once, with the number it was answered.
func Lines(ops []history.Op, view []history.Effect, written map[string]int64) (*history.Findings, error) {
	inv, err := history.NewInvariant("lines", ops, view, kindAdd)
	if err != nil {
		return nil, err
	}
	for _, k := range inv.Keys() {
		applied := map[string]int64{} // by operation
		seen := map[int64]bool{}
		var last int64
		for _, e := range inv.Effects(k) {
			inv.Made(k, e, fmt.Sprintf("line %d", e.Seq))
			appliedOnce(inv, k, e, applied, seen, last)
			applied[e.By], seen[e.Seq] = e.Seq, true
			last = max(last, e.Seq)
		}
		accepted(inv, k, applied)
		if w := written[k]; last < w {
			inv.Add(k, history.Violation{Anomaly: history.Missing,
				Text: fmt.Sprintf("lines %d to %d of order %s were written and never applied", last+1, w, k)})
		}
	}
	return inv.Findings(), nil
}

// appliedOnce checks one line applied: a copy, a request applied twice, a
// line out of order or after a gap.
func appliedOnce(inv *history.Invariant, k string, e history.Effect, applied map[string]int64, seen map[int64]bool, last int64) {
	ln := fmt.Sprintf("line %d of order %s", e.Seq, k)
	marks := inv.Marks([]history.Effect{e}, history.Culprit)
	if n, ok := applied[e.By]; ok && n != e.Seq {
		inv.Add(k, history.Violation{Anomaly: history.Duplicate, Marks: marks,
			Text: fmt.Sprintf("%s was applied, and line %d before it, for one request%s", ln, n, inv.ByWhom([]history.Effect{e}))})
	}
	switch {
	case seen[e.Seq]:
		inv.Add(k, history.Violation{Anomaly: history.Duplicate, Marks: marks,
			Text: fmt.Sprintf("%s was applied twice%s", ln, inv.ByWhom([]history.Effect{e}))})
	case e.Seq <= last:
		inv.Add(k, history.Violation{Anomaly: history.Disorder, Marks: marks,
			Text: fmt.Sprintf("%s was applied after line %d", ln, last)})
	case e.Seq > last+1:
		inv.Add(k, history.Violation{Anomaly: gap, Marks: marks,
			Text: fmt.Sprintf("%s was applied after line %d: the lines between were not", ln, last)})
	}
}

// accepted checks each accepted request of order k: applied, with the
// line number it was answered.
func accepted(inv *history.Invariant, k string, applied map[string]int64) {
	for _, op := range inv.Ops(k) {
		if op.Outcome != history.OK {
			continue
		}
		var out lineOut
		_ = json.Unmarshal(op.Output, &out) // a bad output shows as line 0
		n, ok := applied[op.ID()]
		switch {
		case !ok:
			inv.Add(k, history.Violation{Anomaly: history.Missing, Marks: []history.Mark{{Op: *op, Role: history.Clobbered}},
				Text: fmt.Sprintf("line %d of order %s, accepted by %s, was never applied", out.N, k, inv.Did(op, "request"))})
		case n != out.N:
			inv.Add(k, history.Violation{Anomaly: history.LostUpdate, Marks: []history.Mark{{Op: *op, Role: history.Clobbered}},
				Text: fmt.Sprintf("%s was answered line %d of order %s, and its line was applied as line %d", inv.Did(op, "request"), out.N, k, n)})
		}
	}
}
