package payments

import (
	"context"

	"github.com/lockfree-go/lockfree/idempotency"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/approach"
	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"
)

// paymentsRedis charges as naive-lock does, with the payment key's lock in
// Redis: lock, charged? (plain read), charge, record, release. A holder
// stopped past the TTL, after its check, charges again what the holder that
// took over charged.
type paymentsRedis struct {
	approach.RedisLib
	scenario string
}

func init() {
	for _, sc := range paymentScenarios {
		for _, l := range approach.RedisLibs {
			engine.RegisterApproach(paymentsRedis{l, sc})
		}
	}
}

func (d paymentsRedis) Scenario() string { return d.scenario }
func (d paymentsRedis) Label() string {
	return d.Describe("the payment key's", "charged? (plain read) → charge + record, pipelined")
}

func (d paymentsRedis) NewClient(ctx context.Context, env *engine.Env) (engine.Client, error) {
	conn, locker, err := d.Connect(ctx, env)
	if err != nil {
		return nil, err
	}
	return &paymentsRedisClient{env: env, conn: conn, locker: locker, point: d.Point("payments")}, nil
}

type paymentsRedisClient struct {
	env    *engine.Env
	conn   *approach.RedisConn
	locker approach.RedisLocker
	point  string
	keys   paymentKeys
}

func (c *paymentsRedisClient) Op(ctx context.Context) error {
	ctx, op, amount, err := c.keys.next(ctx, c.env)
	if err != nil {
		return err
	}
	var recorded bool
	err = approach.WithRedisLock(ctx, c.locker, op.Key(), func() error {
		if charged, done, err := chargedAmount(ctx, c.env.DB, op.Key()); err != nil || done {
			if err != nil {
				return err
			}
			return replay(op.Key(), charged, amount)
		}
		c.env.BeforeWrite(ctx, c.point)
		wctx, cancel := approach.WriteContext(ctx)
		defer cancel()
		recorded, err = chargeAndRecord(wctx, c.env, op, amount)
		return err
	})
	return op.Finish(ChargeOutput{Recorded: recorded}, err, idempotency.ErrKeyReused)
}

func (c *paymentsRedisClient) Close() error { return c.conn.Close() }
