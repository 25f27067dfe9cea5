package harness

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/lockfree-go/lockfree/internal/history"
	"github.com/lockfree-go/lockfree/internal/short"
)

// The naive lock's statements, as the redis-lock clients send them.
const (
	sqlInventoryRedisRead  = `SELECT quantity FROM inventory WHERE sku = $1`
	sqlInventoryRedisWrite = `UPDATE inventory SET quantity = $2 WHERE sku = $1`
)

// inventoryRedis sells as naive-lock does, with the SKU's lock in Redis: a
// holder that pauses past the TTL writes a stock computed from what it read
// before another holder sold: a lost sale.
type inventoryRedis struct{ lib redisLib }

func init() {
	for _, l := range redisLibs {
		RegisterApproach(inventoryRedis{l})
	}
}

func (d inventoryRedis) Scenario() string   { return "inventory" }
func (d inventoryRedis) Approach() Approach { return d.lib.approach }
func (d inventoryRedis) Label() string {
	return d.lib.label("the SKU's", "SELECT → check → UPDATE")
}
func (inventoryRedis) Protection(p Params) Protection { return redisProtection(p) }
func (inventoryRedis) redisLock()                     {}

func (d inventoryRedis) NewClient(ctx context.Context, env *Env) (Client, error) {
	conn, locker, err := d.lib.connect(ctx, env)
	if err != nil {
		return nil, err
	}
	return &inventoryRedisClient{env: env, conn: conn, locker: locker, point: d.lib.point("inventory")}, nil
}

type inventoryRedisClient struct {
	env    *Env
	conn   *redisConn
	locker redisLocker
	point  string
}

// errInventoryOut is a sale refused for want of stock.
var errInventoryOut = errors.New("out of stock")

func (c *inventoryRedisClient) Op(ctx context.Context) error {
	ctx, op, err := c.env.Invoke(ctx, inventoryKey(c.env), history.KindSell, nil)
	if err != nil {
		return err
	}
	var left int64
	err = withRedisLock(ctx, c.locker, op.key, func() error {
		var q int64
		err := c.env.DB.QueryRow(ctx, sqlInventoryRedisRead, op.key).Scan(&q)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return fmt.Errorf("no SKU %s", short.Quote(op.key))
		case err != nil:
			return err
		case q < 1:
			return errInventoryOut
		}
		c.env.BeforeWrite(ctx, c.point)
		left = q - 1
		wctx, cancel := writeContext(ctx)
		defer cancel()
		_, err = c.env.DB.Exec(wctx, sqlInventoryRedisWrite, op.key, left)
		return err
	})
	if errors.Is(err, errInventoryOut) {
		return op.Ok(history.CounterOutput{Insufficient: true})
	}
	return op.Finish(history.Stock(left), err)
}

func (c *inventoryRedisClient) Close() error { return c.conn.Close() }
