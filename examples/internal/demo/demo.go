// Package demo is what the example programs share around their own code:
// the command line, the lock service whose lease a paused holder outlives,
// the pause itself, and a row in memory with a fencing gate.
//
// Each example keeps in its main.go the lock-based code, its replacement
// and the run; everything here is set-up that would read the same in all
// of them.
package demo

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockfree-go/lockfree/clock"
	"github.com/lockfree-go/lockfree/examples/internal/backend"
	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/migrate"
)

// Config is what an example runs with.
type Config struct {
	// DB is the database; nil runs everything on the memory backends.
	DB *pgxpool.Pool
	// Mode is "lock" (the code being replaced), "alternative" (its
	// replacement) or "both".
	Mode string
	// Pause stops the first worker at its pause point until its lease has
	// run out and the others are done.
	Pause bool
}

// Main parses the command line (-postgres, -mode, -pause, and the flags the
// caller defined on flag.CommandLine before), opens the backend
// (backend.Open) and calls run with it, printing on standard output. An
// error exits with status 1, prefixed by name.
func Main(name, pauseUsage string, run func(ctx context.Context, cfg Config, w io.Writer) error) {
	pg := flag.String("postgres", os.Getenv("DATABASE_URL"), `PostgreSQL URL; "memory" for the memory backends; empty: a throwaway local PostgreSQL if its binaries exist, else memory`)
	mode := flag.String("mode", "both", "lock, alternative or both")
	pause := flag.Bool("pause", true, pauseUsage)
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := open(ctx, *pg, Config{Mode: *mode, Pause: *pause}, run); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		stop()
		os.Exit(1)
	}
}

func open(ctx context.Context, pg string, cfg Config, run func(context.Context, Config, io.Writer) error) error {
	b, err := backend.Open(ctx, pg, os.Stdout)
	if err != nil {
		return err
	}
	defer b.Close()
	cfg.DB = b.Pool
	return run(ctx, cfg, os.Stdout)
}

// Modes says which halves mode selects: the lock-based code, the
// alternative, or both. Any other mode is an error.
func Modes(mode string) (lock, alt bool, err error) {
	lock, alt = mode == "lock" || mode == "both", mode == "alternative" || mode == "both"
	if !lock && !alt {
		return false, false, fmt.Errorf("unknown -mode %q (want lock, alternative or both)", mode)
	}
	return lock, alt, nil
}

// Migrate applies the migration sets, then the example's schema, to db. The
// memory backends (db nil) need neither.
func Migrate(ctx context.Context, db *pgxpool.Pool, schema string, sets ...[]migrate.Migration) error {
	if db == nil {
		return nil
	}
	if err := migrate.Up(ctx, db, migrate.Names{}, sets...); err != nil {
		return err
	}
	if schema == "" {
		return nil
	}
	_, err := db.Exec(ctx, schema)
	return err
}

// Locks returns a fresh lock service for the lock-based code and expire,
// which returns once a paused holder's lease on name has run out. On the
// memory backend (db nil) the service's clock jumps past ttl; on PostgreSQL
// the database clock decides, so expire waits until name is free.
func Locks(db *pgxpool.Pool, name string, ttl time.Duration) (fencedlock.Store, func(context.Context) error) {
	if db == nil {
		c := &clock.Manual{}
		locks, err := fencedlock.NewMemory(&fencedlock.MemoryConfig{Clock: c})
		if err != nil {
			panic("demo: " + err.Error()) // a config with a clock is valid
		}
		return locks, func(context.Context) error { c.Advance(ttl); return nil }
	}
	locks, err := fencedlock.NewPostgres(db, nil)
	if err != nil {
		panic("demo: " + err.Error()) // a nil config is valid
	}
	return locks, func(ctx context.Context) error {
		for {
			_, held, err := locks.Holder(ctx, name)
			if err != nil || !held {
				return err
			}
			select {
			case <-ctx.Done():
				return context.Cause(ctx)
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
}

// WhilePaused runs first, and rest while first is stopped at its pause:
// first's first call of paused returns only once rest has returned. Without
// pause, paused returns at once and rest starts when first has returned.
// If first returns without reaching its pause, rest runs then. It returns
// both errors.
func WhilePaused(pause bool, first func(paused func()) error, rest func() error) (errFirst, errRest error) {
	isPaused, resume, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	var once sync.Once
	go func() {
		done <- first(func() {
			once.Do(func() {
				if pause {
					close(isPaused)
					<-resume
				}
			})
		})
	}()
	finished := false
	if pause {
		select {
		case <-isPaused:
		case errFirst = <-done: // ended without reaching its pause (e.g. an error)
			finished = true
		}
	} else {
		errFirst, finished = <-done, true
	}
	errRest = rest()
	close(resume)
	if !finished {
		errFirst = <-done
	}
	return errFirst, errRest
}

// Row is a table row in memory, as the lock-based code sees it on the
// memory backend: a value behind a mutex, with a fencedlock.Gate in the
// part of the token column. The zero Row holds T's zero value; a Row is
// safe for concurrent use.
type Row[T any] struct {
	mu   sync.Mutex
	v    T
	gate fencedlock.Gate
}

// Get returns the row's value.
func (r *Row[T]) Get() T {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.v
}

// Set replaces the row's value.
func (r *Row[T]) Set(v T) { r.Update(func(p *T) { *p = v }) }

// Update changes the row's value in place.
func (r *Row[T]) Update(fn func(*T)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	fn(&r.v)
}

// FencedGet is Get behind the gate: a token lower than the highest the
// gate has admitted gets a *fencedlock.FencedError.
func (r *Row[T]) FencedGet(token int64) (v T, err error) {
	err = r.gate.Do(token, func() error { v = r.Get(); return nil })
	return v, err
}

// FencedUpdate is Update behind the gate.
func (r *Row[T]) FencedUpdate(token int64, fn func(*T)) error {
	return r.gate.Do(token, func() error { r.Update(fn); return nil })
}

// Plural says how many: "1 edit", "2 edits"; many, if given, is the plural
// form ("retries").
func Plural(n int, one string, many ...string) string {
	switch {
	case n == 1:
		return "1 " + one
	case len(many) > 0:
		return fmt.Sprintf("%d %s", n, many[0])
	}
	return fmt.Sprintf("%d %ss", n, one)
}
