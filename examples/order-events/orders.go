package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockfree-go/lockfree/examples/internal/demo"
	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/singlewriter"
)

// orderRow is an order's state and the events applied to it, in the order
// they were applied.
type orderRow struct {
	status  string
	lastSeq int64
	history []event
}

func (o *orderRow) apply(ev event) {
	o.status, o.lastSeq, o.history = ev.Type, ev.Seq, append(o.history, ev)
}

// orders is the order's state as the code sees it: the orders and
// order_history tables, or variables when running on the memory backend.
type orders interface {
	reset(ctx context.Context) error
	lastSeq(ctx context.Context) (int64, error)
	write(ctx context.Context, ev event) error
	fencedLastSeq(ctx context.Context, token int64) (int64, error)
	fencedWrite(ctx context.Context, token int64, ev event) error
	state(ctx context.Context) (orderRow, error)
}

// pgOrders is the orders and order_history tables.
type pgOrders struct{ db *pgxpool.Pool }

// fence makes the orders table's reads and writes fenced by token.
var fence = fencedlock.Fence{Table: "orders", Key: "id", TokenColumn: "fencing_token"}

func (s *pgOrders) reset(ctx context.Context) error {
	return pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `DELETE FROM order_history WHERE order_id = $1`, order); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO orders (id) VALUES ($1)
			ON CONFLICT (id) DO UPDATE SET status = 'new', last_seq = 0, fencing_token = 0`, order)
		return err
	})
}

func (s *pgOrders) lastSeq(ctx context.Context) (seq int64, err error) {
	err = s.db.QueryRow(ctx, `SELECT last_seq FROM orders WHERE id = $1`, order).Scan(&seq)
	return seq, err
}

// write applies ev to its order in tx.
func write(ctx context.Context, tx pgx.Tx, ev event) error {
	if _, err := tx.Exec(ctx, `UPDATE orders SET status = $2, last_seq = $3 WHERE id = $1`, ev.Order, ev.Type, ev.Seq); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, `INSERT INTO order_history (order_id, seq, event) VALUES ($1, $2, $3)`, ev.Order, ev.Seq, ev.Type)
	return err
}

func (s *pgOrders) write(ctx context.Context, ev event) error {
	return pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error { return write(ctx, tx, ev) })
}

func (s *pgOrders) fencedLastSeq(ctx context.Context, token int64) (seq int64, err error) {
	err = fence.Read(ctx, s.db, order, token, "last_seq", &seq)
	return seq, err
}

func (s *pgOrders) fencedWrite(ctx context.Context, token int64, ev event) error {
	return pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		if err := fence.Update(ctx, tx, ev.Order, token, "status = $1, last_seq = $2", ev.Type, ev.Seq); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO order_history (order_id, seq, event) VALUES ($1, $2, $3)`, ev.Order, ev.Seq, ev.Type)
		return err
	})
}

func (s *pgOrders) state(ctx context.Context) (o orderRow, err error) {
	if err := s.db.QueryRow(ctx, `SELECT status, last_seq FROM orders WHERE id = $1`, order).Scan(&o.status, &o.lastSeq); err != nil {
		return o, err
	}
	rows, err := s.db.Query(ctx, `SELECT order_id, seq, event FROM order_history WHERE order_id = $1 ORDER BY id`, order)
	if err != nil {
		return o, err
	}
	o.history, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (ev event, err error) {
		err = r.Scan(&ev.Order, &ev.Seq, &ev.Type)
		return ev, err
	})
	return o, err
}

// memOrders is the order in memory, for the lock-based code; its Row's gate
// plays the part of the token column.
type memOrders struct{ demo.Row[orderRow] }

func (s *memOrders) reset(context.Context) error            { s.Set(orderRow{status: "new"}); return nil }
func (s *memOrders) lastSeq(context.Context) (int64, error) { return s.Get().lastSeq, nil }
func (s *memOrders) write(_ context.Context, ev event) error {
	s.Update(func(o *orderRow) { o.apply(ev) })
	return nil
}

func (s *memOrders) fencedLastSeq(_ context.Context, token int64) (int64, error) {
	o, err := s.FencedGet(token)
	return o.lastSeq, err
}

func (s *memOrders) fencedWrite(_ context.Context, token int64, ev event) error {
	return s.FencedUpdate(token, func(o *orderRow) { o.apply(ev) })
}

func (s *memOrders) state(context.Context) (orderRow, error) {
	o := s.Get()
	o.history = slices.Clone(o.history)
	return o, nil
}

// newOrders returns the order for the lock-based code: the tables, or
// memory.
func newOrders(db *pgxpool.Pool) orders {
	if db == nil {
		return &memOrders{}
	}
	return &pgOrders{db: db}
}

// actorOrders reads the order from the state of the actor that owns it; only
// reset and state are used, and both run on the actor.
type actorOrders struct {
	g *singlewriter.Group[map[string]*orderRow]
}

func (s actorOrders) reset(ctx context.Context) error {
	return s.g.Do(ctx, order, func(shard *map[string]*orderRow) error {
		(*shard)[order] = &orderRow{status: "new"}
		return nil
	})
}

func (s actorOrders) state(ctx context.Context) (orderRow, error) {
	return singlewriter.Ask(ctx, s.g.Actor(order), func(shard *map[string]*orderRow) (orderRow, error) {
		o := *(*shard)[order]
		o.history = slices.Clone(o.history)
		return o, nil
	})
}

var errNotUsed = errors.New("order-events: the actors' state is written only by its actor")

func (actorOrders) lastSeq(context.Context) (int64, error)              { return 0, errNotUsed }
func (actorOrders) write(context.Context, event) error                  { return errNotUsed }
func (actorOrders) fencedLastSeq(context.Context, int64) (int64, error) { return 0, errNotUsed }
func (actorOrders) fencedWrite(context.Context, int64, event) error     { return errNotUsed }

// describe prints the order's state and the events applied to it.
func describe(ctx context.Context, w io.Writer, label string, s orders, fenced int) error {
	o, err := s.state(ctx)
	if err != nil {
		return err
	}
	names := make([]string, len(o.history))
	seen := map[int64]bool{}
	dups, outOfOrder := 0, false
	for i, ev := range o.history {
		names[i] = ev.Type
		if seen[ev.Seq] {
			dups++
		}
		seen[ev.Seq] = true
		outOfOrder = outOfOrder || (i > 0 && ev.Seq < o.history[i-1].Seq)
	}
	fmt.Fprintf(w, "%s: %s is %q after %s", label, order, o.status, strings.Join(names, " "))
	switch {
	case dups > 0 && outOfOrder:
		fmt.Fprintf(w, " — %d duplicate, applied out of order", dups)
	case dups > 0:
		fmt.Fprintf(w, " — %d duplicate", dups)
	case outOfOrder:
		fmt.Fprint(w, " — applied out of order")
	}
	if fenced > 0 {
		fmt.Fprintf(w, "; %d apply fenced off after its pause", fenced)
	}
	fmt.Fprintln(w)
	return nil
}
