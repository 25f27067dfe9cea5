package inventory

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/lockfree-go/lockfree/atomic"
	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/internal/short"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/approach"
	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"
)

// The statements of the store under a lease lock without a fence (the
// naive lock, the redis locks): the fenced twin's reads and writes without
// the token, each as few round trips as the flow allows.
const (
	sqlInventoryLockedRead  = `SELECT quantity FROM inventory WHERE sku = $1`
	sqlInventoryLockedWrite = `UPDATE inventory SET quantity = $2 WHERE sku = $1`
	sqlInventoryLockedReadN = `SELECT sku, quantity FROM inventory WHERE sku = ANY($1::text[])`
	// sqlInventoryLockedWriteN writes a basket's rows in one statement.
	sqlInventoryLockedWriteN = `UPDATE inventory t SET quantity = v.q
	FROM unnest($1::text[], $2::bigint[]) AS v(sku, q) WHERE t.sku = v.sku`
	sqlInventoryLockedHold = `INSERT INTO inventory (sku, quantity) VALUES ($1, $2) ON CONFLICT (sku) DO NOTHING`
	// sqlInventoryFencedHold is the hold of a lock whose token the writes
	// carry: the new row starts with it.
	sqlInventoryFencedHold = `INSERT INTO inventory (sku, quantity, fencing_token) VALUES ($1, $2, $3) ON CONFLICT (sku) DO NOTHING`
)

// inventoryFence is the fence of the rows, for the locks whose tokens the
// reads and writes carry (etcd-fenced).
var inventoryFence = fencedlock.Fence{Table: "inventory", Key: "sku"}

// inventoryNaive is the fenced twin without its fence, on the same
// fencedlock.Locker: lock the row(s), plain read, check, unconditional
// write, release. A holder that pauses past its lease writes a stock
// computed from what it read before another holder sold: a lost sale.
type inventoryNaive struct{}

func init() { engine.RegisterApproach(inventoryNaive{}) }

func (inventoryNaive) Scenario() string          { return "inventory" }
func (inventoryNaive) Approach() engine.Approach { return engine.NaiveLock }
func (inventoryNaive) Label() string {
	return "lease lock (fencedlock.Locker): lock row(s) → SELECT → check → UPDATE without the token → release"
}
func (inventoryNaive) Protection(p engine.Params) engine.Protection {
	return engine.LockTTL(p)
}

func (inventoryNaive) NewClient(_ context.Context, env *engine.Env) (engine.Client, error) {
	l, err := approach.NaiveLocker(env, "inventory/")
	if err != nil {
		return nil, err
	}
	// The statements run on the operation's context: a stopped process
	// does not see its lease's context end.
	return newInventoryClient(env, inventoryLockedOps{
		env: env, point: "harness.inventory.naive.before-write",
		lock: func(ctx context.Context, rows []string, fn func([]int64) error) error {
			return lockEach(ctx, l, sortedRows(rows), noTokens(fn))
		},
		writeContext: approach.SameContext,
	}), nil
}

// lockEach runs fn holding the locks of rows, taken one after another.
func lockEach(ctx context.Context, l *fencedlock.Locker, rows []string, fn func() error) error {
	if len(rows) == 0 {
		return fn()
	}
	return l.Do(ctx, rows[0], func(context.Context, fencedlock.Lease) error {
		return lockEach(ctx, l, rows[1:], fn)
	})
}

// noTokens adapts fn, which needs no tokens, to a lock that has none.
func noTokens(fn func([]int64) error) func() error { return func() error { return fn(nil) } }

// inventoryLockedOps are the store's operations under a lease lock: lock
// runs fn holding the locks of rows, taken in key order, with their tokens
// (tokens[i] is rows[i]'s) when the lock has tokens the reads and writes
// carry, nil when it has none (nothing else then protects the rows); the
// writes after the before-write point run on writeContext's context.
type inventoryLockedOps struct {
	env          *engine.Env
	point        string
	lock         func(ctx context.Context, rows []string, fn func(tokens []int64) error) error
	writeContext func(ctx context.Context) (context.Context, context.CancelFunc)
}

func (o inventoryLockedOps) read(ctx context.Context, row string) (int64, error) {
	var q int64
	err := o.env.DB.QueryRow(ctx, sqlInventoryLockedRead, row).Scan(&q)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, fmt.Errorf("no row %s", short.Quote(row))
	}
	return q, err
}

// readAs is read under the lock: a fenced read with the row's token, when
// the lock has one.
func (o inventoryLockedOps) readAs(ctx context.Context, row string, tokens []int64) (int64, error) {
	if tokens == nil {
		return o.read(ctx, row)
	}
	var q int64
	return q, inventoryFence.Read(ctx, o.env.DB, row, tokens[0], "quantity", &q)
}

// write writes q to row: a fenced write with the row's token, when the
// lock has one.
func (o inventoryLockedOps) write(ctx context.Context, db fencedlock.DB, row string, q int64, token []int64) error {
	if token == nil {
		_, err := db.Exec(ctx, sqlInventoryLockedWrite, row, q)
		return err
	}
	return inventoryFence.Update(ctx, db, row, token[0], "quantity = $1", q)
}

// update is the flow of every single-row operation: lock, read, decide,
// write, release.
func (o inventoryLockedOps) update(ctx context.Context, row string, decide func(q int64) (int64, error)) (int64, error) {
	var next int64
	err := o.lock(ctx, []string{row}, func(tokens []int64) error {
		q, err := o.readAs(ctx, row, tokens)
		if err != nil {
			return err
		}
		if next, err = decide(q); err != nil {
			return err
		}
		o.env.BeforeWrite(ctx, o.point)
		wctx, cancel := o.writeContext(ctx)
		defer cancel()
		return o.write(wctx, o.env.DB, row, next, tokens)
	})
	return next, err
}

func (o inventoryLockedOps) sell(ctx context.Context, sku string) (int64, error) {
	return o.update(ctx, sku, func(q int64) (int64, error) {
		if q < 1 {
			return 0, atomic.ErrInsufficient
		}
		return q - 1, nil
	})
}

func (o inventoryLockedOps) restock(ctx context.Context, row string, amount, capacity int64) (int64, error) {
	return o.update(ctx, row, func(q int64) (int64, error) {
		if q > capacity-amount {
			return 0, atomic.ErrInsufficient
		}
		return q + amount, nil
	})
}

// reprice reads the price without the lock, then compares and sets it
// under the lock, as the fenced twin does.
func (o inventoryLockedOps) reprice(ctx context.Context, row string) (int64, int64, error) {
	old, err := o.read(ctx, row)
	if err != nil {
		return 0, 0, err
	}
	_, err = o.update(ctx, row, func(q int64) (int64, error) {
		if q != old {
			return 0, atomic.ErrConflict
		}
		return old + 1, nil
	})
	return old, old + 1, err
}

func (o inventoryLockedOps) bid(ctx context.Context, row string, amount int64) error {
	_, err := o.update(ctx, row, func(q int64) (int64, error) {
		if amount <= q {
			return 0, atomic.ErrConflict
		}
		return amount, nil
	})
	return err
}

// basket locks its rows in key order, reads them in one statement (a
// fenced read each, with tokens), checks them all, and writes them all in
// one statement (a fenced write each, in one transaction, with tokens).
func (o inventoryLockedOps) basket(ctx context.Context, rows []string) (map[string]int64, error) {
	var left map[string]int64
	err := o.lock(ctx, rows, func(tokens []int64) error {
		var err error
		if left, err = o.readRows(ctx, rows, tokens); err != nil {
			return err
		}
		next := make([]int64, len(rows))
		for i, r := range rows {
			q, ok := left[r]
			switch {
			case !ok:
				return fmt.Errorf("no row %s", short.Quote(r))
			case q < 1:
				return atomic.ErrInsufficient
			}
			next[i] = q - 1
			left[r] = q - 1
		}
		o.env.BeforeWrite(ctx, o.point)
		wctx, cancel := o.writeContext(ctx)
		defer cancel()
		if tokens == nil {
			_, err = o.env.DB.Exec(wctx, sqlInventoryLockedWriteN, rows, next)
			return err
		}
		return pgx.BeginFunc(wctx, o.env.DB, func(tx pgx.Tx) error {
			for i, r := range rows {
				if err := o.write(wctx, tx, r, next[i], tokens[i:i+1]); err != nil {
					return err
				}
			}
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	return left, nil
}

// readRows reads rows' quantities: in one statement, or a fenced read of
// each with its token.
func (o inventoryLockedOps) readRows(ctx context.Context, rows []string, tokens []int64) (map[string]int64, error) {
	left := make(map[string]int64, len(rows))
	if tokens != nil {
		for i, r := range rows {
			q, err := o.readAs(ctx, r, tokens[i:i+1])
			if err != nil {
				return nil, err
			}
			left[r] = q
		}
		return left, nil
	}
	res, err := o.env.DB.Query(ctx, sqlInventoryLockedReadN, rows)
	if err != nil {
		return nil, err
	}
	var sku string
	var q int64
	_, err = pgx.ForEachRow(res, []any{&sku, &q}, func() error { left[sku] = q; return nil })
	return left, err
}

// hold looks for the slot under its lock and inserts it if absent; the
// insert still relies on the key's unique index, as the fenced twin's does
// (with tokens, the new row starts with its token).
func (o inventoryLockedOps) hold(ctx context.Context, row string, holder int64) error {
	return o.lock(ctx, []string{row}, func(tokens []int64) error {
		var q int64
		switch err := o.env.DB.QueryRow(ctx, sqlInventoryLockedRead, row).Scan(&q); {
		case err == nil:
			return atomic.ErrConflict
		case !errors.Is(err, pgx.ErrNoRows):
			return err
		}
		o.env.BeforeWrite(ctx, o.point)
		wctx, cancel := o.writeContext(ctx)
		defer cancel()
		if tokens != nil {
			return changed(o.env.DB.Exec(wctx, sqlInventoryFencedHold, row, holder, tokens[0]))
		}
		return changed(o.env.DB.Exec(wctx, sqlInventoryLockedHold, row, holder))
	})
}
