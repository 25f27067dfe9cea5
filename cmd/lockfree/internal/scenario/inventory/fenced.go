package inventory

import (
	"context"

	"github.com/lockfree-go/lockfree/atomic"
	"github.com/lockfree-go/lockfree/fencedlock"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/approach"
)

// inventoryFenced runs the store on atomic.Fenced: lock the row (a basket:
// its rows, in key order), fenced read (which stamps the row with the
// lease's token), check, fenced write, release; a hold looks and inserts
// under the lock. A holder that pauses past its lease wakes with a token
// the row has already seen a higher one than: its write is refused.
type inventoryFenced struct{}

func init() { engine.RegisterApproach(inventoryFenced{}) }

func (inventoryFenced) Scenario() string          { return "inventory" }
func (inventoryFenced) Approach() engine.Approach { return engine.FencedLock }
func (inventoryFenced) Label() string {
	return "atomic.Fenced: lock row(s) → fenced read → check → fenced write → release"
}
func (inventoryFenced) Protection(p engine.Params) engine.Protection {
	return engine.LockTTL(p)
}

// CommitsTransactions: a basket's fenced writes are one transaction of
// atomic.Fenced's own, whose COMMIT lost-commit can take the answer of.
func (inventoryFenced) CommitsTransactions() {}

// PassesInTx: a basket passes atomic.fenced.in-tx between its writes.
func (inventoryFenced) PassesInTx() {}

func (inventoryFenced) NewClient(_ context.Context, env *engine.Env) (engine.Client, error) {
	table := atomic.Table{Name: "inventory", Key: "sku", Value: "quantity", MeterProvider: env.MeterProvider}
	f, err := atomic.NewFenced(env.Locks, env.DB, table, &atomic.FencedConfig{
		LockerConfig: fencedlock.LockerConfig{
			TTL:           env.LeaseTTL,
			Holder:        approach.Holder(env),
			Wait:          approach.LockWait(),
			MeterProvider: env.MeterProvider,
		},
	})
	if err != nil {
		return nil, err
	}
	return newInventoryClient(env, inventoryFencedOps{f}), nil
}

// inventoryFencedOps are the store's operations on atomic.Fenced, whose
// before-write point (atomic.fenced.before-write) sits between the check
// and the write.
type inventoryFencedOps struct{ store *atomic.Fenced }

func (o inventoryFencedOps) sell(ctx context.Context, sku string) (int64, error) {
	return o.store.Decrement(ctx, sku, 1)
}

func (o inventoryFencedOps) basket(ctx context.Context, rows []string) (map[string]int64, error) {
	amounts := make(map[string]int64, len(rows))
	for _, r := range rows {
		amounts[r] = 1
	}
	return o.store.DecrementMany(ctx, amounts)
}

func (o inventoryFencedOps) restock(ctx context.Context, row string, amount, capacity int64) (int64, error) {
	return o.store.Increment(ctx, row, amount, capacity)
}

// reprice reads the price without the lock, as Postgres' reprice does, and
// compares and sets it under the lock.
func (o inventoryFencedOps) reprice(ctx context.Context, row string) (int64, int64, error) {
	old, err := o.store.Value(ctx, row)
	if err != nil {
		return 0, 0, err
	}
	return old, old + 1, o.store.CompareAndSet(ctx, row, old, old+1)
}

func (o inventoryFencedOps) bid(ctx context.Context, row string, amount int64) error {
	return o.store.SetIfGreater(ctx, row, amount)
}

func (o inventoryFencedOps) hold(ctx context.Context, row string, holder int64) error {
	return o.store.Claim(ctx, row, holder)
}
