// Command from-redis is the migration guide from a handler guarded by a Redis
// lock (github.com/bsm/redislock), its data in PostgreSQL, to a conditional
// decrement (package atomic) that needs no lock: 15 buyers, 10 units, and one
// buyer that pauses past the lock's TTL. See README.md.
//
//	go run ./examples/from-redis [-postgres URL] [-redis host:port] [-mode lock|alternative|both] [-pause=false]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"time"

	"github.com/bsm/redislock"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	lfatomic "github.com/lockfree-go/lockfree/atomic"
	"github.com/lockfree-go/lockfree/examples/internal/backend"
	"github.com/lockfree-go/lockfree/internal/localredis"
)

const (
	sku    = "sku-1"
	stock  = 10              // units on the shelf
	buyers = 15              // each buys one unit
	ttl    = 1 * time.Second // the Redis lock's TTL
)

type config struct {
	// DB is the database the stock lives in; required.
	DB *pgxpool.Pool
	// Redis is the address of the Redis server of the lock, host:port or
	// redis://:password@host:port; empty skips the lock-based half.
	Redis string
	// Mode is "lock" (the code being replaced), "alternative" (the
	// conditional decrement) or "both".
	Mode string
	// Pause stops the first buyer between its read and its write until its
	// lock has expired in Redis and every other buyer has finished.
	Pause bool
}

func main() {
	pg := flag.String("postgres", os.Getenv("DATABASE_URL"), "PostgreSQL URL; empty: a throwaway local PostgreSQL")
	addr := flag.String("redis", os.Getenv("REDIS_ADDR"), "Redis host:port; empty: a throwaway local redis-server if installed")
	mode := flag.String("mode", "both", "lock, alternative or both")
	pause := flag.Bool("pause", true, "pause the first buyer past the lock's TTL")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := open(ctx, *pg, *addr, config{Mode: *mode, Pause: *pause}); err != nil {
		fmt.Fprintln(os.Stderr, "from-redis:", err)
		os.Exit(1)
	}
}

func open(ctx context.Context, pg, addr string, cfg config) error {
	b, err := backend.Open(ctx, pg, os.Stdout)
	if err != nil {
		return err
	}
	defer b.Close()
	if b.Pool == nil {
		return errors.New("the stock lives in PostgreSQL: give -postgres URL, or install PostgreSQL for a throwaway server")
	}
	var stopRedis func()
	cfg.DB = b.Pool
	cfg.Redis, stopRedis = localredis.Resolve(ctx, addr, os.Stdout)
	defer stopRedis()
	return run(ctx, cfg, os.Stdout)
}

// run sells the stock once per approach the mode selects and prints one
// line per approach.
func run(ctx context.Context, cfg config, w io.Writer) error {
	lock, alt := cfg.Mode == "lock" || cfg.Mode == "both", cfg.Mode == "alternative" || cfg.Mode == "both"
	if !lock && !alt {
		return fmt.Errorf("unknown -mode %q (want lock, alternative or both)", cfg.Mode)
	}
	if cfg.DB == nil {
		return errors.New("no database")
	}
	if _, err := cfg.DB.Exec(ctx, `CREATE TABLE IF NOT EXISTS inventory (sku text PRIMARY KEY, quantity bigint NOT NULL)`); err != nil {
		return err
	}
	if lock && cfg.Redis == "" {
		fmt.Fprintln(w, "redislock: skipped: no Redis (-redis host:port, or install redis-server)")
	} else if lock {
		e, err := localredis.Parse(cfg.Redis)
		if err != nil {
			return err
		}
		client := redis.NewClient(&redis.Options{Addr: e.Addr, Username: e.Username, Password: e.Password, DB: e.DB})
		defer client.Close()
		locker := redislock.New(client)
		var schema string
		if err := cfg.DB.QueryRow(ctx, `SELECT current_schema()`).Scan(&schema); err != nil {
			return err
		}
		key := schema + "/inventory/" + sku // this run's own lock
		t, err := sale(ctx, cfg, func(ctx context.Context, paused func()) (bool, error) {
			return buyLocked(ctx, locker, cfg.DB, key, paused)
		})
		if err != nil {
			return fmt.Errorf("redislock: %w", err)
		}
		t.print(w, "redislock")
	}
	if alt {
		inv, err := lfatomic.NewPostgres(cfg.DB, lfatomic.Table{Name: "inventory", Key: "sku", Value: "quantity"})
		if err != nil {
			return err
		}
		t, err := sale(ctx, cfg, func(ctx context.Context, paused func()) (bool, error) {
			return buyAtomic(ctx, inv, paused)
		})
		if err != nil {
			return fmt.Errorf("atomic: %w", err)
		}
		t.print(w, "atomic")
	}
	return nil
}

// --- Before: the handler under a Redis lock ----------------------------------

// buyLocked is the code being replaced, written as redislock's README teaches:
// Obtain with a TTL and a retry strategy, Release deferred, and the
// read → check → write in PostgreSQL in between. It is correct while no
// holder outlives its TTL. When one does, Redis lets the next buyer in, which
// reads the same stock, and the late write puts back a count that others
// have already sold from. The random value redislock keeps in the key
// protects the Release, not the UPDATE.
func buyLocked(ctx context.Context, locker *redislock.Client, db *pgxpool.Pool, key string, paused func()) (sold bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second) // how long to wait for the lock
	defer cancel()
	lock, err := locker.Obtain(ctx, key, ttl, &redislock.Options{RetryStrategy: redislock.LinearBackoff(16 * time.Millisecond)})
	if err != nil {
		return false, err
	}
	defer func() { _ = lock.Release(ctx) }() // ErrLockNotHeld once the TTL has run out

	var qty int64
	if err := db.QueryRow(ctx, `SELECT quantity FROM inventory WHERE sku = $1`, sku).Scan(&qty); err != nil || qty < 1 {
		return false, err
	}
	paused() // a GC pause, swap, a VM migration, SIGSTOP …
	_, err = db.Exec(ctx, `UPDATE inventory SET quantity = $2 WHERE sku = $1`, sku, qty-1)
	return err == nil, err
}

// --- After: one conditional statement, no Redis -------------------------------

// buyAtomic is the replacement: the check and the decrement are one
// statement at the database,
//
//	UPDATE inventory SET quantity = quantity - 1 WHERE sku = $1 AND quantity >= 1
//
// so there is no gap between deciding and writing for a pause to fall into,
// and nothing to lock.
func buyAtomic(ctx context.Context, inv *lfatomic.Postgres, paused func()) (sold bool, err error) {
	paused() // the same pause, before the statement: it changes nothing
	_, err = inv.Decrement(ctx, sku, 1)
	if errors.Is(err, lfatomic.ErrInsufficient) {
		return false, nil // sold out
	}
	return err == nil, err
}

// --- The sale ------------------------------------------------------------------

// tally is what the buyers were told, and what the stock row says after.
type tally struct{ sold, refused, left int64 }

func (t tally) print(w io.Writer, label string) {
	if t.sold > stock {
		fmt.Fprintf(w, "%s: sold %d of %d units — oversold by %d; the stock row says %d left\n", label, t.sold, stock, t.sold-stock, t.left)
		return
	}
	fmt.Fprintf(w, "%s: sold %d of %d units, %d refused; %d left\n", label, t.sold, stock, t.refused, t.left)
}

// sale puts stock units on the shelf and lets every buyer buy one. With
// cfg.Pause, buyer 0 runs first and stops at its pause point; the others run
// once it is stopped, and it goes on once they have all finished — by then
// its Redis lock has expired, or the others could not have bought.
func sale(ctx context.Context, cfg config, buy func(ctx context.Context, paused func()) (bool, error)) (tally, error) {
	if _, err := cfg.DB.Exec(ctx, `INSERT INTO inventory (sku, quantity) VALUES ($1, $2)
		ON CONFLICT (sku) DO UPDATE SET quantity = $2`, sku, stock); err != nil {
		return tally{}, err
	}
	stopped, resume := make(chan struct{}), make(chan struct{})
	var once sync.Once
	pause := func() {
		once.Do(func() { close(stopped) })
		<-resume
	}
	var mu sync.Mutex
	var t tally
	var errs []error
	record := func(sold bool, err error) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case err != nil:
			errs = append(errs, err)
		case sold:
			t.sold++
		default:
			t.refused++
		}
	}
	first := make(chan struct{})
	go func() {
		defer close(first)
		p := func() {}
		if cfg.Pause {
			p = pause
		}
		record(buy(ctx, p))
	}()
	if cfg.Pause {
		<-stopped
	} else {
		<-first
	}
	var wg sync.WaitGroup
	for range buyers - 1 {
		wg.Go(func() { record(buy(ctx, func() {})) })
	}
	wg.Wait()
	close(resume)
	<-first
	if err := errors.Join(errs...); err != nil {
		return t, err
	}
	err := cfg.DB.QueryRow(ctx, `SELECT quantity FROM inventory WHERE sku = $1`, sku).Scan(&t.left)
	return t, err
}
