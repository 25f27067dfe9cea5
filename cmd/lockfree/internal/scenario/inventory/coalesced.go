package inventory

import (
	"context"
	"errors"
	stdatomic "sync/atomic"
	"time"

	"github.com/lockfree-go/lockfree/atomic"
	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/history"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"
)

// inventoryCoalesced is the alternative on a hot key: the sales waiting in
// one process for one SKU go as one statement and one commit
// (atomic.Coalescer over DecrementInOrder), each told what a serial
// execution in their order of arrival gives it. The other operations are
// the alternative's without operation IDs, sent once. With several clients per process (--procs), a
// process's clients share one Coalescer, as a server's request handlers
// do. No operation carries an ID: one whose answer was lost is recorded
// as uncertain, never sent again.
type inventoryCoalesced struct{}

func init() { engine.RegisterApproach(inventoryCoalesced{}) }

func (inventoryCoalesced) Scenario() string          { return "inventory" }
func (inventoryCoalesced) Approach() engine.Approach { return engine.Coalesced }
func (inventoryCoalesced) Label() string {
	return "atomic.Coalescer: the sales of one SKU waiting in one process sent as one statement and one commit (DecrementInOrder), each told its outcome in arrival order; the other operations one conditional statement each, as the alternative's without operation IDs"
}
func (inventoryCoalesced) Protection(engine.Params) engine.Protection { return engine.Protection{} }

// Handlers: its clients run 4 to a process, sharing its Coalescer,
// unless --procs says otherwise.
func (inventoryCoalesced) Handlers() int { return 4 }

func (inventoryCoalesced) NewClient(_ context.Context, env *engine.Env) (engine.Client, error) {
	s, err := atomic.NewPostgres(env.DB, atomic.Table{Name: "inventory", Key: "sku", Value: "quantity",
		MeterProvider: env.MeterProvider})
	if err != nil {
		return nil, err
	}
	v, err := env.Shared("inventory.coalescer", func() (any, error) {
		sh := &coalescing{store: s}
		c, err := atomic.NewCoalescer(sh, nil)
		sh.sales = c
		return sh, err
	})
	if err != nil {
		return nil, err
	}
	sh := v.(*coalescing)
	return coalescedClient{inventoryClient: newInventoryClient(env, inventoryCoalescedOps{inventoryAltOps: inventoryAltOps{env: env, store: s},
		sales: sh.sales}), sh: sh}, nil
}

// coalescing is what a process's clients share: the Coalescer, and the
// store under it, which counts its steps.
type coalescing struct {
	store *atomic.Postgres
	sales *atomic.Coalescer
	// steps counts the Coalescer's steps, merged the decrements sent in a
	// step with others.
	steps, merged stdatomic.Int64
	reported      stdatomic.Bool
}

// DecrementInOrder is the store's, counted.
func (c *coalescing) DecrementInOrder(ctx context.Context, key string, amounts []int64) ([]atomic.Result, error) {
	c.steps.Add(1)
	if len(amounts) > 1 {
		c.merged.Add(int64(len(amounts)))
	}
	return c.store.DecrementInOrder(ctx, key, amounts)
}

// coalescedClient is a client of the store whose counts are its
// process's: the first of the process's clients to be asked reports them.
type coalescedClient struct {
	*inventoryClient
	sh *coalescing
}

// Counts: "steps" the statements the process's Coalescer sent, "merged"
// the sales that shared one with others.
func (c coalescedClient) Counts() map[string]int64 {
	if !c.sh.reported.CompareAndSwap(false, true) {
		return nil
	}
	return map[string]int64{"steps": c.sh.steps.Load(), "merged": c.sh.merged.Load()}
}

// inventoryCoalescedOps are the alternative's operations without IDs or
// resends, the sales through the process's Coalescer.
type inventoryCoalescedOps struct {
	inventoryAltOps
	sales *atomic.Coalescer
}

const inventoryCoalescedPoint = "harness.inventory.coalesced.before-write"

// One sale in impatientOdds comes from an impatient caller (a request
// handler with a short deadline): it gives up within impatience, often
// while its sale waits for a step, now and then while the step runs.
const (
	impatientOdds = 16
	impatience    = 2 * time.Millisecond
)

// sell sells through the Coalescer. An error that is not ErrUncertain — an
// impatient caller's context, a step's lost answer alike — is the
// Coalescer's word that the sale did not apply: recorded as such
// (history.NotSent), so that a sale that applied all the same shows in the
// check.
func (o inventoryCoalescedOps) sell(ctx context.Context, sku string) (int64, error) {
	o.env.BeforeWrite(ctx, inventoryCoalescedPoint)
	if o.env.Rand.IntN(impatientOdds) == 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(o.env.Rand.Int64N(int64(impatience))))
		defer cancel()
	}
	left, err := o.sales.Decrement(ctx, sku, 1)
	if err != nil && !errors.Is(err, atomic.ErrUncertain) {
		err = history.NotSent(err)
	}
	return left, err
}
