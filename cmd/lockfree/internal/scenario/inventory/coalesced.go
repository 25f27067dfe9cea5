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

// inventoryCoalesced is the alternative on a hot key: the operations
// waiting in one process — sales, baskets, restocks, a reprice's read and
// its compare-and-set, bids — go as one statement and one commit
// (atomic.Coalescer over ApplyInOrder), each told what a serial execution
// in their order of arrival gives it. Holds (a row each, claimed once) are
// the alternative's without operation IDs, sent once. With several clients per process (--procs), a process's clients
// share one Coalescer, as a server's request handlers do. No operation
// carries an ID: one whose answer was lost is recorded as uncertain, never
// sent again.
type inventoryCoalesced struct{}

func init() { engine.RegisterApproach(inventoryCoalesced{}) }

func (inventoryCoalesced) Scenario() string          { return "inventory" }
func (inventoryCoalesced) Approach() engine.Approach { return engine.Coalesced }
func (inventoryCoalesced) Label() string {
	return "atomic.Coalescer: the operations waiting in one process (sales, baskets, restocks, reprices' reads and compare-and-sets, bids) sent as one statement and one commit (ApplyInOrder), each told its outcome in arrival order; holds one conditional statement each, as the alternative's without operation IDs"
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
		sh.rows = c
		return sh, err
	})
	if err != nil {
		return nil, err
	}
	sh := v.(*coalescing)
	return coalescedClient{inventoryClient: newInventoryClient(env, inventoryCoalescedOps{inventoryAltOps: inventoryAltOps{env: env, store: s},
		rows: sh.rows}), sh: sh}, nil
}

// coalescing is what a process's clients share: the Coalescer, and the
// store under it, which counts its steps.
type coalescing struct {
	store *atomic.Postgres
	rows  *atomic.Coalescer
	// steps counts the Coalescer's steps, merged the operations sent in a
	// step with others.
	steps, merged stdatomic.Int64
	reported      stdatomic.Bool
}

// ApplyInOrder is the store's, counted.
func (c *coalescing) ApplyInOrder(ctx context.Context, ops []atomic.Op) ([]atomic.Result, error) {
	c.steps.Add(1)
	if len(ops) > 1 {
		c.merged.Add(int64(len(ops)))
	}
	return c.store.ApplyInOrder(ctx, ops)
}

// coalescedClient is a client of the store whose counts are its
// process's: the first of the process's clients to be asked reports them.
type coalescedClient struct {
	*inventoryClient
	sh *coalescing
}

// Counts: "steps" the statements the process's Coalescer sent, "merged"
// the operations that shared one with others.
func (c coalescedClient) Counts() map[string]int64 {
	if !c.sh.reported.CompareAndSwap(false, true) {
		return nil
	}
	return map[string]int64{"steps": c.sh.steps.Load(), "merged": c.sh.merged.Load()}
}

// inventoryCoalescedOps are the alternative's operations without IDs or
// resends, all but holds through the process's Coalescer.
type inventoryCoalescedOps struct {
	inventoryAltOps
	rows *atomic.Coalescer
}

const inventoryCoalescedPoint = "harness.inventory.coalesced.before-write"

// One operation in impatientOdds comes from an impatient caller (a request
// handler with a short deadline): it gives up within impatience, often
// while its operation waits for a step, now and then while the step runs.
const (
	impatientOdds = 16
	impatience    = 2 * time.Millisecond
)

// apply runs op through the Coalescer. An error that is not
// ErrUncertain — an impatient caller's context, a step's lost answer alike
// — is the Coalescer's word that the operation did not apply: recorded as
// such (history.NotSent), so that one that applied all the same shows in
// the check. A lost answer (engine.LostAnswer: the step was sent, its
// connection broke before the answer came) given as such breaks the
// promise of ErrUncertain, whatever the step did.
func (o inventoryCoalescedOps) apply(ctx context.Context, op atomic.Op) atomic.Result {
	o.env.BeforeWrite(ctx, inventoryCoalescedPoint)
	if o.env.Rand.IntN(impatientOdds) == 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(o.env.Rand.Int64N(int64(impatience))))
		defer cancel()
	}
	r := o.rows.Apply(ctx, op)
	if r.Err != nil && !errors.Is(r.Err, atomic.ErrUncertain) {
		if ctx.Err() == nil && engine.LostAnswer(r.Err) {
			o.env.Broke(ctx, "%s: its step's answer was lost (%v), yet it was told the step did not apply, not ErrUncertain", op, r.Err)
		}
		r.Err = history.NotSent(r.Err)
	}
	return r
}

func (o inventoryCoalescedOps) sell(ctx context.Context, sku string) (int64, error) {
	r := o.apply(ctx, atomic.DecrementOp(sku, 1))
	return r.Value, r.Err
}

func (o inventoryCoalescedOps) basket(ctx context.Context, rows []string) (map[string]int64, error) {
	amounts := make(map[string]int64, len(rows))
	for _, r := range rows {
		amounts[r] = 1
	}
	r := o.apply(ctx, atomic.DecrementManyOp(amounts))
	return r.Values, r.Err
}

func (o inventoryCoalescedOps) restock(ctx context.Context, row string, amount, capacity int64) (int64, error) {
	r := o.apply(ctx, atomic.IncrementOp(row, amount, capacity))
	return r.Value, r.Err
}

// reprice reads the price in a step, and compares and sets it in a later
// one: other operations may come between, as between the alternative's
// two statements.
func (o inventoryCoalescedOps) reprice(ctx context.Context, row string) (old, next int64, err error) {
	if old, err = o.rows.Value(ctx, row); err != nil {
		return 0, 0, err
	}
	return old, old + 1, o.apply(ctx, atomic.CompareAndSetOp(row, old, old+1)).Err
}

func (o inventoryCoalescedOps) bid(ctx context.Context, row string, amount int64) error {
	return o.apply(ctx, atomic.SetIfGreaterOp(row, amount)).Err
}
