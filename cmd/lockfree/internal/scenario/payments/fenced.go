package payments

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/idempotency"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/approach"
)

// sqlPaymentsStamp is the fenced read of a key's charge state, in one
// statement that also makes the key's row on its first attempt: the row's
// token is raised to the attempt's, unless it has seen a higher one — then
// no row comes back. (fencedlock.Fence.Read needs the row to exist: with it,
// a first charge would take one more round trip to make the row.)
const sqlPaymentsStamp = `INSERT INTO payment_fences AS f (payment_key, fencing_token) VALUES ($1, $2)
ON CONFLICT (payment_key) DO UPDATE SET fencing_token = $2 WHERE f.fencing_token <= $2
RETURNING f.charged, f.amount`

// sqlPaymentsFencedCharge is the charge with its fenced write, in one
// statement: the key's row is marked charged under the token condition, and
// the charge is inserted only when it was — no row inserted means a higher
// token reached the key.
const sqlPaymentsFencedCharge = `WITH f AS (
	UPDATE payment_fences SET charged = true, amount = $2, fencing_token = $4
	WHERE payment_key = $1 AND fencing_token <= $4 RETURNING 1)
INSERT INTO charges (payment_key, amount, charged_by) SELECT $1, $2, $3 FROM f`

// paymentsFenced charges with idempotency.Fenced: lock the key, check the
// record, fenced read of the key's charged flag (raising its token), charge
// with a fenced write, record, release. A holder stopped past its lease
// wakes with a token the key has seen a higher one than: its charge is
// refused, or, stopped after its charge (chargePoint: three faults in
// four, a short run's few pauses being the ones that show a stale put), the
// put of its record.
type paymentsFenced struct{ scenario string }

func init() {
	for _, sc := range paymentScenarios {
		engine.RegisterApproach(paymentsFenced{sc})
	}
}

func (d paymentsFenced) Scenario() string        { return d.scenario }
func (paymentsFenced) Approach() engine.Approach { return engine.FencedLock }
func (paymentsFenced) Label() string {
	return "idempotency.Fenced: lock key → check record → fenced read → charge with fenced write → record → release"
}
func (paymentsFenced) Protection(p engine.Params) engine.Protection {
	return engine.LockTTL(p)
}

func (paymentsFenced) NewClient(_ context.Context, env *engine.Env) (engine.Client, error) {
	records, err := idempotency.NewPostgres(env.DB, nil)
	if err != nil {
		return nil, err
	}
	f, err := idempotency.NewFenced(env.Locks, records, &idempotency.FencedConfig{
		LockerConfig: fencedlock.LockerConfig{TTL: env.LeaseTTL, Holder: approach.Holder(env),
			MeterProvider: env.MeterProvider},
	})
	if err != nil {
		return nil, err
	}
	return &paymentsFencedClient{env: env, twin: f}, nil
}

type paymentsFencedClient struct {
	env  *engine.Env
	twin *idempotency.Fenced
	keys paymentKeys
}

func (c *paymentsFencedClient) Op(ctx context.Context) error {
	ctx, op, amount, err := c.keys.next(ctx, c.env)
	if err != nil {
		return err
	}
	var res idempotency.Result
	err = retryInFlight(ctx, op, func() error {
		var err error
		res, err = c.twin.Do(ctx, idempotency.Key{ID: op.Key()}, paymentFingerprint(op.Key(), amount), func(actx context.Context) (idempotency.Result, error) {
			return fencedCharge(ctx, actx, c.env, op, amount, chargePoint(c.env, "harness.payments.fenced.before-write", 3))
		})
		return err
	})
	recorded := err == nil && !res.Replayed
	if errors.Is(err, idempotency.ErrUnrecorded) {
		// The charge's work returned (it committed, or found the key
		// charged); only storing its record was not done. The operation
		// took effect, as the library's typed outcome says.
		err = nil
	}
	return op.Finish(ChargeOutput{Recorded: recorded}, err, idempotency.ErrInFlight, idempotency.ErrKeyReused, fencedlock.ErrFenced)
}

// chargePoint is the before-write point an attempt's charge passes: point
// for the clients whose number modulo 4 is in at, none for the others. A
// fault falls at an operation's first point, and the injector picks its
// victims round-robin from client 0, skipping one idle a moment; so at
// decides where a run's faults stop attempts. A client without the point
// stops at the library's point after its charge (before the record's put,
// or the leased attempt's completion): it wakes superseded, and its write
// of the record, or its completion, must be refused. One with it stops
// before its charge: it wakes to find its charge refused, and the leased
// attempt's release of the key must be refused too. The fenced twin passes
// it at client 3 of every 4 (three faults in four stop after the charge);
// the leased alternative at clients 1 to 3, so that a short run's first
// two faults, at clients 0 and 1, reach both.
func chargePoint(env *engine.Env, point string, at ...int) string {
	if !slices.Contains(at, env.Client%4) {
		return ""
	}
	return point
}

// fencedCharge is the work of an attempt (the fenced twin's under its lock,
// the leased alternative's under its lease): a fenced read of the key's
// charged flag with the attempt's token, then the charge with a fenced
// write, after the before-write point (none when point is empty: see
// chargePoint). Its statements run on the operation's context, not the
// attempt's: a stopped process does not see its lease's context end, and
// the fence must hold without it.
func fencedCharge(ctx, actx context.Context, env *engine.Env, op *engine.Invocation, amount int64, point string) (idempotency.Result, error) {
	a, ok := idempotency.AttemptFrom(actx)
	if !ok {
		return idempotency.Result{}, errors.New("harness: payments: no attempt in the context")
	}
	token := a.Token()
	var charged bool
	var chargedAmount int64
	err := env.DB.QueryRow(ctx, sqlPaymentsStamp, op.Key(), token).Scan(&charged, &chargedAmount)
	if errors.Is(err, pgx.ErrNoRows) {
		return idempotency.Result{}, fmt.Errorf("harness: payments: fenced read of %s with token %d: %w", op.Key(), token, fencedlock.ErrFenced)
	}
	if err != nil {
		return idempotency.Result{}, err
	}
	if charged {
		// An earlier holder charged and did not record: the charge stands,
		// for the request it was made for.
		return idempotency.Result{Status: 200}, replay(op.Key(), chargedAmount, amount)
	}
	if point != "" {
		env.BeforeWrite(ctx, point)
	} else {
		// The charge is the write: an error from here on may come after
		// it committed, as after a point.
		op.ReachedWrite()
	}
	tag, err := env.DB.Exec(ctx, sqlPaymentsFencedCharge, op.Key(), amount, op.ID(), token)
	if err != nil {
		return idempotency.Result{}, err
	}
	if tag.RowsAffected() == 0 {
		return idempotency.Result{}, fmt.Errorf("harness: payments: charge of %s with token %d: %w", op.Key(), token, fencedlock.ErrFenced)
	}
	op.Took() // whatever happens to the record, the charge stands
	return idempotency.Result{Status: 201}, nil
}

func (c *paymentsFencedClient) Close() error { return nil }
