package main

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockfree-go/lockfree/cmd/lockfree/lockfreetest"
	"github.com/lockfree-go/lockfree/examples/internal/exampletest"
	"github.com/lockfree-go/lockfree/fencedlock"
	point "github.com/lockfree-go/lockfree/lockfreetest"
)

// initialStock is the stock a lockfreetest run starts with: more than four
// workers sell in a run, so "sold out" is never a right answer.
const initialStock = 1_000_000

// buyer is one purchase by the code under test, on worker w's pool; paused
// marks the point between its read and its write.
type buyer func(ctx context.Context, w *lockfreetest.Worker, holder string, paused func()) (bool, error)

// holders numbers the lock holders of this worker process.
var holders atomic.Int64

// inventoryTest runs buy on four workers, all on sku-1, under Pause: a
// worker stopped at buy's paused() past the lease, while another buys.
func inventoryTest(name string, buy buyer) lockfreetest.Test[struct{}, bool] {
	return lockfreetest.Test[struct{}, bool]{
		Name: name, Workers: 4, Keys: 1, Duration: 2 * time.Second, Lease: ttl,
		Faults: []lockfreetest.Fault{lockfreetest.Pause},
		Init: func(ctx context.Context, db *pgxpool.Pool, _ []string) error {
			if _, err := db.Exec(ctx, schemaSQL); err != nil {
				return err
			}
			return pgShelf{db}.reset(ctx, initialStock)
		},
		Op: func(ctx context.Context, w *lockfreetest.Worker, _ string, _ struct{}) (bool, error) {
			holder := fmt.Sprintf("worker-%d/%d", w.ID, holders.Add(1))
			return buy(ctx, w, holder, func() { point.Point(ctx, "before-write") })
		},
		Refusals: []error{fencedlock.ErrFenced},
		Check:    checkStock,
	}
}

// checkStock holds the stock row to the sales told: every sale told took a
// unit, an uncertain one may have, and nothing else did.
func checkStock(ctx context.Context, db *pgxpool.Pool, h lockfreetest.History[struct{}, bool]) error {
	var left int64
	if err := db.QueryRow(ctx, `SELECT quantity FROM inventory WHERE sku = $1`, sku).Scan(&left); err != nil {
		return err
	}
	var sold, unknown int64
	for _, op := range h {
		switch {
		case op.Outcome == lockfreetest.OK && op.Output:
			sold++
		case op.Outcome == lockfreetest.Unknown:
			unknown++
		}
	}
	var errs []error
	if sold > initialStock {
		errs = append(errs, fmt.Errorf("%d units told sold, of %d", sold, initialStock))
	}
	if left < 0 {
		errs = append(errs, fmt.Errorf("the stock row says %d left", left))
	}
	if most := initialStock - sold; left > most {
		errs = append(errs, fmt.Errorf("oversold by %d: %d units told sold of %d, and the stock row says %d left",
			left-most, sold, initialStock, left))
	}
	if least := initialStock - sold - unknown; left < least {
		errs = append(errs, fmt.Errorf("%d units gone untold: %d told sold, %d uncertain, of %d; the stock row says %d left",
			least-left, sold, unknown, initialStock, left))
	}
	return errors.Join(errs...)
}

// The three versions of the purchase under lockfreetest's Pause. The naive
// lock oversells: its paused buyer writes back a count others sold from.
// The fenced lock refuses that write, and the conditional decrement has no
// gap to pause in.
func TestInventoryUnderPause(t *testing.T) {
	cases := []struct {
		name string
		buy  buyer
		want exampletest.Want
	}{
		{"naive", func(ctx context.Context, w *lockfreetest.Worker, holder string, paused func()) (bool, error) {
			locks, err := fencedlock.NewPostgres(w.DB, nil)
			if err != nil {
				return false, err
			}
			return buyNaive(ctx, locks, pgShelf{w.DB}, holder, paused)
		}, exampletest.Violates},
		{"fenced", func(ctx context.Context, w *lockfreetest.Worker, holder string, paused func()) (bool, error) {
			locks, err := fencedlock.NewPostgres(w.DB, nil)
			if err != nil {
				return false, err
			}
			return buyFenced(ctx, locks, pgShelf{w.DB}, holder, paused)
		}, exampletest.Refuses},
		{"atomic", func(ctx context.Context, w *lockfreetest.Worker, _ string, paused func()) (bool, error) {
			inv, _ := newAtomicSetup(w.DB)
			return buyAtomic(ctx, inv, paused)
		}, exampletest.Holds},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			exampletest.Judge(t, c.name, c.want, lockfreetest.Run(t, inventoryTest(c.name, c.buy)))
		})
	}
}
