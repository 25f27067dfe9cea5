// Command inventory is the migration guide from a lock around a stock check
// to a conditional decrement (package atomic): 15 buyers, 10 units, and one
// buyer that pauses past its lease. See README.md.
//
//	go run ./examples/inventory [-postgres URL|memory] [-mode lock|alternative|both] [-pause=false]
package main

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/lockfree-go/lockfree/atomic"
	"github.com/lockfree-go/lockfree/examples/internal/demo"
	"github.com/lockfree-go/lockfree/fencedlock"
)

//go:embed schema.sql
var schemaSQL string

const (
	sku    = "sku-1"
	stock  = 10              // units on the shelf
	buyers = 15              // each buys one unit
	ttl    = 1 * time.Second // the lock's lease
)

// config is what the program runs with. With Pause, the first buyer stops
// between its read and its write until its lease has expired and every
// other buyer has finished.
type config = demo.Config

func main() { demo.Main("inventory", "pause the first buyer past its lease", run) }

// run sells the stock once per approach the mode selects and prints one
// line per approach.
func run(ctx context.Context, cfg config, w io.Writer) error {
	lock, alt, err := demo.Modes(cfg.Mode)
	if err != nil {
		return err
	}
	if err := demo.Migrate(ctx, cfg.DB, schemaSQL, fencedlock.Migrations()); err != nil {
		return err
	}
	if lock {
		for _, fenced := range []bool{false, true} {
			s := newShelf(cfg.DB)
			locks, expire := demo.Locks(cfg.DB, "inventory/"+sku, ttl)
			buy, label := buyNaive, "lock (naive)"
			if fenced {
				buy, label = buyFenced, "lock (fenced)"
			}
			t, err := sale(ctx, cfg, shelfOps(s), expire, func(ctx context.Context, buyer int, paused func()) (bool, error) {
				return buy(ctx, locks, s, fmt.Sprintf("buyer-%d", buyer), paused)
			})
			if err != nil {
				return fmt.Errorf("%s: %w", label, err)
			}
			t.print(w, label)
		}
	}
	if alt {
		inv, s := newAtomicSetup(cfg.DB)
		t, err := sale(ctx, cfg, s, nil, func(ctx context.Context, _ int, paused func()) (bool, error) {
			return buyAtomic(ctx, inv, paused)
		})
		if err != nil {
			return fmt.Errorf("atomic: %w", err)
		}
		t.print(w, "atomic")
	}
	return nil
}

// wait polls a busy lock often: the example's holders are quick.
var wait = &fencedlock.WaitConfig{MaxDelay: 20 * time.Millisecond}

// --- Before: the lock-based code -------------------------------------------

// buyNaive is the code being replaced: a lease lock around read → check →
// write. It is correct while no holder outlives its lease. When one does,
// the next holder reads the same stock, and the late write puts back a
// count that others have already sold from.
func buyNaive(ctx context.Context, locks fencedlock.Store, s shelf, holder string, paused func()) (sold bool, err error) {
	lease, err := fencedlock.AcquireWait(ctx, locks, "inventory/"+sku, holder, ttl, wait)
	if err != nil {
		return false, err
	}
	defer func() { _ = locks.Release(context.WithoutCancel(ctx), lease) }() // ErrNotHeld once the lease has run out

	qty, err := s.read(ctx) // SELECT quantity FROM inventory WHERE sku = $1
	if err != nil || qty < 1 {
		return false, err
	}
	paused()                         // a GC pause, swap, a VM migration, SIGSTOP …
	return true, s.write(ctx, qty-1) // UPDATE inventory SET quantity = $2 WHERE sku = $1
}

// buyFenced is the same lock done right: the read stamps the row with the
// lease's fencing token and the write is accepted only if no later token
// has touched the row since, so a holder that outlived its lease is refused
// (fencedlock.ErrFenced) instead of overwriting.
func buyFenced(ctx context.Context, locks fencedlock.Store, s shelf, holder string, paused func()) (sold bool, err error) {
	lease, err := fencedlock.AcquireWait(ctx, locks, "inventory/"+sku, holder, ttl, wait)
	if err != nil {
		return false, err
	}
	defer func() { _ = locks.Release(context.WithoutCancel(ctx), lease) }()

	qty, err := s.fencedRead(ctx, lease.Token) // UPDATE … SET fencing_token = $t WHERE sku = $1 AND fencing_token <= $t RETURNING quantity
	if err != nil || qty < 1 {
		return false, err
	}
	paused()
	if err := s.fencedWrite(ctx, lease.Token, qty-1); err != nil { // … AND fencing_token <= $t
		return false, err
	}
	return true, nil
}

// --- After: one conditional statement ---------------------------------------

// buyAtomic is the replacement: the check and the decrement are one
// statement at the database,
//
//	UPDATE inventory SET quantity = quantity - 1 WHERE sku = $1 AND quantity >= 1
//
// so there is no gap between deciding and writing for a pause to fall into,
// and no lock.
func buyAtomic(ctx context.Context, inv atomic.Store, paused func()) (sold bool, err error) {
	paused() // the same pause, before the statement: it changes nothing
	_, err = inv.Decrement(ctx, sku, 1)
	if errors.Is(err, atomic.ErrInsufficient) {
		return false, nil // sold out: *atomic.InsufficientError carries the stock left
	}
	return err == nil, err
}

// --- The run ----------------------------------------------------------------

// tally counts the outcomes of one sale.
type tally struct {
	sold, refused, fenced int
	left                  int64
}

func (t tally) print(w io.Writer, label string) {
	switch {
	case t.sold > stock:
		fmt.Fprintf(w, "%s: sold %d of %d units — oversold by %d; the stock row says %d left\n",
			label, t.sold, stock, t.sold-stock, t.left)
	case t.fenced > 0:
		fmt.Fprintf(w, "%s: sold %d of %d units, %d refused (%d of them fenced off after its pause); %d left\n",
			label, t.sold, stock, t.refused+t.fenced, t.fenced, t.left)
	default:
		fmt.Fprintf(w, "%s: sold %d of %d units, %d refused; %d left\n", label, t.sold, stock, t.refused, t.left)
	}
}

// sale puts stock units on the shelf and lets buyers buy one each. Buyer 1
// starts first; with cfg.Pause it stops where buy calls paused until its
// lease has expired (expire, when the approach has a lease) and buyers
// 2–15, running concurrently, have all finished; then it wakes and
// completes its purchase.
func sale(ctx context.Context, cfg config, s stockOps, expire func(context.Context) error,
	buy func(ctx context.Context, buyer int, paused func()) (bool, error)) (tally, error) {
	if err := s.reset(ctx); err != nil {
		return tally{}, err
	}
	var (
		mu   sync.Mutex
		t    tally
		errs []error
	)
	record := func(sold bool, err error) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case errors.Is(err, fencedlock.ErrFenced):
			t.fenced++
		case err != nil:
			errs = append(errs, err)
		case sold:
			t.sold++
		default:
			t.refused++
		}
	}
	var sold1 bool
	err1, err := demo.WhilePaused(cfg.Pause, func(paused func()) (err error) {
		sold1, err = buy(ctx, 1, paused)
		return err
	}, func() error {
		if cfg.Pause && expire != nil {
			if err := expire(ctx); err != nil {
				return err
			}
		}
		var wg sync.WaitGroup
		for b := 2; b <= buyers; b++ {
			wg.Go(func() { record(buy(ctx, b, func() {})) })
		}
		wg.Wait()
		return nil
	})
	if err != nil {
		return tally{}, err
	}
	record(sold1, err1)
	if t.left, err = s.left(ctx); err != nil {
		return tally{}, err
	}
	return t, errors.Join(errs...)
}
