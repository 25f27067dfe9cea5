package inventory

import (
	"context"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/approach"
	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"
)

// inventoryRedis runs the store as naive-lock does, with the rows' locks in
// Redis: a holder that pauses past the TTL writes a stock computed from
// what it read before another holder sold: a lost sale.
type inventoryRedis struct{ approach.RedisLib }

func init() {
	for _, l := range approach.RedisLibs {
		engine.RegisterApproach(inventoryRedis{l})
	}
}

func (d inventoryRedis) Scenario() string { return "inventory" }
func (d inventoryRedis) Label() string {
	return d.Describe("the row's (a basket: its rows')", "SELECT → check → UPDATE")
}

func (d inventoryRedis) NewClient(ctx context.Context, env *engine.Env) (engine.Client, error) {
	conn, locker, err := d.Connect(ctx, env)
	if err != nil {
		return nil, err
	}
	return &inventoryRedisClient{
		inventoryClient: newInventoryClient(env, inventoryLockedOps{
			env: env, point: d.Point("inventory"),
			lock: func(ctx context.Context, rows []string, fn func([]int64) error) error {
				return redisLockEach(ctx, locker, sortedRows(rows), noTokens(fn))
			},
			writeContext: approach.WriteContext,
		}),
		conn: conn,
	}, nil
}

// redisLockEach runs fn holding the Redis locks of rows, taken one after
// another.
func redisLockEach(ctx context.Context, l approach.RedisLocker, rows []string, fn func() error) error {
	if len(rows) == 0 {
		return fn()
	}
	return approach.WithRedisLock(ctx, l, rows[0], func() error { return redisLockEach(ctx, l, rows[1:], fn) })
}

type inventoryRedisClient struct {
	*inventoryClient
	conn *approach.RedisConn
}

func (c *inventoryRedisClient) Close() error { return c.conn.Close() }
