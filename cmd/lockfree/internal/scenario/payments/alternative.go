package payments

import (
	"context"
	"errors"

	"github.com/lockfree-go/lockfree/idempotency"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"
)

// paymentsAlternative charges with idempotency's transactional mode: the
// claim is sent with BEGIN, the charge runs in the claim's transaction, the
// result is stored with COMMIT. A client stopped mid-charge holds its claim
// with its transaction: a retry waits, and is refused, until it ends; no
// second charge can start.
type paymentsAlternative struct{}

func init() { engine.RegisterApproach(paymentsAlternative{}) }

func (paymentsAlternative) Scenario() string          { return "payments" }
func (paymentsAlternative) Approach() engine.Approach { return engine.Alternative }
func (paymentsAlternative) Label() string {
	return "idempotency.Postgres.Do: claim sent with BEGIN → charge in the claim's tx → result stored with COMMIT"
}
func (paymentsAlternative) Protection(engine.Params) engine.Protection { return engine.Protection{} }

// SkipFault: idempotency.Postgres sends its COMMIT in one batch with the
// key's record, not alone, as lost-commit needs.
func (paymentsAlternative) SkipFault(f engine.Fault) string {
	if f == engine.LostCommit {
		return engine.CommitInBatch
	}
	return ""
}

// PassesInTx: after the charge, in the claim's transaction.
func (paymentsAlternative) PassesInTx() {}

func (paymentsAlternative) NewClient(_ context.Context, env *engine.Env) (engine.Client, error) {
	s, err := idempotency.NewPostgres(env.DB, &idempotency.PostgresConfig{InFlightWait: inFlightPatience, MeterProvider: env.MeterProvider})
	if err != nil {
		return nil, err
	}
	return &paymentsAltClient{env: env, store: s}, nil
}

type paymentsAltClient struct {
	env   *engine.Env
	store *idempotency.Postgres
	keys  paymentKeys
}

func (c *paymentsAltClient) Op(ctx context.Context) error {
	ctx, op, amount, err := c.keys.next(ctx, c.env)
	if err != nil {
		return err
	}
	res, err := c.store.Do(ctx, idempotency.Key{ID: op.Key()}, paymentFingerprint(op.Key(), amount), func(ctx context.Context) (idempotency.Result, error) {
		tx, ok := idempotency.TxFrom(ctx)
		if !ok {
			return idempotency.Result{}, errors.New("harness: payments: no transaction in the context")
		}
		c.env.BeforeWrite(ctx, "harness.payments.alternative.before-write")
		if _, err := tx.Exec(ctx, sqlPaymentsCharge, op.Key(), amount, op.ID()); err != nil {
			return idempotency.Result{}, err
		}
		c.env.BeforeWrite(ctx, "harness.payments.alternative.in-tx")
		return idempotency.Result{Status: 201}, nil
	})
	return op.Finish(ChargeOutput{Recorded: !res.Replayed}, err, idempotency.ErrInFlight, idempotency.ErrKeyReused)
}

func (c *paymentsAltClient) Close() error { return nil }

// isInFlight reports whether err says another execution of the key runs.
func isInFlight(err error) bool { return errors.Is(err, idempotency.ErrInFlight) }
