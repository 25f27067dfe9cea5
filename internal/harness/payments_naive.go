package harness

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/idempotency"
	"github.com/lockfree-go/lockfree/internal/history"
)

// The naive lock's statements: the amount the key was charged (no row: not
// charged), the charge, the record.
const (
	sqlPaymentsDone     = `SELECT amount FROM payments_done WHERE payment_key = $1`
	sqlPaymentsMarkDone = `INSERT INTO payments_done (payment_key, charge, amount) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING`
)

// chargedAmount is the amount the key was charged, per payments_done, and
// whether it was.
func chargedAmount(ctx context.Context, db rowQuerier, key string) (int64, bool, error) {
	var amount int64
	err := db.QueryRow(ctx, sqlPaymentsDone, key).Scan(&amount)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	return amount, err == nil, err
}

// rowQuerier is a pool or a transaction.
type rowQuerier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// replay is the answer to a request of amount for a key charged already:
// nothing for a retry of the same request, a refusal for another.
func replay(key string, charged, amount int64) error {
	if charged != amount {
		return errKeyReused(key, charged)
	}
	return nil
}

// paymentsNaive is a lease lock around check-then-charge, unfenced: a holder
// stopped past its lease, after its check, charges again what the holder
// that took over charged.
type paymentsNaive struct{ scenario string }

func init() {
	for _, sc := range paymentScenarios {
		RegisterApproach(paymentsNaive{sc})
	}
}

func (d paymentsNaive) Scenario() string { return d.scenario }
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
	keys   paymentKeys
}

func (c *paymentsNaiveClient) Op(ctx context.Context) error {
	ctx, op, amount, err := c.keys.next(ctx, c.env)
	if err != nil {
		return err
	}
	var recorded bool
	err = c.locker.Do(ctx, op.key, func(context.Context, fencedlock.Lease) error {
		if charged, done, err := chargedAmount(ctx, c.env.DB, op.key); err != nil || done {
			if err != nil {
				return err
			}
			return replay(op.key, charged, amount)
		}
		c.env.BeforeWrite(ctx, "harness.payments.naive.before-write")
		if _, err := c.env.DB.Exec(ctx, sqlPaymentsCharge, op.key, amount, op.ID()); err != nil {
			return err
		}
		op.Took() // whatever happens to the record, the charge stands
		tag, err := c.env.DB.Exec(ctx, sqlPaymentsMarkDone, op.key, op.ID(), amount)
		recorded = err == nil && tag.RowsAffected() == 1
		return err
	})
	return op.Finish(history.ChargeOutput{Recorded: recorded}, err, idempotency.ErrKeyReused)
}

func (c *paymentsNaiveClient) Close() error { return nil }
