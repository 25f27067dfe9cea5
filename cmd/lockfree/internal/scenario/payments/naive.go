package payments

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/idempotency"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/approach"
	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"
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

// chargeAndRecord is the lock-based twins' write: the charge and its
// record, pipelined in one round trip (one implicit transaction). The
// record does not condition the charge — the lock is what is trusted to.
// recorded says the record was new.
func chargeAndRecord(ctx context.Context, env *engine.Env, op *engine.Invocation, amount int64) (recorded bool, err error) {
	b := &pgx.Batch{}
	b.Queue(sqlPaymentsCharge, op.Key(), amount, op.ID())
	b.Queue(sqlPaymentsMarkDone, op.Key(), op.ID(), amount)
	br := env.DB.SendBatch(ctx, b)
	defer func() { _ = br.Close() }()
	if _, err := br.Exec(); err != nil {
		return false, err
	}
	tag, err := br.Exec()
	if err != nil {
		return false, err
	}
	if err := br.Close(); err != nil {
		return false, err
	}
	op.Took() // committed: whatever happens next, the charge stands
	return tag.RowsAffected() == 1, nil
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
		engine.RegisterApproach(paymentsNaive{sc})
	}
}

func (d paymentsNaive) Scenario() string        { return d.scenario }
func (paymentsNaive) Approach() engine.Approach { return engine.NaiveLock }
func (paymentsNaive) Label() string {
	return "lease lock (fencedlock.Locker): lock key → charged? (plain read) → charge + record, pipelined → release"
}
func (paymentsNaive) Protection(p engine.Params) engine.Protection {
	return engine.LockTTL(p)
}

func (paymentsNaive) NewClient(_ context.Context, env *engine.Env) (engine.Client, error) {
	l, err := approach.NaiveLocker(env, "payments/")
	if err != nil {
		return nil, err
	}
	return &paymentsNaiveClient{env: env, locker: l}, nil
}

type paymentsNaiveClient struct {
	env    *engine.Env
	locker *fencedlock.Locker
	keys   paymentKeys
}

func (c *paymentsNaiveClient) Op(ctx context.Context) error {
	ctx, op, amount, err := c.keys.next(ctx, c.env)
	if err != nil {
		return err
	}
	var recorded bool
	err = c.locker.Do(ctx, op.Key(), func(context.Context, fencedlock.Lease) error {
		if charged, done, err := chargedAmount(ctx, c.env.DB, op.Key()); err != nil || done {
			if err != nil {
				return err
			}
			return replay(op.Key(), charged, amount)
		}
		c.env.BeforeWrite(ctx, "harness.payments.naive.before-write")
		recorded, err = chargeAndRecord(ctx, c.env, op, amount)
		return err
	})
	return op.Finish(ChargeOutput{Recorded: recorded}, err, idempotency.ErrKeyReused)
}

func (c *paymentsNaiveClient) Close() error { return nil }
