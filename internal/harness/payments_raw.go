package harness

import (
	"context"

	"github.com/lockfree-go/lockfree/idempotency"
	"github.com/lockfree-go/lockfree/internal/history"
)

// paymentsRaw is the bare baseline that still charges once: the charge and
// the record in one transaction, rolled back when the record existed (a
// concurrent duplicate waits on the record's unique index), and refused
// when the record is of another amount. It stores no answer to replay.
type paymentsRaw struct{ scenario string }

func init() {
	for _, sc := range paymentScenarios {
		RegisterApproach(paymentsRaw{sc})
	}
}

func (d paymentsRaw) Scenario() string { return d.scenario }
func (paymentsRaw) Approach() Approach { return Raw }
func (paymentsRaw) Label() string {
	return "bare tx: INSERT charge; INSERT INTO payments_done … ON CONFLICT DO NOTHING; COMMIT, or ROLLBACK if done (refused if of another amount; no stored answer)"
}
func (paymentsRaw) Protection(Params) Protection { return Protection{} }

func (paymentsRaw) NewClient(_ context.Context, env *Env) (Client, error) {
	return &paymentsRawClient{env: env}, nil
}

type paymentsRawClient struct {
	env  *Env
	keys paymentKeys
}

func (c *paymentsRawClient) Op(ctx context.Context) error {
	ctx, op, amount, err := c.keys.next(ctx, c.env)
	if err != nil {
		return err
	}
	c.env.BeforeWrite(ctx, "harness.payments.raw.before-write")
	recorded, err := c.charge(ctx, op, amount)
	return op.Finish(history.ChargeOutput{Recorded: recorded}, err, idempotency.ErrKeyReused)
}

// charge charges the key and records it, or finds it charged; recorded
// says it committed its charge and record.
func (c *paymentsRawClient) charge(ctx context.Context, op *Op, amount int64) (recorded bool, _ error) {
	tx, err := c.env.DB.Begin(ctx)
	if err != nil {
		return false, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, sqlPaymentsCharge, op.key, amount, op.ID()); err != nil {
		return false, err
	}
	tag, err := tx.Exec(ctx, sqlPaymentsMarkDone, op.key, op.ID(), amount)
	if err != nil {
		return false, err
	}
	if tag.RowsAffected() == 0 {
		// Charged already: the deferred rollback undoes this charge. The
		// record's row is committed (the insert waited for it), so this
		// statement of the transaction sees it.
		charged, _, err := chargedAmount(ctx, tx, op.key)
		if err != nil {
			return false, err
		}
		return false, replay(op.key, charged, amount)
	}
	err = tx.Commit(ctx)
	return err == nil, err
}

func (c *paymentsRawClient) Close() error { return nil }
