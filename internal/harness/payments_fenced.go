package harness

import (
	"context"
	"errors"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/idempotency"
	"github.com/lockfree-go/lockfree/internal/history"
)

// paymentsFence is the fenced twin's token and charged flag, per key.
var paymentsFence = fencedlock.Fence{Table: "payment_fences", Key: "payment_key"}

const sqlPaymentsFenceRow = `INSERT INTO payment_fences (payment_key) VALUES ($1) ON CONFLICT DO NOTHING`

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
		RegisterApproach(paymentsFenced{sc})
	}
}

func (d paymentsFenced) Scenario() string { return d.scenario }
func (paymentsFenced) Approach() Approach { return FencedLock }
func (paymentsFenced) Label() string {
	return "idempotency.Fenced: lock key → check record → fenced read → charge with fenced write → record → release"
}
func (paymentsFenced) Protection(p Params) Protection {
	return lockTTL(p)
}

func (paymentsFenced) NewClient(_ context.Context, env *Env) (Client, error) {
	records, err := idempotency.NewPostgres(env.DB, nil)
	if err != nil {
		return nil, err
	}
	f, err := idempotency.NewFenced(env.Locks, records, &idempotency.FencedConfig{
		LockerConfig: fencedlock.LockerConfig{TTL: env.LeaseTTL, Holder: "worker-" + strconv.Itoa(env.Client),
			MeterProvider: env.MeterProvider},
	})
	if err != nil {
		return nil, err
	}
	return &paymentsFencedClient{env: env, twin: f}, nil
}

type paymentsFencedClient struct {
	env  *Env
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
		res, err = c.twin.Do(ctx, idempotency.Key{ID: op.key}, paymentFingerprint(op.key, amount), func(actx context.Context) (idempotency.Result, error) {
			return fencedCharge(ctx, actx, c.env, op, amount, chargePoint(c.env, "harness.payments.fenced.before-write", 4))
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
	return op.Finish(history.ChargeOutput{Recorded: recorded}, err, idempotency.ErrInFlight, idempotency.ErrKeyReused, errFenced)
}

// chargePoint is the before-write point an attempt's charge passes: point
// for the last client of every n (client n−1, 2n−1, …), none for the
// others. A fault falls at an operation's first point, and the injector
// picks its victims round-robin, from client 0: so of every n faults, n−1
// stop an attempt after its charge, at the library's point before the
// record's write — the put of the fenced twin, the completion of the leased
// alternative — which wakes to find a newer attempt held between its own
// read or claim of the record and its write of it, and one stops an
// attempt before its charge, which wakes to find its charge refused (its
// work fails, and the attempt gives the key up).
func chargePoint(env *Env, point string, n int) string {
	if env.Client%n != n-1 {
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
func fencedCharge(ctx, actx context.Context, env *Env, op *Op, amount int64, point string) (idempotency.Result, error) {
	a, ok := idempotency.AttemptFrom(actx)
	if !ok {
		return idempotency.Result{}, errors.New("harness: payments: no attempt in the context")
	}
	token := a.Token()
	if _, err := env.DB.Exec(ctx, sqlPaymentsFenceRow, op.key); err != nil {
		return idempotency.Result{}, err
	}
	var charged bool
	var chargedAmount int64
	if err := paymentsFence.Read(ctx, env.DB, op.key, token, "charged, amount", &charged, &chargedAmount); err != nil {
		return idempotency.Result{}, err
	}
	if charged {
		// An earlier holder charged and did not record: the charge stands,
		// for the request it was made for.
		return idempotency.Result{Status: 200}, replay(op.key, chargedAmount, amount)
	}
	if point != "" {
		env.BeforeWrite(ctx, point)
	} else {
		// The charge is the write: an error from here on may come after
		// it committed, as after a point.
		op.passed.Store(true)
	}
	err := pgx.BeginFunc(ctx, env.DB, func(tx pgx.Tx) error {
		if err := paymentsFence.Update(ctx, tx, op.key, token, "charged = true, amount = $1", amount); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, sqlPaymentsCharge, op.key, amount, op.ID())
		return err
	})
	if err == nil {
		op.Took() // whatever happens to the record, the charge stands
	}
	return idempotency.Result{Status: 201}, err
}

func (c *paymentsFencedClient) Close() error { return nil }
