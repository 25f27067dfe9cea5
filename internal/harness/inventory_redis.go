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

// inventoryRedis sells as naive-lock does, with the SKU's lock in Redis
// (bsm/redislock): a holder that pauses past the TTL writes a stock
// computed from what it read before another holder sold: a lost sale.
type inventoryRedis struct{}

// inventoryRedsync is inventoryRedis with go-redsync's Mutex.
type inventoryRedsync struct{}

func init() {
	RegisterApproach(inventoryRedis{})
	RegisterApproach(inventoryRedsync{})
}

func (inventoryRedis) Scenario() string   { return "inventory" }
func (inventoryRedis) Approach() Approach { return RedisLock }
func (inventoryRedis) Label() string {
	return "bsm/redislock: Obtain SKU lock in Redis → read → check → write → Release"
}
func (inventoryRedis) Protection(p Params) Protection { return redisProtection(p) }
func (inventoryRedis) redisLock()                     {}

func (inventoryRedis) NewClient(ctx context.Context, env *Env) (Client, error) {
	conn, err := newRedisConn(ctx, env)
	if err != nil {
		return nil, err
	}
	return &inventoryRedisClient{env: env, conn: conn, locker: newRedislockLocker(conn),
		point: "harness.inventory.redis-lock.before-write"}, nil
}

func (inventoryRedsync) Scenario() string   { return "inventory" }
func (inventoryRedsync) Approach() Approach { return RedsyncLock }
func (inventoryRedsync) Label() string {
	return "go-redsync (one node): LockContext SKU mutex in Redis → read → check → write → UnlockContext"
}
func (inventoryRedsync) Protection(p Params) Protection { return redisProtection(p) }
func (inventoryRedsync) redisLock()                     {}

func (inventoryRedsync) NewClient(ctx context.Context, env *Env) (Client, error) {
	conn, err := newRedisConn(ctx, env)
	if err != nil {
		return nil, err
	}
	return &inventoryRedisClient{env: env, conn: conn, locker: newRedsyncLocker(conn),
		point: "harness.inventory.redsync-lock.before-write"}, nil
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
	left, err := c.sell(ctx, op.key)
	if errors.Is(err, errInventoryOut) {
		return op.Ok(history.CounterOutput{Insufficient: true})
	}
	return op.Finish(history.Stock(left), err)
}

// sell is the naive lock's sale under a Redis lock: lock, read, check,
// write, release.
func (c *inventoryRedisClient) sell(ctx context.Context, sku string) (int64, error) {
	release, err := c.locker.lock(ctx, sku)
	if err != nil {
		return 0, err
	}
	defer release()
	var q int64
	err = c.env.DB.QueryRow(ctx, sqlInventoryRedisRead, sku).Scan(&q)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, fmt.Errorf("no SKU %s", short.Quote(sku))
	}
	if err != nil {
		return 0, err
	}
	if q < 1 {
		return 0, errInventoryOut
	}
	c.env.BeforeWrite(ctx, c.point)
	if _, err := c.env.DB.Exec(ctx, sqlInventoryRedisWrite, sku, q-1); err != nil {
		return 0, err
	}
	return q - 1, nil
}

func (c *inventoryRedisClient) Close() error { return c.conn.Close() }
