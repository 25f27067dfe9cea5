package harness

import (
	"context"

	"github.com/lockfree-go/lockfree/internal/history"
)

// documentsRedis edits as naive-lock does, with the document's lock in
// Redis: lock, SELECT, change, UPDATE, release. A holder that pauses past
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
	return d.lib.label("the document's", "SELECT → change → UPDATE")
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
	ctx, op, name, err := docEdit(ctx, c.env, &c.n)
	if err != nil {
		return err
	}
	var based history.DocState
	err = withRedisLock(ctx, c.locker, op.key, func() error {
		var d document
		if err := c.env.DB.QueryRow(ctx, sqlDocumentsNaiveRead, op.key).Scan(&d.DocVersion, &d.Head); err != nil {
			return err
		}
		based = d.edit(name)
		c.env.BeforeWrite(ctx, c.point)
		wctx, cancel := writeContext(ctx)
		defer cancel()
		_, err := c.env.DB.Exec(wctx, sqlDocumentsNaiveWrite, d.DocVersion, d.Head, op.key)
		return err
	})
	return op.Finish(based, err)
}

func (c *documentsRedisClient) Close() error { return c.conn.Close() }
