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
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockfree-go/lockfree/atomic"
	"github.com/lockfree-go/lockfree/clock"
	"github.com/lockfree-go/lockfree/examples/internal/backend"
	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/migrate"
)

//go:embed schema.sql
var schemaSQL string

const (
	sku    = "sku-1"
	stock  = 10              // units on the shelf
	buyers = 15              // each buys one unit
	ttl    = 1 * time.Second // the lock's lease
)

type config struct {
	// DB is the database; nil runs everything on the memory backends.
	DB *pgxpool.Pool
	// Mode is "lock" (the code being replaced), "alternative" (the
	// conditional decrement) or "both".
	Mode string
	// Pause stops the first buyer between its read and its write until its
	// lease has expired and every other buyer has finished.
	Pause bool
}

func main() {
	pg := flag.String("postgres", os.Getenv("DATABASE_URL"), `PostgreSQL URL; "memory" for the memory backends; empty: a throwaway local PostgreSQL if its binaries exist, else memory`)
	mode := flag.String("mode", "both", "lock, alternative or both")
	pause := flag.Bool("pause", true, "pause the first buyer past its lease")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := open(ctx, *pg, config{Mode: *mode, Pause: *pause}); err != nil {
		fmt.Fprintln(os.Stderr, "inventory:", err)
		os.Exit(1)
	}
}

func open(ctx context.Context, pg string, cfg config) error {
	b, err := backend.Open(ctx, pg, os.Stdout)
	if err != nil {
		return err
	}
	defer b.Close()
	cfg.DB = b.Pool
	return run(ctx, cfg, os.Stdout)
}

// run sells the stock once per approach the mode selects and prints one
// line per approach.
func run(ctx context.Context, cfg config, w io.Writer) error {
	lock, alt := cfg.Mode == "lock" || cfg.Mode == "both", cfg.Mode == "alternative" || cfg.Mode == "both"
	if !lock && !alt {
		return fmt.Errorf("unknown -mode %q (want lock, alternative or both)", cfg.Mode)
	}
	if cfg.DB != nil {
		if err := migrate.Up(ctx, cfg.DB, migrate.Names{}, fencedlock.Migrations()); err != nil {
			return err
		}
		if _, err := cfg.DB.Exec(ctx, schemaSQL); err != nil {
			return err
		}
	}
	if lock {
		for _, fenced := range []bool{false, true} {
			s, locks, expire := newLockSetup(cfg.DB)
			buy := buyNaive
			label := "lock (naive)"
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
		t, err := sale(ctx, cfg, s, func(context.Context) error { return nil }, func(ctx context.Context, _ int, paused func()) (bool, error) {
			return buyAtomic(ctx, inv, paused)
		})
		if err != nil {
			return fmt.Errorf("atomic: %w", err)
		}
		t.print(w, "atomic")
	}
	return nil
}

// --- Before: the lock-based code -------------------------------------------

// buyNaive is the code being replaced: a lease lock around read → check →
// write. It is correct while no holder outlives its lease. When one does,
// the next holder reads the same stock, and the late write puts back a
// count that others have already sold from.
func buyNaive(ctx context.Context, locks fencedlock.Store, s shelf, holder string, paused func()) (sold bool, err error) {
	lease, err := fencedlock.AcquireWait(ctx, locks, "inventory/"+sku, holder, ttl, waitConfig(locks))
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
	lease, err := fencedlock.AcquireWait(ctx, locks, "inventory/"+sku, holder, ttl, waitConfig(locks))
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

// --- The shelf: where the stock lives ---------------------------------------

// shelf is the stock of sku as the lock-based code sees it: the inventory
// table, or a variable when running on the memory backend.
type shelf interface {
	reset(ctx context.Context, qty int64) error
	read(ctx context.Context) (int64, error)
	write(ctx context.Context, qty int64) error
	fencedRead(ctx context.Context, token int64) (int64, error)
	fencedWrite(ctx context.Context, token, qty int64) error
}

// pgShelf is the inventory table.
type pgShelf struct{ db *pgxpool.Pool }

// fence makes the inventory table's reads and writes fenced by token.
var fence = fencedlock.Fence{Table: "inventory", Key: "sku", TokenColumn: "fencing_token"}

func (s pgShelf) reset(ctx context.Context, qty int64) error {
	_, err := s.db.Exec(ctx, `INSERT INTO inventory (sku, quantity) VALUES ($1, $2)
		ON CONFLICT (sku) DO UPDATE SET quantity = $2, fencing_token = 0`, sku, qty)
	return err
}

func (s pgShelf) read(ctx context.Context) (qty int64, err error) {
	err = s.db.QueryRow(ctx, `SELECT quantity FROM inventory WHERE sku = $1`, sku).Scan(&qty)
	return qty, err
}

func (s pgShelf) write(ctx context.Context, qty int64) error {
	_, err := s.db.Exec(ctx, `UPDATE inventory SET quantity = $2 WHERE sku = $1`, sku, qty)
	return err
}

func (s pgShelf) fencedRead(ctx context.Context, token int64) (qty int64, err error) {
	err = fence.Read(ctx, s.db, sku, token, "quantity", &qty)
	return qty, err
}

func (s pgShelf) fencedWrite(ctx context.Context, token, qty int64) error {
	return fence.Update(ctx, s.db, sku, token, "quantity = $1", qty)
}

// memShelf is the stock in memory; its Gate plays the part of the token
// column.
type memShelf struct {
	mu   sync.Mutex
	qty  int64
	gate fencedlock.Gate
}

func (s *memShelf) reset(_ context.Context, qty int64) error {
	s.mu.Lock()
	s.qty = qty
	s.mu.Unlock()
	return nil
}

func (s *memShelf) read(context.Context) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.qty, nil
}

func (s *memShelf) write(_ context.Context, qty int64) error {
	s.mu.Lock()
	s.qty = qty
	s.mu.Unlock()
	return nil
}

func (s *memShelf) fencedRead(ctx context.Context, token int64) (qty int64, err error) {
	err = s.gate.Do(token, func() error { qty, err = s.read(ctx); return err })
	return qty, err
}

func (s *memShelf) fencedWrite(ctx context.Context, token, qty int64) error {
	return s.gate.Do(token, func() error { return s.write(ctx, qty) })
}

// --- Setup and the scenario ---------------------------------------------------

// newLockSetup returns the shelf, the lock service and the function that
// makes the paused buyer's lease expire: on the memory backend the lock
// service's clock jumps past the lease; on PostgreSQL the database clock
// decides, so it waits for the lease to run out.
func newLockSetup(db *pgxpool.Pool) (shelf, fencedlock.Store, func(context.Context) error) {
	if db == nil {
		c := &clock.Manual{}
		locks, _ := fencedlock.NewMemory(&fencedlock.MemoryConfig{Clock: c}) // a config with a clock is valid
		return &memShelf{}, locks, func(context.Context) error { c.Advance(ttl); return nil }
	}
	locks, err := fencedlock.NewPostgres(db, nil)
	if err != nil {
		panic(err) // a nil config is valid
	}
	return pgShelf{db}, locks, func(ctx context.Context) error {
		for {
			_, held, err := locks.Holder(ctx, "inventory/"+sku)
			if err != nil || !held {
				return err
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// newAtomicSetup returns the conditional-decrement store and the functions
// that put the stock on it and read what is left.
func newAtomicSetup(db *pgxpool.Pool) (atomic.Store, stockOps) {
	if db == nil {
		inv, err := atomic.NewMemory(nil) // the default floor, 0: never below zero
		if err != nil {
			panic(err) // a nil config is valid
		}
		return inv, stockOps{
			reset: func(ctx context.Context) error { return inv.Claim(ctx, sku, stock) },
			left:  func(ctx context.Context) (int64, error) { return inv.Value(ctx, sku) },
		}
	}
	inv, err := atomic.NewPostgres(db, atomic.Table{Name: "inventory", Key: "sku", Value: "quantity"})
	if err != nil {
		panic(err) // the table config is a constant
	}
	return inv, stockOps{
		reset: func(ctx context.Context) error { return pgShelf{db}.reset(ctx, stock) },
		left:  func(ctx context.Context) (int64, error) { return inv.Value(ctx, sku) },
	}
}

// stockOps puts the stock on the shelf before a sale and reads what is left
// after it.
type stockOps struct {
	reset func(context.Context) error
	left  func(context.Context) (int64, error)
}

func shelfOps(s shelf) stockOps {
	return stockOps{reset: func(ctx context.Context) error { return s.reset(ctx, stock) }, left: s.read}
}

func waitConfig(locks fencedlock.Store) *fencedlock.WaitConfig {
	cfg := &fencedlock.WaitConfig{MaxDelay: 20 * time.Millisecond}
	if w, ok := locks.(fencedlock.Wakeups); ok {
		cfg.Wakeups = w // the memory lock service wakes waiters on release
	}
	return cfg
}

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
// lease has expired (expire) and buyers 2–15, running concurrently, have
// all finished; then it wakes and completes its purchase.
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

	isPaused, resume := make(chan struct{}), make(chan struct{})
	first := make(chan struct{})
	go func() {
		defer close(first)
		record(buy(ctx, 1, func() {
			if cfg.Pause {
				close(isPaused)
				<-resume
			}
		}))
	}()
	if cfg.Pause {
		select {
		case <-isPaused:
		case <-first: // finished without reaching its pause (e.g. an error)
		}
		if err := expire(ctx); err != nil {
			return tally{}, err
		}
	} else {
		<-first
	}

	var wg sync.WaitGroup
	for b := 2; b <= buyers; b++ {
		wg.Go(func() { record(buy(ctx, b, func() {})) })
	}
	wg.Wait()
	close(resume)
	<-first

	left, err := s.left(ctx)
	if err != nil {
		return tally{}, err
	}
	t.left = left
	return t, errors.Join(errs...)
}
