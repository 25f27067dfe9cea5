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
// refused.
type paymentsFenced struct{}

func init() { RegisterApproach(paymentsFenced{}) }

func (paymentsFenced) Scenario() string   { return "payments" }
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
}

func (c *paymentsFencedClient) Op(ctx context.Context) error {
	ctx, op, amount, err := payment(ctx, c.env)
	if err != nil {
		return err
	}
	var res idempotency.Result
	err = retryInFlight(ctx, op, func() error {
		var err error
		res, err = c.twin.Do(ctx, idempotency.Key{ID: op.key}, paymentFingerprint(op.key, amount), func(actx context.Context) (idempotency.Result, error) {
			return c.charge(ctx, actx, op, amount)
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

// charge is the work under the lock. Its statements run on the
// operation's context, not the attempt's: a stopped process does not see
// its lease's context end, and the fence must hold without it.
func (c *paymentsFencedClient) charge(ctx, actx context.Context, op *Op, amount int64) (idempotency.Result, error) {
	a, ok := idempotency.AttemptFrom(actx)
	if !ok {
		return idempotency.Result{}, errors.New("harness: payments: no attempt in the context")
	}
	token := a.Token()
	if _, err := c.env.DB.Exec(ctx, sqlPaymentsFenceRow, op.key); err != nil {
		return idempotency.Result{}, err
	}
	var charged bool
	var chargedAmount int64
	if err := paymentsFence.Read(ctx, c.env.DB, op.key, token, "charged, amount", &charged, &chargedAmount); err != nil {
		return idempotency.Result{}, err
	}
	if charged {
		// An earlier holder charged and did not record: the charge stands,
		// for the request it was made for.
		return idempotency.Result{Status: 200}, replay(op.key, chargedAmount, amount)
	}
	c.env.BeforeWrite(ctx, "harness.payments.fenced.before-write")
	err := pgx.BeginFunc(ctx, c.env.DB, func(tx pgx.Tx) error {
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
