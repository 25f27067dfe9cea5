package harness

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/lockfree-go/lockfree/internal/history"
)

// sqlInventoryRaw is the least a sale can be: one conditional statement,
// returning the stock it left.
const sqlInventoryRaw = `UPDATE inventory SET quantity = quantity - 1 WHERE sku = $1 AND quantity >= 1 RETURNING quantity`

// inventoryRaw is bare SQL: the conditional UPDATE through pgx, the floor
// of what any approach costs.
type inventoryRaw struct{}

func init() { RegisterApproach(inventoryRaw{}) }

func (inventoryRaw) Scenario() string   { return "inventory" }
func (inventoryRaw) Approach() Approach { return Raw }
func (inventoryRaw) Label() string {
	return "bare SQL: one UPDATE … WHERE quantity >= 1 RETURNING quantity"
}
func (inventoryRaw) Protection(Params) Protection { return Protection{} }

func (inventoryRaw) NewClient(_ context.Context, env *Env) (Client, error) {
	return &inventoryRawClient{env: env}, nil
}

type inventoryRawClient struct{ env *Env }

func (c *inventoryRawClient) Op(ctx context.Context) error {
	ctx, op, err := c.env.Invoke(ctx, inventoryKey(c.env), history.KindSell, nil)
	if err != nil {
		return err
	}
	c.env.BeforeWrite(ctx, "harness.inventory.raw.before-write")
	var left int64
	err = c.env.DB.QueryRow(ctx, sqlInventoryRaw, op.key).Scan(&left)
	if errors.Is(err, pgx.ErrNoRows) {
		return op.Ok(history.CounterOutput{Insufficient: true}) // every SKU exists: the floor refused it
	}
	return op.Finish(history.Stock(left), err)
}

func (c *inventoryRawClient) Close() error { return nil }
