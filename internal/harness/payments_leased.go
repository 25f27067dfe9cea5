package harness

import (
	"context"

	"github.com/lockfree-go/lockfree/idempotency"
	"github.com/lockfree-go/lockfree/internal/history"
)

// paymentsLeased is payments with the charge outside the claim's
// transaction — a call to a payment provider, here a charge written in its
// own transaction — so its alternative is idempotency's leased mode: the
// key is claimed with a lease and a fencing token, the charge presents the
// attempt's token to the provider (a fenced write, as the fenced twin's),
// and the result is stored with a compare-and-set on the token. An attempt
// stopped past its lease is superseded: its charge is refused by the
// token, and its completion or release by the record; the faults fall
// between its charge and its completion. The tables, the check and the
// other approaches are payments'.
type paymentsLeased struct{ payments }

func init() { Register(paymentsLeased{}) }

func (paymentsLeased) Name() string { return "payments-leased" }
func (paymentsLeased) Description() string {
	return "payments whose charge is an external call (its own transaction, fenced by the attempt's token), the alternative idempotency's leased mode: each key is charged exactly once, only by an attempt that was not refused, no attempt of another amount is told it is charged, and at most one stores the key's answer"
}

// paymentsLeasedAlternative charges with idempotency.Leased: claim the key
// with a lease, fenced read of the key's charged flag with the attempt's
// token, charge with a fenced write, complete with the token.
type paymentsLeasedAlternative struct{}

func init() { RegisterApproach(paymentsLeasedAlternative{}) }

func (paymentsLeasedAlternative) Scenario() string   { return "payments-leased" }
func (paymentsLeasedAlternative) Approach() Approach { return Alternative }
func (paymentsLeasedAlternative) Label() string {
	return "idempotency.Leased: claim with a lease → fenced read with the attempt's token → charge with a fenced write → complete with the token"
}
func (paymentsLeasedAlternative) Protection(p Params) Protection { return lockTTL(p) }

func (paymentsLeasedAlternative) NewClient(_ context.Context, env *Env) (Client, error) {
	store, err := idempotency.NewPostgres(env.DB, nil)
	if err != nil {
		return nil, err
	}
	l, err := idempotency.NewLeased(store, &idempotency.LeasedConfig{TTL: env.LeaseTTL, MeterProvider: env.MeterProvider})
	if err != nil {
		return nil, err
	}
	return &paymentsLeasedClient{env: env, leased: l}, nil
}

type paymentsLeasedClient struct {
	env    *Env
	leased *idempotency.Leased
}

func (c *paymentsLeasedClient) Op(ctx context.Context) error {
	ctx, op, amount, err := payment(ctx, c.env)
	if err != nil {
		return err
	}
	var res idempotency.Result
	err = retryInFlight(ctx, op, func() error {
		var err error
		res, err = c.leased.Do(ctx, idempotency.Key{ID: op.key}, paymentFingerprint(op.key, amount), func(actx context.Context) (idempotency.Result, error) {
			// No before-write point of its own: a fault falls at
			// idempotency.leased.before-write, between the charge and the
			// completion, where a stopped attempt wakes superseded.
			return fencedCharge(ctx, actx, c.env, op, amount, "")
		})
		return err
	})
	// A superseded attempt is refused: its charge too, by the token, unless
	// it committed before (Took), and then the operation is uncertain.
	return op.Finish(history.ChargeOutput{Recorded: err == nil && !res.Replayed}, err,
		idempotency.ErrInFlight, idempotency.ErrKeyReused, idempotency.ErrSuperseded, errFenced)
}

func (c *paymentsLeasedClient) Close() error { return nil }
