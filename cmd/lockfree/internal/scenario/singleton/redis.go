package singleton

import (
	"context"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/approach"
	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"
)

// singletonRedis takes the job's lock in Redis for each run, as the naive
// leader's flow: SELECT the oldest open period → closing written → release.
// A holder paused past the key's expiry closes a period another holder
// closes too.
type singletonRedis struct{ approach.RedisLib }

func init() {
	for _, l := range approach.RedisLibs {
		engine.RegisterApproach(singletonRedis{l})
	}
}

func (singletonRedis) Scenario() string { return "singleton" }
func (d singletonRedis) Label() string {
	return d.Describe("the job's", "SELECT oldest open period → closing written")
}

func (d singletonRedis) NewClient(ctx context.Context, env *engine.Env) (engine.Client, error) {
	j, err := newJobs(ctx, env)
	if err != nil {
		return nil, err
	}
	conn, locker, err := d.Connect(ctx, env)
	if err != nil {
		return nil, err
	}
	return &singletonRedisClient{jobs: j, conn: conn, locker: locker, point: d.Point("singleton")}, nil
}

type singletonRedisClient struct {
	jobs
	conn   *approach.RedisConn
	locker approach.RedisLocker
	point  string
}

func (c *singletonRedisClient) Op(ctx context.Context) error {
	ctx, op, err := c.invoke(ctx, c.pick())
	if err != nil {
		return err
	}
	var recorded bool
	err = approach.WithRedisLock(ctx, c.locker, op.Key(), func() error {
		recorded = true
		return c.run(ctx, op, steps{point: c.point,
			read: func(ctx context.Context) (int64, error) { return c.next(ctx, op) },
			write: func(ctx context.Context, p int64) (bool, error) {
				wctx, cancel := approach.WriteContext(ctx)
				defer cancel()
				return true, c.plainClose(wctx, op, p, 0)
			}})
	})
	if !recorded {
		return op.Finish(nil, err)
	}
	return nil
}

func (c *singletonRedisClient) Close() error { return c.conn.Close() }
