package harness

import (
	"context"
	"errors"

	"github.com/lockfree-go/lockfree/atomic"
	"github.com/lockfree-go/lockfree/internal/history"
)

// inventoryAlternative sells with atomic.Decrement: the check and the write
// are one statement, so no pause can fall between them.
type inventoryAlternative struct{}

func init() { RegisterApproach(inventoryAlternative{}) }

func (inventoryAlternative) Scenario() string   { return "inventory" }
func (inventoryAlternative) Approach() Approach { return Alternative }
func (inventoryAlternative) Label() string {
	return "atomic.Decrement: one conditional UPDATE … WHERE quantity >= 1 RETURNING quantity"
}
func (inventoryAlternative) Protection(Params) Protection { return Protection{} }

func (inventoryAlternative) NewClient(_ context.Context, env *Env) (Client, error) {
	s, err := atomic.NewPostgres(env.DB, atomic.Table{Name: "inventory", Key: "sku", Value: "quantity",
		MeterProvider: env.MeterProvider})
	if err != nil {
		return nil, err
	}
	return &inventoryAltClient{env: env, store: s}, nil
}

type inventoryAltClient struct {
	env   *Env
	store *atomic.Postgres
}

func (c *inventoryAltClient) Op(ctx context.Context) error {
	ctx, op, err := c.env.Invoke(ctx, inventoryKey(c.env), history.KindSell, nil)
	if err != nil {
		return err
	}
	// The statement is the whole operation: the point is before it.
	c.env.BeforeWrite(ctx, "harness.inventory.alternative.before-write")
	left, err := c.store.Decrement(ctx, op.key, 1)
	return finishSale(op, left, err)
}

func (c *inventoryAltClient) Close() error { return nil }

// finishSale records a sale: the stock it left, a refusal for want of
// stock (an answer about the stock), a fenced write (refused), or what
// the error says.
func finishSale(op *Op, left int64, err error) error {
	if errors.Is(err, atomic.ErrInsufficient) {
		return op.Ok(history.CounterOutput{Insufficient: true})
	}
	return op.Finish(history.Stock(left), err, errFenced)
}
