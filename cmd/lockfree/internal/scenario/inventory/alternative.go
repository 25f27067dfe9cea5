package inventory

import (
	"context"

	"github.com/google/uuid"

	"github.com/lockfree-go/lockfree/atomic"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"
)

// inventoryAlternative runs the store on atomic.Postgres: each operation's
// check and write are one statement (a reprice reads the price first, then
// compares and sets it), so no pause can fall between them. Each write
// but one sale in two carries an operation ID (atomic.WithID), minted once
// per operation: one whose answer was lost is sent again with it, and
// returns the outcome the first send recorded instead of applying twice.
// The other sales are Decrement's plain statement, as most callers send
// it: sent once, a lost answer leaves the sale uncertain.
type inventoryAlternative struct{}

func init() { engine.RegisterApproach(inventoryAlternative{}) }

func (inventoryAlternative) Scenario() string          { return "inventory" }
func (inventoryAlternative) Approach() engine.Approach { return engine.Alternative }
func (inventoryAlternative) Label() string {
	return "atomic.Postgres: each operation one conditional statement with an operation ID (sale: UPDATE … WHERE quantity >= 1, its outcome recorded), resent with the ID after a lost answer; 1 sale in 2 without an ID, sent once"
}
func (inventoryAlternative) Protection(engine.Params) engine.Protection { return engine.Protection{} }

func (inventoryAlternative) NewClient(_ context.Context, env *engine.Env) (engine.Client, error) {
	return newInventoryAltClient(env, true)
}

// inventoryBlindRetry is the lost-reply fault's foil: the alternative
// without operation IDs, which resends an operation whose answer was lost
// all the same. A sale that applied before its answer was lost is applied
// again: two units for one sale.
type inventoryBlindRetry struct{}

func init() { engine.RegisterApproach(inventoryBlindRetry{}) }

func (inventoryBlindRetry) Scenario() string          { return "inventory" }
func (inventoryBlindRetry) Approach() engine.Approach { return engine.BlindRetry }
func (inventoryBlindRetry) Label() string {
	return "atomic.Postgres without operation IDs: each operation one conditional statement, resent after a lost answer"
}
func (inventoryBlindRetry) Protection(engine.Params) engine.Protection { return engine.Protection{} }

// FoilOf: without a lost answer, it is the alternative without the IDs.
func (inventoryBlindRetry) FoilOf() (engine.Fault, string) {
	return engine.LostReply, "runs only under the lost-reply fault: without a lost answer it never resends"
}

func (inventoryBlindRetry) NewClient(_ context.Context, env *engine.Env) (engine.Client, error) {
	return newInventoryAltClient(env, false)
}

func newInventoryAltClient(env *engine.Env, ids bool) (engine.Client, error) {
	s, err := atomic.NewPostgres(env.DB, atomic.Table{Name: "inventory", Key: "sku", Value: "quantity",
		MeterProvider: env.MeterProvider})
	if err != nil {
		return nil, err
	}
	ops := inventoryAltOps{env: env, store: s, ids: ids, again: true}
	if !ids {
		return newInventoryClient(env, ops), nil
	}
	if ops.probe, err = newIDProber(env, s); err != nil {
		return nil, err
	}
	ops.unsure = new(int64)
	return altClient{newInventoryClient(env, ops), ops.unsure}, nil
}

// altClient is a client of the alternative, which counts its plain sales
// left uncertain.
type altClient struct {
	*inventoryClient
	unsure *int64
}

// Counts: plainUncertain, the plain sales whose answer was lost.
func (c altClient) Counts() map[string]int64 { return map[string]int64{plainUncertain: *c.unsure} }

// plainUncertain names, in a report's counts, the alternative's sales sent
// without an ID whose answer was lost: each is uncertain, and under
// lost-reply they are the only uncertain operations it may have (the
// others are resent with their IDs).
const plainUncertain = "plain-uncertain"

// inventoryAltOps are the store's operations on atomic.Postgres. Each
// statement is the whole operation: the before-write point is before it.
// With again, every statement is resent after a lost answer; with ids,
// each write carries its operation's ID, and a resend returns the first
// outcome; probe, when set, misuses a sale's ID now and then (idProber).
type inventoryAltOps struct {
	env   *engine.Env
	store *atomic.Postgres
	ids   bool
	again bool
	probe *idProber
	// unsure, with ids, counts the plain sales whose answer was lost.
	unsure *int64
}

const inventoryAltPoint = "harness.inventory.alternative.before-write"

// id returns the options of one operation's writes: a fresh ID, kept for
// every send of the operation, or none.
func (o inventoryAltOps) id() []atomic.Option {
	if !o.ids {
		return nil
	}
	return []atomic.Option{atomic.WithID(uuid.Must(uuid.NewV7()))}
}

// send sends one statement of an operation, again after a lost answer
// when o resends.
func (o inventoryAltOps) send(ctx context.Context, fn func() error) error {
	return o.env.Resend(ctx, o.again, fn)
}

func (o inventoryAltOps) sell(ctx context.Context, sku string) (left int64, err error) {
	if o.ids && o.env.Rand.IntN(2) == 0 { // a plain sale: sent once, no ID
		o.env.BeforeWrite(ctx, inventoryAltPoint)
		left, err = o.store.Decrement(ctx, sku, 1)
		if err != nil && engine.LostAnswer(err) {
			*o.unsure++
		}
		return left, err
	}
	id := o.id()
	o.env.BeforeWrite(ctx, inventoryAltPoint)
	err = o.send(ctx, func() (err error) { left, err = o.store.Decrement(ctx, sku, 1, id...); return err })
	o.probe.afterSale(ctx, sku, id, left, err)
	return left, err
}

func (o inventoryAltOps) basket(ctx context.Context, rows []string) (left map[string]int64, err error) {
	amounts := make(map[string]int64, len(rows))
	for _, r := range rows {
		amounts[r] = 1
	}
	id := o.id()
	o.env.BeforeWrite(ctx, inventoryAltPoint)
	err = o.send(ctx, func() (err error) { left, err = o.store.DecrementMany(ctx, amounts, id...); return err })
	return left, err
}

func (o inventoryAltOps) restock(ctx context.Context, row string, amount, capacity int64) (left int64, err error) {
	id := o.id()
	o.env.BeforeWrite(ctx, inventoryAltPoint)
	err = o.send(ctx, func() (err error) { left, err = o.store.Increment(ctx, row, amount, capacity, id...); return err })
	return left, err
}

func (o inventoryAltOps) reprice(ctx context.Context, row string) (old, next int64, err error) {
	if err := o.send(ctx, func() (err error) { old, err = o.store.Value(ctx, row); return err }); err != nil {
		return 0, 0, err
	}
	id := o.id()
	o.env.BeforeWrite(ctx, inventoryAltPoint)
	return old, old + 1, o.send(ctx, func() error { return o.store.CompareAndSet(ctx, row, old, old+1, id...) })
}

func (o inventoryAltOps) bid(ctx context.Context, row string, amount int64) error {
	id := o.id()
	o.env.BeforeWrite(ctx, inventoryAltPoint)
	return o.send(ctx, func() error { return o.store.SetIfGreater(ctx, row, amount, id...) })
}

func (o inventoryAltOps) hold(ctx context.Context, row string, holder int64) error {
	id := o.id()
	o.env.BeforeWrite(ctx, inventoryAltPoint)
	return o.send(ctx, func() error { return o.store.Claim(ctx, row, holder, id...) })
}
