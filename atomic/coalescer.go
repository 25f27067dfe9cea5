package atomic

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/lockfree-go/lockfree/internal/failpoint"
	"github.com/lockfree-go/lockfree/internal/short"
)

// ErrUncertain reports an operation whose outcome is unknown: it was sent,
// and the answer did not come back (a lost connection, or the caller's
// context ended while it ran). It may have applied. Ask the store
// (Value), or give the operation an ID on a Store that records them.
var ErrUncertain = errors.New("atomic: outcome unknown")

// MaxInOrder is the most decrements one DecrementInOrder step takes.
const MaxInOrder = 1000

// Result is the outcome of one decrement of a DecrementInOrder step.
type Result struct {
	// Value is the key's value after this decrement when it applied, or
	// the value it was refused on.
	Value int64
	// Err is nil when the decrement applied; otherwise an
	// *InsufficientError (ErrInsufficient), ErrNotFound, or ErrInvalid for
	// an amount that is not positive or overflows with the floor.
	Err error
}

// InOrder is a store that applies several decrements of one key in one
// atomic step, as Postgres (one statement) and Memory (one critical
// section) do.
type InOrder interface {
	// DecrementInOrder applies amounts to key's value in their order, each
	// as Decrement would in a serial execution: an amount whose result
	// stays at or above the floor is taken, any other is refused with the
	// value it met, and the next amount meets what the last one left. It
	// returns one Result per amount, in order. All the step's decrements
	// commit together, or none does: an error says so, and matches
	// ErrUncertain when the step may have applied all the same. A bad key,
	// no amounts or more than MaxInOrder are ErrInvalid before anything is
	// written; a bad amount is refused alone, in its Result.
	DecrementInOrder(ctx context.Context, key string, amounts []int64) ([]Result, error)
}

// inOrder is a validated DecrementInOrder request: the amounts that can be
// sent, with their thresholds, and the results of those that cannot.
type inOrder struct {
	results    []Result
	sent       []int // indexes of the amounts sent, in order
	amounts    []int64
	thresholds []int64
}

func newInOrder(key string, amounts []int64, floor int64) (inOrder, error) {
	if err := validKey(key); err != nil {
		return inOrder{}, err
	}
	if len(amounts) == 0 || len(amounts) > MaxInOrder {
		return inOrder{}, fmt.Errorf("%w: %d amounts for %s, want 1 to %d", ErrInvalid, len(amounts), short.Quote(key), MaxInOrder)
	}
	r := inOrder{results: make([]Result, len(amounts))}
	for i, a := range amounts {
		th, err := decrementThreshold(key, a, floor)
		if err != nil {
			r.results[i].Err = err
			continue
		}
		r.sent = append(r.sent, i)
		r.amounts = append(r.amounts, a)
		r.thresholds = append(r.thresholds, th)
	}
	return r, nil
}

// CoalescerConfig configures a Coalescer. A nil *CoalescerConfig means the
// defaults.
type CoalescerConfig struct {
	// MaxBatch is the most decrements of one key one step carries, at
	// most MaxInOrder. Defaults to 128.
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

// Coalescer turns concurrent decrements of one key in this process into
// one step of its store: one statement and one commit on Postgres. While a
// step of a key runs, the decrements of that key that arrive wait; when it
// ends, all of them (up to MaxBatch) go in the next step, in their order of
// arrival. Each caller gets the outcome a serial execution in arrival order
// gives it: a batch that cannot be fully served serves what fits and
// refuses the rest. Keys do not wait for each other.
//
// Cancellation: a caller whose context ends before its decrement was sent
// gets the context's error, and its decrement is never sent. One whose
// context ends while its step runs gets an error matching ErrUncertain
// (and the context's error), unless the step's outcome is already there.
// The others of its step are not affected. It is safe for concurrent use;
// it starts a goroutine per key while that key has decrements waiting or
// running, and none when idle.
type Coalescer struct {
	store InOrder
	cfg   CoalescerConfig

	mu   sync.Mutex
	keys map[string]*keyQueue
}

// keyQueue is one key's decrements that wait for a step.
type keyQueue struct {
	waiting []*waiter
}

// waiter is one caller's decrement.
type waiter struct {
	amount int64
	sent   bool        // in a step: guarded by Coalescer.mu
	done   chan Result // buffered: the step never blocks on a caller
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
	return &Coalescer{store: store, cfg: c, keys: map[string]*keyQueue{}}, nil
}

// Decrement subtracts amount (> 0) from key's value if the result stays at
// or above the store's floor, as Store.Decrement does, in one step with the
// other decrements of key waiting beside it. It returns the new value, or
// an *InsufficientError with the value it was refused on, ErrNotFound, or
// ErrInvalid (before anything is sent). An error matching ErrUncertain
// means the decrement may have applied; any other means it did not.
func (c *Coalescer) Decrement(ctx context.Context, key string, amount int64) (int64, error) {
	if err := validKey(key); err != nil {
		return 0, err
	}
	if err := validAmount(key, amount); err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	w := &waiter{amount: amount, done: make(chan Result, 1)}
	c.mu.Lock()
	q, running := c.keys[key]
	if !running {
		q = &keyQueue{}
		c.keys[key] = q
	}
	q.waiting = append(q.waiting, w)
	c.mu.Unlock()
	if !running {
		go c.run(key, q)
	}
	select {
	case r := <-w.done:
		return r.Value, r.Err
	case <-ctx.Done():
	}
	c.mu.Lock()
	sent := w.sent
	if !sent || failpoint.Mutant("atomic.coalescer.in-flight") {
		if i := slices.Index(q.waiting, w); i >= 0 {
			q.waiting = slices.Delete(q.waiting, i, i+1)
		}
	}
	c.mu.Unlock()
	if !sent || failpoint.Mutant("atomic.coalescer.in-flight") {
		return 0, context.Cause(ctx)
	}
	select {
	case r := <-w.done: // the step ended meanwhile: its outcome is known
		return r.Value, r.Err
	default:
		return 0, fmt.Errorf("%w: decrement %s by %d: %w", ErrUncertain, short.Quote(key), amount, context.Cause(ctx))
	}
}

// run sends key's steps until no decrement of key waits, then forgets key.
func (c *Coalescer) run(key string, q *keyQueue) {
	for {
		c.mu.Lock()
		n := min(len(q.waiting), c.cfg.MaxBatch)
		if n == 0 {
			delete(c.keys, key)
			c.mu.Unlock()
			return
		}
		batch := slices.Clone(q.waiting[:n])
		q.waiting = slices.Delete(q.waiting, 0, n)
		for _, w := range batch {
			w.sent = true
		}
		c.mu.Unlock()
		c.step(key, batch)
	}
}

// step sends one batch and gives each waiter its result, in order.
func (c *Coalescer) step(key string, batch []*waiter) {
	amounts := make([]int64, len(batch))
	for i, w := range batch {
		amounts[i] = w.amount
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.Timeout)
	defer cancel()
	results, err := c.store.DecrementInOrder(ctx, key, amounts)
	if err == nil && len(results) != len(batch) {
		err = fmt.Errorf("%w: decrement %s in order: %d results for %d amounts", ErrUncertain, short.Quote(key), len(results), len(batch))
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
