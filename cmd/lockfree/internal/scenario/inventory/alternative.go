package inventory

import (
	"context"

	"github.com/lockfree-go/lockfree/atomic"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"
)

// inventoryAlternative runs the store on atomic.Postgres: each operation's
// check and write are one statement (a reprice reads the price first, then
// compares and sets it), so no pause can fall between them.
type inventoryAlternative struct{}

func init() { engine.RegisterApproach(inventoryAlternative{}) }

func (inventoryAlternative) Scenario() string          { return "inventory" }
func (inventoryAlternative) Approach() engine.Approach { return engine.Alternative }
func (inventoryAlternative) Label() string {
	return "atomic.Postgres: each operation one conditional statement (sale: UPDATE … WHERE quantity >= 1 RETURNING quantity)"
}
func (inventoryAlternative) Protection(engine.Params) engine.Protection { return engine.Protection{} }

func (inventoryAlternative) NewClient(_ context.Context, env *engine.Env) (engine.Client, error) {
	s, err := atomic.NewPostgres(env.DB, atomic.Table{Name: "inventory", Key: "sku", Value: "quantity",
		MeterProvider: env.MeterProvider})
	if err != nil {
		return nil, err
	}
	return newInventoryClient(env, inventoryAltOps{env: env, store: s}), nil
}

// inventoryAltOps are the store's operations on atomic.Postgres. Each
// statement is the whole operation: the before-write point is before it.
type inventoryAltOps struct {
	env   *engine.Env
	store *atomic.Postgres
}

const inventoryAltPoint = "harness.inventory.alternative.before-write"

func (o inventoryAltOps) sell(ctx context.Context, sku string) (int64, error) {
	o.env.BeforeWrite(ctx, inventoryAltPoint)
	return o.store.Decrement(ctx, sku, 1)
}

func (o inventoryAltOps) basket(ctx context.Context, rows []string) (map[string]int64, error) {
	amounts := make(map[string]int64, len(rows))
	for _, r := range rows {
		amounts[r] = 1
	}
	o.env.BeforeWrite(ctx, inventoryAltPoint)
	return o.store.DecrementMany(ctx, amounts)
}

func (o inventoryAltOps) restock(ctx context.Context, row string, amount, capacity int64) (int64, error) {
	o.env.BeforeWrite(ctx, inventoryAltPoint)
	return o.store.Increment(ctx, row, amount, capacity)
}

func (o inventoryAltOps) reprice(ctx context.Context, row string) (int64, int64, error) {
	old, err := o.store.Value(ctx, row)
	if err != nil {
		return 0, 0, err
	}
	o.env.BeforeWrite(ctx, inventoryAltPoint)
	return old, old + 1, o.store.CompareAndSet(ctx, row, old, old+1)
}

func (o inventoryAltOps) bid(ctx context.Context, row string, amount int64) error {
	o.env.BeforeWrite(ctx, inventoryAltPoint)
	return o.store.SetIfGreater(ctx, row, amount)
}

func (o inventoryAltOps) hold(ctx context.Context, row string, holder int64) error {
	o.env.BeforeWrite(ctx, inventoryAltPoint)
	return o.store.Claim(ctx, row, holder)
}
