package inventory

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/lockfree-go/lockfree/atomic"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"
)

// The least each operation of the store can be: one conditional statement
// (a reprice reads the price first), every row existing but the holds'.
const (
	sqlInventoryRaw        = `UPDATE inventory SET quantity = quantity - 1 WHERE sku = $1 AND quantity >= 1 RETURNING quantity`
	sqlInventoryRawRestock = `UPDATE inventory SET quantity = quantity + $2 WHERE sku = $1 AND quantity <= $3 RETURNING quantity`
	sqlInventoryRawRead    = `SELECT quantity FROM inventory WHERE sku = $1`
	sqlInventoryRawCAS     = `UPDATE inventory SET quantity = $3 WHERE sku = $1 AND quantity = $2`
	sqlInventoryRawBid     = `UPDATE inventory SET quantity = $2 WHERE sku = $1 AND quantity < $2`
	sqlInventoryRawHold    = `INSERT INTO inventory (sku, quantity) VALUES ($1, $2) ON CONFLICT (sku) DO NOTHING`
	// sqlInventoryRawBasket locks the basket's rows in key order, and takes
	// a unit of each only if every one has one: all or nothing.
	sqlInventoryRawBasket = `WITH locked AS MATERIALIZED (
		SELECT sku, quantity FROM inventory WHERE sku = ANY($1::text[]) ORDER BY sku FOR UPDATE
	)
	UPDATE inventory t SET quantity = t.quantity - 1 FROM locked
	WHERE t.sku = locked.sku
	AND (SELECT count(*) = cardinality($1::text[]) AND bool_and(quantity >= 1) FROM locked)
	RETURNING t.sku, t.quantity`
)

// inventoryRaw is bare SQL through pgx, the floor of what any approach
// costs: the store's operations as one statement each, as a careful
// engineer writes them without a library.
type inventoryRaw struct{}

func init() { engine.RegisterApproach(inventoryRaw{}) }

func (inventoryRaw) Scenario() string          { return "inventory" }
func (inventoryRaw) Approach() engine.Approach { return engine.Raw }
func (inventoryRaw) Label() string {
	return "bare SQL: each operation one conditional statement (sale: UPDATE … WHERE quantity >= 1 RETURNING quantity)"
}
func (inventoryRaw) Protection(engine.Params) engine.Protection { return engine.Protection{} }

func (inventoryRaw) NewClient(_ context.Context, env *engine.Env) (engine.Client, error) {
	return newInventoryClient(env, inventoryRawOps{env}), nil
}

type inventoryRawOps struct{ env *engine.Env }

const inventoryRawPoint = "harness.inventory.raw.before-write"

// refusedIf is the error of a conditional statement: one that returned no
// row was refused by its condition (every row it names exists).
func refusedIf(err, refusal error) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return refusal
	}
	return err
}

func (o inventoryRawOps) sell(ctx context.Context, sku string) (int64, error) {
	o.env.BeforeWrite(ctx, inventoryRawPoint)
	var left int64
	err := o.env.DB.QueryRow(ctx, sqlInventoryRaw, sku).Scan(&left)
	return left, refusedIf(err, atomic.ErrInsufficient)
}

func (o inventoryRawOps) basket(ctx context.Context, rows []string) (map[string]int64, error) {
	o.env.BeforeWrite(ctx, inventoryRawPoint)
	left := make(map[string]int64, len(rows))
	var sku string
	var q int64
	res, err := o.env.DB.Query(ctx, sqlInventoryRawBasket, rows)
	if err != nil {
		return nil, err
	}
	if _, err := pgx.ForEachRow(res, []any{&sku, &q}, func() error { left[sku] = q; return nil }); err != nil {
		return nil, err
	}
	switch len(left) {
	case 0:
		return nil, atomic.ErrInsufficient
	case len(rows):
		return left, nil
	}
	return nil, fmt.Errorf("basket applied to %d of %d rows", len(left), len(rows))
}

func (o inventoryRawOps) restock(ctx context.Context, row string, amount, capacity int64) (int64, error) {
	o.env.BeforeWrite(ctx, inventoryRawPoint)
	var left int64
	err := o.env.DB.QueryRow(ctx, sqlInventoryRawRestock, row, amount, capacity-amount).Scan(&left)
	return left, refusedIf(err, atomic.ErrInsufficient)
}

func (o inventoryRawOps) reprice(ctx context.Context, row string) (int64, int64, error) {
	var old int64
	if err := o.env.DB.QueryRow(ctx, sqlInventoryRawRead, row).Scan(&old); err != nil {
		return 0, 0, err
	}
	o.env.BeforeWrite(ctx, inventoryRawPoint)
	return old, old + 1, changed(o.env.DB.Exec(ctx, sqlInventoryRawCAS, row, old, old+1))
}

func (o inventoryRawOps) bid(ctx context.Context, row string, amount int64) error {
	o.env.BeforeWrite(ctx, inventoryRawPoint)
	return changed(o.env.DB.Exec(ctx, sqlInventoryRawBid, row, amount))
}

// changed is the error of a conditional statement that returns nothing: one
// that changed no row was refused by its condition (ErrConflict).
func changed(tag pgconn.CommandTag, err error) error {
	if err == nil && tag.RowsAffected() == 0 {
		return atomic.ErrConflict
	}
	return err
}

func (o inventoryRawOps) hold(ctx context.Context, row string, holder int64) error {
	o.env.BeforeWrite(ctx, inventoryRawPoint)
	return changed(o.env.DB.Exec(ctx, sqlInventoryRawHold, row, holder))
}
