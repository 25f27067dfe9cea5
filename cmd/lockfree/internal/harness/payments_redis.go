package harness

import (
	"context"

	"github.com/lockfree-go/lockfree/idempotency"
	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/history"
)

// paymentsRedis charges as naive-lock does, with the payment key's lock in
// Redis: lock, charged? (plain read), charge, record, release. A holder
// stopped past the TTL, after its check, charges again what the holder that
// took over charged.
type paymentsRedis struct {
	lib      redisLib
	scenario string
}

func init() {
	for _, sc := range paymentScenarios {
		for _, l := range redisLibs {
			RegisterApproach(paymentsRedis{l, sc})
		}
	}
}

func (d paymentsRedis) Scenario() string   { return d.scenario }
func (d paymentsRedis) Approach() Approach { return d.lib.approach }
func (d paymentsRedis) Label() string {
	return d.lib.label("the payment key's", "charged? (plain read) → charge + record, pipelined")
}
func (paymentsRedis) Protection(p Params) Protection { return redisProtection(p) }
func (paymentsRedis) redisLock()                     {}

func (d paymentsRedis) NewClient(ctx context.Context, env *Env) (Client, error) {
	conn, locker, err := d.lib.connect(ctx, env)
	if err != nil {
		return nil, err
	}
	return &paymentsRedisClient{env: env, conn: conn, locker: locker, point: d.lib.point("payments")}, nil
}

type paymentsRedisClient struct {
	env    *Env
	conn   *redisConn
	locker redisLocker
	point  string
	keys   paymentKeys
}

func (c *paymentsRedisClient) Op(ctx context.Context) error {
	ctx, op, amount, err := c.keys.next(ctx, c.env)
	if err != nil {
		return err
	}
	var recorded bool
	err = withRedisLock(ctx, c.locker, op.key, func() error {
		if charged, done, err := chargedAmount(ctx, c.env.DB, op.key); err != nil || done {
			if err != nil {
				return err
			}
			return replay(op.key, charged, amount)
		}
		c.env.BeforeWrite(ctx, c.point)
		wctx, cancel := writeContext(ctx)
		defer cancel()
		recorded, err = chargeAndRecord(wctx, c.env, op, amount)
		return err
	})
	return op.Finish(history.ChargeOutput{Recorded: recorded}, err, idempotency.ErrKeyReused)
}

func (c *paymentsRedisClient) Close() error { return c.conn.Close() }
