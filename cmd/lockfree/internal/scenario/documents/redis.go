package documents

import (
	"context"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/history"
	"github.com/lockfree-go/lockfree/occ"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/approach"
	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"
)

// documentsRedis edits, deletes and creates as naive-lock does, with the
// document's lock in Redis: lock, SELECT, change, UPDATE (or INSERT, or
// DELETE), release. A holder that pauses past
// the TTL writes over the edit of the holder that took over: a lost update.
type documentsRedis struct{ approach.RedisLib }

func init() {
	for _, l := range approach.RedisLibs {
		engine.RegisterApproach(documentsRedis{l})
	}
}

func (d documentsRedis) Scenario() string { return "documents" }
func (d documentsRedis) Label() string {
	return d.Describe("the document's", "SELECT → change → UPDATE (or INSERT, or DELETE)")
}

func (d documentsRedis) NewClient(ctx context.Context, env *engine.Env) (engine.Client, error) {
	conn, locker, err := d.Connect(ctx, env)
	if err != nil {
		return nil, err
	}
	return &documentsRedisClient{env: env, conn: conn, locker: locker, point: d.Point("documents")}, nil
}

type documentsRedisClient struct {
	env    *engine.Env
	conn   *approach.RedisConn
	locker approach.RedisLocker
	point  string
	n      int
}

func (c *documentsRedisClient) Op(ctx context.Context) error {
	ctx, op, name, del, err := docEdit(ctx, c.env, &c.n)
	if err != nil {
		return err
	}
	var based history.DocState
	err = approach.WithRedisLock(ctx, c.locker, op.Key(), func() error {
		based, err = naiveDocOp(ctx, c.env, op.Key(), name, del, c.point, approach.WriteContext)
		return err
	})
	return op.Finish(based, err, occ.ErrNotFound)
}

func (c *documentsRedisClient) Close() error { return c.conn.Close() }
