package atomic_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockfree-go/lockfree/atomic"
	"github.com/lockfree-go/lockfree/clock"
	"github.com/lockfree-go/lockfree/internal/opid"
	"github.com/lockfree-go/lockfree/internal/testdb"
)

// The guards of operation IDs: each check is the body of a test that
// guards one condition, on the memory and PostgreSQL backends (guards()
// adds them to the package's list).

// idStore is a store that records IDs, with what a check needs: its clock
// advanced past Retention (Memory; nil for PostgreSQL, on the database's
// clock) and the Retention it was built with.
type idStore struct {
	atomic.Recorder
	clock     *clock.Manual
	retention time.Duration
	db        *testdb.DB // PostgreSQL only
}

const guardRetention = 2 * time.Second

var idKinds = map[string]func(t *testing.T) idStore{
	"memory": func(t *testing.T) idStore {
		c := clock.NewManual(time.Now())
		m, err := atomic.NewMemory(&atomic.MemoryConfig{Clock: c, Retention: guardRetention})
		if err != nil {
			t.Fatal(err)
		}
		return idStore{Recorder: m, clock: c, retention: guardRetention}
	},
	"postgres": func(t *testing.T) idStore {
		db := newTable(t)
		table := inventory
		table.Retention = guardRetention
		return idStore{Recorder: newPostgres(t, db.Pool, table), retention: guardRetention, db: db}
	},
}

func newID(t testing.TB) uuid.UUID {
	t.Helper()
	id, err := uuid.NewV7()
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// mintedAt returns an ID the store's clock finds age old: an ID minted
// age ago.
func (s idStore) mintedAt(age time.Duration) uuid.UUID {
	now := time.Now()
	if s.clock != nil {
		now = s.clock.Now()
	}
	return opid.At(now.Add(-age))
}

func idGuards() []guard {
	var gs []guard
	for _, c := range []struct {
		mutant string
		check  func(t *testing.T, s idStore) error
	}{
		{"atomic.id.replay", checkRetryAppliesOnce},
		{"atomic.id.fingerprint", checkIDReused},
		{"atomic.id.expired", checkExpiredID},
		{"atomic.resolve.abandon", checkResolveAbandons},
		{"atomic.purge.expired", checkPurgeKeepsLive},
	} {
		for _, kind := range []string{"memory", "postgres"} {
			gs = append(gs, guard{c.mutant + "/" + kind, func(t *testing.T) error { return c.check(t, idKinds[kind](t)) }})
		}
	}
	gs = append(gs, guard{"atomic.id.scope/postgres", checkIDScoped})
	// Retries of one ID at once, each past the read of the ID's record
	// before the first commits: only the primary key keeps the second
	// from applying.
	gs = append(gs, guard{"atomic.id.replay/postgres-concurrent", func(t *testing.T) error {
		return checkConcurrentRetries(t, newTable(t), atomic.OpDecrement)
	}}, guard{"atomic.id.replay/postgres-concurrent-batch", func(t *testing.T) error {
		return checkConcurrentRetries(t, newTable(t), atomic.OpDecrementMany)
	}})
	// The conditions of the operations themselves, on the statements of
	// operations with an ID: every call of the check carries a new ID.
	for _, c := range []struct {
		mutant string
		check  func(t *testing.T, s atomic.Store) error
	}{
		{"atomic.decrement.floor", checkFloor},
		{"atomic.increment.cap", checkCap},
		{"atomic.cas.compare", checkCompareAndSet},
		{"atomic.setifgreater.compare", checkSetIfGreater},
		{"atomic.claim.conflict", checkClaimOnce},
		{"atomic.decrementmany.all", checkBatchAllOrNothing},
	} {
		for _, kind := range []string{"memory", "postgres"} {
			gs = append(gs, guard{c.mutant + "/" + kind + "-id", func(t *testing.T) error {
				return c.check(t, freshIDs{idKinds[kind](t).Recorder, t})
			}})
		}
	}
	return gs
}

// freshIDs gives every operation of its store a new ID.
type freshIDs struct {
	atomic.Store
	t *testing.T
}

func (f freshIDs) id(opts []atomic.Option) []atomic.Option {
	return append(opts, atomic.WithID(newID(f.t)))
}

func (f freshIDs) Decrement(ctx context.Context, key string, amount int64, opts ...atomic.Option) (int64, error) {
	return f.Store.Decrement(ctx, key, amount, f.id(opts)...)
}

func (f freshIDs) Increment(ctx context.Context, key string, amount, limit int64, opts ...atomic.Option) (int64, error) {
	return f.Store.Increment(ctx, key, amount, limit, f.id(opts)...)
}

func (f freshIDs) CompareAndSet(ctx context.Context, key string, old, next int64, opts ...atomic.Option) error {
	return f.Store.CompareAndSet(ctx, key, old, next, f.id(opts)...)
}

func (f freshIDs) SetIfGreater(ctx context.Context, key string, value int64, opts ...atomic.Option) error {
	return f.Store.SetIfGreater(ctx, key, value, f.id(opts)...)
}

func (f freshIDs) Claim(ctx context.Context, key string, value int64, opts ...atomic.Option) error {
	return f.Store.Claim(ctx, key, value, f.id(opts)...)
}

func (f freshIDs) DecrementMany(ctx context.Context, amounts map[string]int64, opts ...atomic.Option) (map[string]int64, error) {
	return f.Store.DecrementMany(ctx, amounts, f.id(opts)...)
}

// checkRetryAppliesOnce guards the replay: a retry with a recorded ID
// returns the recorded outcome and applies nothing.
func checkRetryAppliesOnce(t *testing.T, s idStore) error {
	claim(t, s, "k", 10)
	id := newID(t)
	var answers []string
	for range 2 {
		left, err := s.Decrement(ctx, "k", 3, atomic.WithID(id))
		answers = append(answers, fmt.Sprint(left, err))
	}
	v, err := s.Value(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if v != 7 || answers[1] != answers[0] {
		return fmt.Errorf("two calls of Decrement 3 with one ID from 10 left %d and answered %v, want 7 and the same answer", v, answers)
	}
	return nil
}

// checkIDReused guards the fingerprint: the ID of one decrement presented
// with another amount is refused, and nothing is written.
func checkIDReused(t *testing.T, s idStore) error {
	claim(t, s, "k", 10)
	id := newID(t)
	if _, err := s.Decrement(ctx, "k", 1, atomic.WithID(id)); err != nil {
		t.Fatal(err)
	}
	left, err := s.Decrement(ctx, "k", 5, atomic.WithID(id))
	v, verr := s.Value(ctx, "k")
	switch {
	case verr != nil:
		t.Fatal(verr)
	case !errors.Is(err, atomic.ErrIDReused) || v != 9:
		return fmt.Errorf("the ID of Decrement 1 reused for Decrement 5: %d, %v, value %d; want ErrIDReused and 9", left, err, v)
	}
	return nil
}

// checkExpiredID guards the age of IDs: an ID older than Retention is
// refused, by operations and by Resolve, and applies nothing — so that an
// ID whose record was purged cannot apply again.
func checkExpiredID(t *testing.T, s idStore) error {
	claim(t, s, "k", 10)
	old := s.mintedAt(s.retention + time.Minute)
	left, err := s.Decrement(ctx, "k", 1, atomic.WithID(old))
	v, verr := s.Value(ctx, "k")
	switch {
	case verr != nil:
		t.Fatal(verr)
	case !errors.Is(err, atomic.ErrExpired) || v != 10:
		return fmt.Errorf("Decrement with an expired ID: %d, %v, value %d; want ErrExpired and 10", left, err, v)
	}
	if out, err := s.Resolve(ctx, old); !errors.Is(err, atomic.ErrExpired) {
		return fmt.Errorf("Resolve of an expired ID: %+v, %v; want ErrExpired", out, err)
	}
	return nil
}

// checkResolveAbandons guards Resolve's record: an ID that Resolve found
// unrecorded never applies afterwards.
func checkResolveAbandons(t *testing.T, s idStore) error {
	claim(t, s, "k", 10)
	id := newID(t)
	out, err := s.Resolve(ctx, id)
	if err != nil || !errors.Is(out.Err, atomic.ErrAbandoned) {
		t.Fatalf("Resolve of an unknown ID: %+v, %v", out, err)
	}
	left, err := s.Decrement(ctx, "k", 1, atomic.WithID(id))
	v, verr := s.Value(ctx, "k")
	switch {
	case verr != nil:
		t.Fatal(verr)
	case !errors.Is(err, atomic.ErrAbandoned) || v != 10:
		return fmt.Errorf("Decrement after Resolve answered abandoned: %d, %v, value %d; want ErrAbandoned and 10", left, err, v)
	}
	return nil
}

// checkPurgeKeepsLive guards Purge: it deletes no record of a live ID, so
// that a retry after it still replays.
func checkPurgeKeepsLive(t *testing.T, s idStore) error {
	claim(t, s, "k", 10)
	id := newID(t)
	if _, err := s.Decrement(ctx, "k", 1, atomic.WithID(id)); err != nil {
		t.Fatal(err)
	}
	n, err := s.Purge(ctx, 100)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Decrement(ctx, "k", 1, atomic.WithID(id)); err != nil {
		t.Fatal(err)
	}
	if v, err := s.Value(ctx, "k"); err != nil || v != 9 {
		return fmt.Errorf("a retry after Purge (which deleted %d records) left %d, %v; want 9", n, v, err)
	}
	return nil
}

// checkConcurrentRetries starts retries of one operation ID that all read
// the ID's record (none) before any of them commits: a transaction holds
// the key's row, so that each waits for its lock past that read; then the
// row is released. The operation must apply once, and every retry answer
// its outcome.
func checkConcurrentRetries(t *testing.T, db *testdb.DB, op string) error {
	const retries = 4
	store := newPostgres(t, db.Pool, inventory)
	claim(t, store, "k", 100)
	hold, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Rollback(ctx)
	if _, err := hold.Exec(ctx, `SELECT 1 FROM "Inventory ""stock""" WHERE sku = 'k' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	app := "r" + strings.ReplaceAll(db.Schema, "_", "")
	pool, err := pgxpool.New(ctx, db.URL+"&application_name="+app)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	retry := store.WithDB(pool)
	id := newID(t)
	answers := make([]string, retries)
	var wg sync.WaitGroup
	for i := range retries {
		wg.Go(func() {
			if op == atomic.OpDecrementMany {
				left, err := retry.DecrementMany(ctx, map[string]int64{"k": 1}, atomic.WithID(id))
				answers[i] = fmt.Sprint(left, err)
				return
			}
			left, err := retry.Decrement(ctx, "k", 1, atomic.WithID(id))
			answers[i] = fmt.Sprint(left, err)
		})
	}
	waitFor(t, 30*time.Second, func() bool {
		var n int
		err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND application_name = $1`, app).Scan(&n)
		return err == nil && n == retries
	})
	if err := hold.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	v, err := store.Value(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range answers[1:] {
		if a != answers[0] {
			return fmt.Errorf("%d retries of one %s at once answered %v: not one outcome", retries, op, answers)
		}
	}
	if v != 99 {
		return fmt.Errorf("%d retries of one %s of 1 at once took 100 to %d, want 99 (answers %v)", retries, op, v, answers)
	}
	return nil
}
