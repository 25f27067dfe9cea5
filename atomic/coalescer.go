package atomic

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/lockfree-go/lockfree/internal/failpoint"
)

// CoalescerConfig configures a Coalescer. A nil *CoalescerConfig means the
// defaults.
type CoalescerConfig struct {
	// MaxBatch is the most keys one step changes or reads, counted as
	// MaxInOrder counts them; at most MaxInOrder. Defaults to 128.
	MaxBatch int
	// Timeout bounds each step the Coalescer sends. It runs apart from
	// its callers' contexts, so that a caller that gives up does not fail
	// the others. Defaults to 30 seconds.
	Timeout time.Duration
}

func (c *CoalescerConfig) withDefaults() CoalescerConfig {
	var d CoalescerConfig
	if c != nil {
		d = *c
	}
	if d.MaxBatch == 0 {
		d.MaxBatch = 128
	}
	if d.Timeout == 0 {
		d.Timeout = 30 * time.Second
	}
	return d
}

func (c CoalescerConfig) validate() error {
	if c.MaxBatch < 1 || c.MaxBatch > MaxInOrder {
		return fmt.Errorf("%w: invalid coalescer config: MaxBatch %d, want 1 to %d", ErrInvalid, c.MaxBatch, MaxInOrder)
	}
	if c.Timeout < 0 {
		return fmt.Errorf("%w: invalid coalescer config: Timeout %v is negative", ErrInvalid, c.Timeout)
	}
	return nil
}

// Coalescer turns concurrent operations in this process into steps of its
// store: one statement and one commit on Postgres. One step runs at a
// time; the operations that arrive meanwhile wait, and when it ends all of
// them (up to MaxBatch keys) go in the next step, in their order of
// arrival. Each caller gets the outcome a serial execution in arrival order
// gives it: of decrements that cannot all be served, those that fit are
// served and the rest refused; a compare-and-set meets the value the
// operation before it left. On a hot key, N operations cost one commit
// instead of N. Keys share the steps, so an operation waits for the step
// before it whatever its key: give a Coalescer to the keys that are hot
// together (a product's stock, its price and its bids), not to a whole
// table.
//
// Cancellation: a caller whose context ends before its operation was sent
// gets the context's error, and its operation is never sent. One whose
// context ends while its step runs gets an error matching ErrUncertain
// (and the context's error), unless the step's outcome is already there.
// The others of its step are not affected. It is safe for concurrent use;
// it runs a goroutine while operations wait or run, and none when idle.
type Coalescer struct {
	store InOrder
	cfg   CoalescerConfig

	mu      sync.Mutex
	waiting []*waiter
	running bool // a goroutine sends the steps
}

// waiter is one caller's operation.
type waiter struct {
	op   Op
	sent bool        // in a step: guarded by Coalescer.mu
	done chan Result // buffered: the step never blocks on a caller
}

// NewCoalescer returns a Coalescer over store. A nil store or an invalid
// config is ErrInvalid. It does no I/O.
func NewCoalescer(store InOrder, cfg *CoalescerConfig) (*Coalescer, error) {
	if store == nil {
		return nil, fmt.Errorf("%w: nil store", ErrInvalid)
	}
	c := cfg.withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	return &Coalescer{store: store, cfg: c}, nil
}

// Decrement subtracts amount (> 0) from key's value if the result stays at
// or above the store's floor, as Store.Decrement does, and returns the new
// value.
func (c *Coalescer) Decrement(ctx context.Context, key string, amount int64) (int64, error) {
	r := c.Apply(ctx, DecrementOp(key, amount))
	return r.Value, r.Err
}

// Increment adds amount (> 0) to key's value if the result stays at or
// below limit, as Store.Increment does, and returns the new value.
func (c *Coalescer) Increment(ctx context.Context, key string, amount, limit int64) (int64, error) {
	r := c.Apply(ctx, IncrementOp(key, amount, limit))
	return r.Value, r.Err
}

// CompareAndSet sets key's value to next if it is old, as
// Store.CompareAndSet does.
func (c *Coalescer) CompareAndSet(ctx context.Context, key string, old, next int64) error {
	return c.Apply(ctx, CompareAndSetOp(key, old, next)).Err
}

// SetIfGreater sets key's value to value if that is greater, as
// Store.SetIfGreater does.
func (c *Coalescer) SetIfGreater(ctx context.Context, key string, value int64) error {
	return c.Apply(ctx, SetIfGreaterOp(key, value)).Err
}

// DecrementMany subtracts each amount from its key, all or nothing, as
// Store.DecrementMany does, and returns the keys' new values.
func (c *Coalescer) DecrementMany(ctx context.Context, amounts map[string]int64) (map[string]int64, error) {
	r := c.Apply(ctx, DecrementManyOp(amounts))
	return r.Values, r.Err
}

// Value reads key's value at its place among the operations: after every
// operation that returned before it was called. On Postgres it locks the
// row with its step, as the step's writes do; for a read that waits for
// no one, use the Store's Value.
func (c *Coalescer) Value(ctx context.Context, key string) (int64, error) {
	r := c.Apply(ctx, ReadOp(key))
	return r.Value, r.Err
}

// Apply runs op in one step with the other operations waiting beside it.
// Its Result is what the Store's method of the same name returns: the
// value, or an *InsufficientError, *ConflictError or ErrNotFound with the
// value it was refused on, or ErrInvalid (before anything is sent). An
// error matching ErrUncertain means the operation may have applied; any
// other means it did not.
func (c *Coalescer) Apply(ctx context.Context, op Op) Result {
	if err := op.validate(); err != nil {
		return Result{Err: err}
	}
	if err := ctx.Err(); err != nil {
		return Result{Err: err}
	}
	w := &waiter{op: op, done: make(chan Result, 1)}
	c.mu.Lock()
	c.waiting = append(c.waiting, w)
	start := !c.running
	c.running = true
	c.mu.Unlock()
	if start {
		go c.run()
	}
	select {
	case r := <-w.done:
		return r
	case <-ctx.Done():
	}
	c.mu.Lock()
	sent := w.sent
	if !sent || failpoint.Mutant("atomic.coalescer.in-flight") {
		if i := slices.Index(c.waiting, w); i >= 0 {
			c.waiting = slices.Delete(c.waiting, i, i+1)
		}
	}
	c.mu.Unlock()
	if !sent || failpoint.Mutant("atomic.coalescer.in-flight") {
		return Result{Err: context.Cause(ctx)}
	}
	select {
	case r := <-w.done: // the step ended meanwhile: its outcome is known
		return r
	default:
		return Result{Err: fmt.Errorf("%w: %s: %w", ErrUncertain, op, context.Cause(ctx))}
	}
}

// run sends steps until no operation waits.
func (c *Coalescer) run() {
	for {
		c.mu.Lock()
		n, keys := 0, 0
		for n < len(c.waiting) && (n == 0 || keys+c.waiting[n].op.size() <= c.cfg.MaxBatch) {
			keys += c.waiting[n].op.size()
			n++
		}
		if n == 0 {
			c.running = false
			c.mu.Unlock()
			return
		}
		batch := slices.Clone(c.waiting[:n])
		c.waiting = slices.Delete(c.waiting, 0, n)
		for _, w := range batch {
			w.sent = true
		}
		c.mu.Unlock()
		c.step(batch)
		// The callers just answered run before the next batch is taken:
		// their next operations join it, not the step after.
		runtime.Gosched()
	}
}

// step sends one batch and gives each waiter its result, in order.
func (c *Coalescer) step(batch []*waiter) {
	ops := make([]Op, len(batch))
	for i, w := range batch {
		ops[i] = w.op
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.Timeout)
	defer cancel()
	results, err := c.store.ApplyInOrder(ctx, ops)
	if err == nil && len(results) != len(batch) {
		err = fmt.Errorf("%w: a step of %d operations: %d results", ErrUncertain, len(batch), len(results))
	}
	if err != nil {
		for _, w := range batch {
			w.done <- Result{Err: err}
		}
		return
	}
	if failpoint.Mutant("atomic.coalescer.order") {
		slices.Reverse(results)
	}
	for i, w := range batch {
		w.done <- results[i]
	}
}
