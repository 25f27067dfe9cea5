package harness

import (
	"context"

	"github.com/lockfree-go/lockfree/atomic"
	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/internal/history"
)

// The naive lock's statements: the fenced twin's read and write without the
// token.
const (
	sqlInventoryNaiveRead  = `SELECT quantity FROM inventory WHERE sku = $1`
	sqlInventoryNaiveWrite = `UPDATE inventory SET quantity = $1 WHERE sku = $2`
)

// inventoryNaive is the fenced twin without its fence, on the same
// fencedlock.Locker: lock, plain read, check, unconditional write, release.
// A holder that pauses past its lease writes a stock computed from what it
// read before another holder sold: a lost sale.
type inventoryNaive struct{}

func init() { RegisterApproach(inventoryNaive{}) }

func (inventoryNaive) Scenario() string   { return "inventory" }
func (inventoryNaive) Approach() Approach { return NaiveLock }
func (inventoryNaive) Label() string {
	return "lease lock (fencedlock.Locker): lock SKU → SELECT → check → UPDATE without the token → release"
}
func (inventoryNaive) Protection(p Params) Protection {
	return lockTTL(p)
}

func (inventoryNaive) NewClient(_ context.Context, env *Env) (Client, error) {
	l, err := newNaiveLocker(env, "inventory/")
	if err != nil {
		return nil, err
	}
	return &inventoryNaiveClient{env: env, locker: l}, nil
}

type inventoryNaiveClient struct {
	env    *Env
	locker *fencedlock.Locker
}

func (c *inventoryNaiveClient) Op(ctx context.Context) error {
	ctx, op, err := c.env.Invoke(ctx, inventoryKey(c.env), history.KindSell, nil)
	if err != nil {
		return err
	}
	var left int64
	// The statements run on the operation's context: a stopped process
	// does not see its lease's context end.
	err = c.locker.Do(ctx, op.key, func(context.Context, fencedlock.Lease) error {
		var q int64
		if err := c.env.DB.QueryRow(ctx, sqlInventoryNaiveRead, op.key).Scan(&q); err != nil {
			return err
		}
		if q < 1 {
			return atomic.ErrInsufficient
		}
		c.env.BeforeWrite(ctx, "harness.inventory.naive.before-write")
		left = q - 1
		_, err := c.env.DB.Exec(ctx, sqlInventoryNaiveWrite, left, op.key)
		return err
	})
	return finishSale(op, left, err)
}

func (c *inventoryNaiveClient) Close() error { return nil }
