package harness

import (
	"context"

	"github.com/lockfree-go/lockfree/fencedlock"
)

// The naive lock's statements: is the key charged, the charge, the record.
const (
	sqlPaymentsDone     = `SELECT count(*) FROM payments_done WHERE payment_key = $1`
	sqlPaymentsMarkDone = `INSERT INTO payments_done (payment_key, charge) VALUES ($1, $2) ON CONFLICT DO NOTHING`
)

// paymentsNaive is a lease lock around check-then-charge, unfenced: a holder
// stopped past its lease, after its check, charges again what the holder
// that took over charged.
type paymentsNaive struct{}

func init() { RegisterApproach(paymentsNaive{}) }

func (paymentsNaive) Scenario() string   { return "payments" }
func (paymentsNaive) Approach() Approach { return NaiveLock }
func (paymentsNaive) Label() string {
	return "lease lock (fencedlock.Locker): lock key → charged? (plain read) → charge → record → release"
}
func (paymentsNaive) Protection(p Params) Protection {
	return lockTTL(p)
}

func (paymentsNaive) NewClient(_ context.Context, env *Env) (Client, error) {
	l, err := newNaiveLocker(env, "payments/")
	if err != nil {
		return nil, err
	}
	return &paymentsNaiveClient{env: env, locker: l}, nil
}

type paymentsNaiveClient struct {
	env    *Env
	locker *fencedlock.Locker
}

func (c *paymentsNaiveClient) Op(ctx context.Context) error {
	ctx, op, amount, err := payment(ctx, c.env)
	if err != nil {
		return err
	}
	err = c.locker.Do(ctx, op.key, func(context.Context, fencedlock.Lease) error {
		var n int
		if err := c.env.DB.QueryRow(ctx, sqlPaymentsDone, op.key).Scan(&n); err != nil || n > 0 {
			return err // a replay: charged already
		}
		c.env.BeforeWrite(ctx, "harness.payments.naive.before-write")
		if _, err := c.env.DB.Exec(ctx, sqlPaymentsCharge, op.key, amount, op.ID()); err != nil {
			return err
		}
		op.Took() // whatever happens to the record, the charge stands
		_, err := c.env.DB.Exec(ctx, sqlPaymentsMarkDone, op.key, op.ID())
		return err
	})
	return op.Finish(nil, err)
}

func (c *paymentsNaiveClient) Close() error { return nil }
