package harness

import (
	"context"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/history"
	"github.com/lockfree-go/lockfree/occ"
)

// documentsRedis edits, deletes and creates as naive-lock does, with the
// document's lock in Redis: lock, SELECT, change, UPDATE (or INSERT, or
// DELETE), release. A holder that pauses past
// the TTL writes over the edit of the holder that took over: a lost update.
type documentsRedis struct{ lib redisLib }

func init() {
	for _, l := range redisLibs {
		RegisterApproach(documentsRedis{l})
	}
}

func (d documentsRedis) Scenario() string   { return "documents" }
func (d documentsRedis) Approach() Approach { return d.lib.approach }
func (d documentsRedis) Label() string {
	return d.lib.label("the document's", "SELECT → change → UPDATE (or INSERT, or DELETE)")
}
func (documentsRedis) Protection(p Params) Protection { return redisProtection(p) }
func (documentsRedis) redisLock()                     {}

func (d documentsRedis) NewClient(ctx context.Context, env *Env) (Client, error) {
	conn, locker, err := d.lib.connect(ctx, env)
	if err != nil {
		return nil, err
	}
	return &documentsRedisClient{env: env, conn: conn, locker: locker, point: d.lib.point("documents")}, nil
}

type documentsRedisClient struct {
	env    *Env
	conn   *redisConn
	locker redisLocker
	point  string
	n      int
}

func (c *documentsRedisClient) Op(ctx context.Context) error {
	ctx, op, name, del, err := docEdit(ctx, c.env, &c.n)
	if err != nil {
		return err
	}
	var based history.DocState
	err = withRedisLock(ctx, c.locker, op.key, func() error {
		based, err = naiveDocOp(ctx, c.env, op.key, name, del, c.point, writeContext)
		return err
	})
	return op.Finish(based, err, occ.ErrNotFound)
}

func (c *documentsRedisClient) Close() error { return c.conn.Close() }
