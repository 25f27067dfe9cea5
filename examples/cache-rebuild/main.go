// Command cache-rebuild is the counter-example: a lock that only saves work
// (efficiency) and is fine as it is. Eight requests find the cached report
// stale; the lock lets one of them rebuild it while the others serve the
// stale copy. A holder that pauses past its lease causes a second rebuild —
// wasted work, not a wrong result. See README.md.
//
//	go run ./examples/cache-rebuild [-postgres URL|memory] [-mode lock|alternative|both] [-pause=false]
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/lockfree-go/lockfree/examples/internal/demo"
	"github.com/lockfree-go/lockfree/fencedlock"
)

const (
	lockName = "cache/daily-report"
	requests = 8               // requests that find the cache stale at once
	ttl      = 1 * time.Second // the lock's lease
)

// config is what the program runs with. DB holds the lock; nil uses the
// memory lock service. The cache and its source stay in memory either way.
// Mode "alternative" is no lock at all, for comparison. Pause stops the
// first rebuilder before it rebuilds, until its lease has expired and the
// other requests have been served.
type config = demo.Config

func main() { demo.Main("cache-rebuild", "pause the first rebuilder past its lease", run) }

// run serves the requests once per approach the mode selects and prints one
// line per approach.
func run(ctx context.Context, cfg config, w io.Writer) error {
	lock, alt, err := demo.Modes(cfg.Mode)
	if err != nil {
		return err
	}
	if err := demo.Migrate(ctx, cfg.DB, "", fencedlock.Migrations()); err != nil {
		return err
	}
	if lock {
		locks, expire := demo.Locks(cfg.DB, lockName, ttl)
		t, err := burst(ctx, cfg, expire, func(ctx context.Context, c *cache, req int, paused func()) (bool, error) {
			return serveWithLock(ctx, locks, c, fmt.Sprintf("request-%d", req), paused)
		})
		if err != nil {
			return fmt.Errorf("lock: %w", err)
		}
		t.print(w, "lock")
	}
	if alt {
		t, err := burst(ctx, cfg, nil, func(ctx context.Context, c *cache, _ int, paused func()) (bool, error) {
			return serveWithoutLock(ctx, c, paused)
		})
		if err != nil {
			return fmt.Errorf("no lock: %w", err)
		}
		t.print(w, "no lock")
	}
	return nil
}

// --- The code, which stays ----------------------------------------------------

// serveWithLock serves the report. When the cached copy is stale, the
// request that gets the lock rebuilds it; the others do not wait — they
// serve the stale copy. No fencing token, and no renewal: if two requests
// ever rebuild at once, both compute the same report from the source and
// write it whole, so the worst case is the work the lock was meant to save.
// The rebuild runs on the request's context, not the lease's: outliving the
// lease is harmless here.
func serveWithLock(ctx context.Context, locks fencedlock.Store, c *cache, holder string, paused func()) (rebuilt bool, err error) {
	if c.fresh() {
		return false, nil
	}
	locker, err := fencedlock.NewLocker(locks, &fencedlock.LockerConfig{Holder: holder, TTL: ttl,
		Keepalive: &fencedlock.KeepaliveConfig{NoRenew: true}})
	if err != nil {
		return false, err
	}
	err = locker.TryDo(ctx, lockName, func(context.Context, fencedlock.Lease) error {
		c.arrived()
		if c.fresh() { // rebuilt while we were asking for the lock
			return nil
		}
		paused() // a GC pause, swap, a VM migration, SIGSTOP …
		rebuilt = true
		return c.rebuild(ctx)
	}) // the release after a lease that ran out finds nothing to free: not an error
	if errors.Is(err, fencedlock.ErrHeld) {
		c.arrived()
		return false, nil // someone is rebuilding: serve the stale copy
	}
	return rebuilt, err
}

// serveWithoutLock is the comparison: every request that finds the cache
// stale rebuilds it. Still correct; just wasteful.
func serveWithoutLock(ctx context.Context, c *cache, paused func()) (rebuilt bool, err error) {
	if c.fresh() {
		return false, nil
	}
	c.arrived()
	paused()
	return true, c.rebuild(ctx)
}

// --- The cache and its source ---------------------------------------------------

// cache is the shared cache (a Redis key, a table row) of a report computed
// from the source of truth.
type cache struct {
	mu       sync.Mutex
	source   []int64 // the source of truth: today's orders
	report   int64   // the cached report: their total
	isFresh  bool
	rebuilds int

	// looked counts the requests that have looked at the lock; a rebuild
	// takes until all of them have, as a real one takes longer than a burst
	// of requests takes to arrive.
	looked  int
	allSeen chan struct{}
}

func newCache() *cache {
	return &cache{source: []int64{120, 80, 45, 300, 15}, report: 0, allSeen: make(chan struct{})}
}

func (c *cache) fresh() bool { c.mu.Lock(); defer c.mu.Unlock(); return c.isFresh }

func (c *cache) arrived() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.looked++
	if c.looked == requests {
		close(c.allSeen)
	}
}

// rebuild computes the report from the source and stores it whole.
func (c *cache) rebuild(ctx context.Context) error {
	select {
	case <-c.allSeen:
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var total int64
	for _, v := range c.source {
		total += v
	}
	c.report, c.isFresh = total, true
	c.rebuilds++
	return nil
}

func (c *cache) correct() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	var total int64
	for _, v := range c.source {
		total += v
	}
	return c.isFresh && c.report == total
}

// --- The run -----------------------------------------------------------------

type tally struct {
	rebuilds, stale int
	correct         bool
}

func (t tally) print(w io.Writer, label string) {
	fmt.Fprintf(w, "%s: %d requests found the cache stale, %d rebuilt it", label, requests, t.rebuilds)
	switch {
	case t.rebuilds > 1 && label == "lock":
		fmt.Fprintf(w, " (%d wasted: a holder outlived its lease)", t.rebuilds-1)
	case t.rebuilds > 1:
		fmt.Fprintf(w, " (%d wasted)", t.rebuilds-1)
	}
	fmt.Fprintf(w, ", %d served the stale copy; ", t.stale)
	if t.correct {
		fmt.Fprintln(w, "the cache matches the source")
	} else {
		fmt.Fprintln(w, "the cache does NOT match the source")
	}
}

// burst empties the cache and serves the requests. Request 1 comes first
// and is still rebuilding (stopped where serve calls paused) while requests
// 2–8 arrive together and are served; with cfg.Pause its lease expires
// meanwhile (expire, when the approach has a lease). Then it wakes and
// finishes.
func burst(ctx context.Context, cfg config, expire func(context.Context) error,
	serve func(ctx context.Context, c *cache, req int, paused func()) (bool, error)) (tally, error) {
	c := newCache()
	var (
		mu   sync.Mutex
		t    tally
		errs []error
	)
	record := func(rebuilt bool, err error) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case err != nil:
			errs = append(errs, err)
		case rebuilt:
			t.rebuilds++
		default:
			t.stale++
		}
	}
	var rebuilt1 bool
	err1, err := demo.WhilePaused(true, func(paused func()) (err error) {
		rebuilt1, err = serve(ctx, c, 1, paused)
		return err
	}, func() error {
		if cfg.Pause && expire != nil {
			if err := expire(ctx); err != nil {
				return err
			}
		}
		var wg sync.WaitGroup
		for r := 2; r <= requests; r++ {
			wg.Go(func() { record(serve(ctx, c, r, func() {})) })
		}
		wg.Wait()
		return nil
	})
	if err != nil {
		return tally{}, err
	}
	record(rebuilt1, err1)
	t.correct = c.correct()
	return t, errors.Join(errs...)
}
