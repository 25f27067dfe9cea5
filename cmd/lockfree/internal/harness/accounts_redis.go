package harness

import (
	"context"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/history"
)

// accountsRedis appends as naive-lock does, with the entity's lock in
// Redis: lock, SELECT its last number, one statement that writes the next
// and its event, release. A holder stopped past the TTL appends the number
// the holder that took over appended too: a duplicate.
type accountsRedis struct{ lib redisLib }

func init() {
	for _, l := range redisLibs {
		RegisterApproach(accountsRedis{l})
	}
}

func (d accountsRedis) Scenario() string   { return "accounts" }
func (d accountsRedis) Approach() Approach { return d.lib.approach }
func (d accountsRedis) Label() string {
	return d.lib.label("the entity's", "SELECT → one statement: write + event")
}
func (accountsRedis) Protection(p Params) Protection { return redisProtection(p) }
func (accountsRedis) redisLock()                     {}

func (d accountsRedis) NewClient(ctx context.Context, env *Env) (Client, error) {
	conn, locker, err := d.lib.connect(ctx, env)
	if err != nil {
		return nil, err
	}
	return &accountsRedisClient{env: env, conn: conn, locker: locker, point: d.lib.point("accounts")}, nil
}

type accountsRedisClient struct {
	env    *Env
	conn   *redisConn
	locker redisLocker
	point  string
}

func (c *accountsRedisClient) Op(ctx context.Context) error {
	ctx, op, err := accountAppend(ctx, c.env, accountKey(c.env))
	if err != nil {
		return err
	}
	var next int64
	err = withRedisLock(ctx, c.locker, op.key, func() error {
		var last int64
		if err := c.env.DB.QueryRow(ctx, sqlAccountsRead, op.key).Scan(&last); err != nil {
			return err
		}
		next = last + 1
		c.env.BeforeWrite(ctx, c.point)
		wctx, cancel := writeContext(ctx)
		defer cancel()
		_, err := c.env.DB.Exec(wctx, sqlAccountsNaiveWrite, op.key, next, op.ID())
		return err
	})
	return op.Finish(history.SeqOutput{Seq: next}, err)
}

func (c *accountsRedisClient) Close() error { return c.conn.Close() }
