package harness

import (
	"context"
	"strconv"
	"time"

	"github.com/lockfree-go/lockfree/atomic"
	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/internal/history"
)

// inventoryFenced sells with atomic.Fenced: lock the SKU, fenced read
// (which stamps the row with the lease's token), check, fenced write,
// release. A holder that pauses past its lease wakes with a token the row
// has already seen a higher one than: its write is refused.
type inventoryFenced struct{}

func init() { RegisterApproach(inventoryFenced{}) }

func (inventoryFenced) Scenario() string   { return "inventory" }
func (inventoryFenced) Approach() Approach { return FencedLock }
func (inventoryFenced) Label() string {
	return "atomic.Fenced: lock SKU → fenced read → check → fenced write → release"
}
func (inventoryFenced) Protection(p Params) Protection {
	return lockTTL(p)
}

func (inventoryFenced) NewClient(_ context.Context, env *Env) (Client, error) {
	table := atomic.Table{Name: "inventory", Key: "sku", Value: "quantity", MeterProvider: env.MeterProvider}
	f, err := atomic.NewFenced(env.Locks, env.DB, table, &atomic.FencedConfig{
		LockerConfig: fencedlock.LockerConfig{
			TTL:           env.LeaseTTL,
			Holder:        "worker-" + strconv.Itoa(env.Client),
			Wait:          &fencedlock.WaitConfig{MinDelay: 500 * time.Microsecond, MaxDelay: 20 * time.Millisecond},
			MeterProvider: env.MeterProvider,
		},
	})
	if err != nil {
		return nil, err
	}
	return &inventoryFencedClient{env: env, store: f}, nil
}

type inventoryFencedClient struct {
	env   *Env
	store *atomic.Fenced
}

func (c *inventoryFencedClient) Op(ctx context.Context) error {
	ctx, op, err := c.env.Invoke(ctx, inventoryKey(c.env), history.KindSell, nil)
	if err != nil {
		return err
	}
	// atomic.fenced.before-write sits between the check and the write.
	left, err := c.store.Decrement(ctx, op.key, 1)
	return finishSale(op, left, err)
}

func (c *inventoryFencedClient) Close() error { return nil }
