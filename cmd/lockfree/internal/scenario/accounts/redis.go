package accounts

import (
	"context"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/approach"
	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"
)

// accountsRedis appends as naive-lock does, with the entity's lock in
// Redis: lock, SELECT its last number, one statement that writes the next
// and its event, release. A holder stopped past the TTL appends the number
// the holder that took over appended too: a duplicate.
type accountsRedis struct{ approach.RedisLib }

func init() {
	for _, l := range approach.RedisLibs {
		engine.RegisterApproach(accountsRedis{l})
	}
}

func (d accountsRedis) Scenario() string { return "accounts" }
func (d accountsRedis) Label() string {
	return d.Describe("the entity's", "SELECT → one statement: write + event")
}

func (d accountsRedis) NewClient(ctx context.Context, env *engine.Env) (engine.Client, error) {
	conn, locker, err := d.Connect(ctx, env)
	if err != nil {
		return nil, err
	}
	return &accountsRedisClient{env: env, conn: conn, locker: locker, point: d.Point("accounts")}, nil
}

type accountsRedisClient struct {
	env    *engine.Env
	conn   *approach.RedisConn
	locker approach.RedisLocker
	point  string
}

func (c *accountsRedisClient) Op(ctx context.Context) error {
	ctx, op, err := accountAppend(ctx, c.env, accountKey(c.env))
	if err != nil {
		return err
	}
	var next int64
	err = approach.WithRedisLock(ctx, c.locker, op.Key(), func() error {
		var last int64
		if err := c.env.DB.QueryRow(ctx, sqlAccountsRead, op.Key()).Scan(&last); err != nil {
			return err
		}
		next = last + 1
		c.env.BeforeWrite(ctx, c.point)
		wctx, cancel := approach.WriteContext(ctx)
		defer cancel()
		_, err := c.env.DB.Exec(wctx, sqlAccountsNaiveWrite, op.Key(), next, op.ID())
		return err
	})
	return op.Finish(SeqOutput{Seq: next}, err)
}

func (c *accountsRedisClient) Close() error { return c.conn.Close() }
