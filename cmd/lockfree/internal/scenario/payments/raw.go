package payments

import (
	"context"
	"fmt"

	"github.com/lockfree-go/lockfree/idempotency"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"
)

// paymentsRaw is the bare baseline that still charges once: the record and
// the charge in one statement, the charge inserted only when the record was
// (a concurrent duplicate waits on the record's unique index), and refused
// when the record is of another amount — read in a second statement, on
// that path only. It stores no answer to replay.
type paymentsRaw struct{ scenario string }

func init() {
	for _, sc := range paymentScenarios {
		engine.RegisterApproach(paymentsRaw{sc})
	}
}

func (d paymentsRaw) Scenario() string        { return d.scenario }
func (paymentsRaw) Approach() engine.Approach { return engine.Raw }
func (paymentsRaw) Label() string {
	return "bare SQL: one statement, INSERT INTO payments_done … ON CONFLICT DO NOTHING → INSERT charge if it did (if not: SELECT its amount, refused if another; no stored answer)"
}
func (paymentsRaw) Protection(engine.Params) engine.Protection { return engine.Protection{} }

func (paymentsRaw) NewClient(_ context.Context, env *engine.Env) (engine.Client, error) {
	return &paymentsRawClient{env: env}, nil
}

type paymentsRawClient struct {
	env  *engine.Env
	keys paymentKeys
}

func (c *paymentsRawClient) Op(ctx context.Context) error {
	ctx, op, amount, err := c.keys.next(ctx, c.env)
	if err != nil {
		return err
	}
	c.env.BeforeWrite(ctx, "harness.payments.raw.before-write")
	recorded, err := c.charge(ctx, op, amount)
	return op.Finish(ChargeOutput{Recorded: recorded}, err, idempotency.ErrKeyReused)
}

// sqlPaymentsRawCharge records the key and charges it in one statement,
// the charge inserted only when the record was.
const sqlPaymentsRawCharge = `WITH done AS (
	INSERT INTO payments_done (payment_key, charge, amount) VALUES ($1, $3, $2) ON CONFLICT DO NOTHING RETURNING 1)
INSERT INTO charges (payment_key, amount, charged_by) SELECT $1, $2, $3 FROM done`

// charge charges the key and records it, or finds it charged; recorded
// says it committed its charge and record.
func (c *paymentsRawClient) charge(ctx context.Context, op *engine.Invocation, amount int64) (recorded bool, _ error) {
	tag, err := c.env.DB.Exec(ctx, sqlPaymentsRawCharge, op.Key(), amount, op.ID())
	if err != nil {
		return false, err
	}
	if tag.RowsAffected() == 1 {
		return true, nil
	}
	// Charged already: the record's row is committed (the insert waited
	// for it), so this later statement sees it.
	charged, found, err := chargedAmount(ctx, c.env.DB, op.Key())
	if err != nil {
		return false, err
	}
	if !found {
		return false, fmt.Errorf("harness: payments: %s was neither recorded nor found recorded", op.Key())
	}
	return false, replay(op.Key(), charged, amount)
}

func (c *paymentsRawClient) Close() error { return nil }
