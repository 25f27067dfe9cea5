package harness

import (
	"context"
)

// inventoryRedis runs the store as naive-lock does, with the rows' locks in
// Redis: a holder that pauses past the TTL writes a stock computed from
// what it read before another holder sold: a lost sale.
type inventoryRedis struct{ lib redisLib }

func init() {
	for _, l := range redisLibs {
		RegisterApproach(inventoryRedis{l})
	}
}

func (d inventoryRedis) Scenario() string   { return "inventory" }
func (d inventoryRedis) Approach() Approach { return d.lib.approach }
func (d inventoryRedis) Label() string {
	return d.lib.label("the row's (a basket: its rows')", "SELECT → check → UPDATE")
}
func (inventoryRedis) Protection(p Params) Protection { return redisProtection(p) }
func (inventoryRedis) redisLock()                     {}

func (d inventoryRedis) NewClient(ctx context.Context, env *Env) (Client, error) {
	conn, locker, err := d.lib.connect(ctx, env)
	if err != nil {
		return nil, err
	}
	return &inventoryRedisClient{
		inventoryClient: newInventoryClient(env, inventoryLockedOps{
			env: env, point: d.lib.point("inventory"),
			lock: func(ctx context.Context, rows []string, fn func() error) error {
				return redisLockEach(ctx, locker, sortedRows(rows), fn)
			},
			writeContext: writeContext,
		}),
		conn: conn,
	}, nil
}

// redisLockEach runs fn holding the Redis locks of rows, taken one after
// another.
func redisLockEach(ctx context.Context, l redisLocker, rows []string, fn func() error) error {
	if len(rows) == 0 {
		return fn()
	}
	return withRedisLock(ctx, l, rows[0], func() error { return redisLockEach(ctx, l, rows[1:], fn) })
}

type inventoryRedisClient struct {
	*inventoryClient
	conn *redisConn
}

func (c *inventoryRedisClient) Close() error { return c.conn.Close() }
