package fencedlock_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockfree-go/lockfree/clock"
	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/fencedlock/fencedlocktest"
	"github.com/lockfree-go/lockfree/internal/testdb"
	"github.com/lockfree-go/lockfree/migrate"
)

func TestMemoryStore(t *testing.T) {
	t.Parallel()
	fencedlocktest.Run(t, func(t *testing.T) fencedlocktest.Harness {
		c := &clock.Manual{}
		return fencedlocktest.Harness{Store: newMemory(t, c), TTL: time.Second, Advance: c.Advance}
	})
}

func TestPostgresStore(t *testing.T) {
	t.Parallel()
	db := testdb.New(t, fencedlock.Migrations()...)
	store := newPostgres(t, db, false)
	fencedlocktest.Run(t, func(t *testing.T) fencedlocktest.Harness {
		return fencedlocktest.Harness{Store: store, TTL: 300 * time.Millisecond, Advance: time.Sleep}
	})
}

// The suite again on a store with Notify: its waiters and watchers are
// woken through LISTEN/NOTIFY.
func TestPostgresStoreNotify(t *testing.T) {
	t.Parallel()
	db := testdb.New(t, fencedlock.Migrations()...)
	store := newPostgres(t, db, true)
	fencedlocktest.Run(t, func(t *testing.T) fencedlocktest.Harness {
		return fencedlocktest.Harness{Store: store, TTL: 300 * time.Millisecond, Advance: time.Sleep}
	})
}

func newMemory(t testing.TB, c clock.Clock) *fencedlock.Memory {
	t.Helper()
	m, err := fencedlock.NewMemory(&fencedlock.MemoryConfig{Clock: c})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func newPostgres(t testing.TB, db *testdb.DB, notify bool) *fencedlock.Postgres {
	t.Helper()
	s, err := fencedlock.NewPostgres(db.Pool, &fencedlock.PostgresConfig{Notify: notify})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// A nil connection or a table name that is not a plain identifier is refused
// before anything runs: a quote in the prefix would otherwise end the string
// literal of the NOTIFY channel, and a nil pool panic at the first release.
func TestPostgresRejectsBadConfig(t *testing.T) {
	t.Parallel()
	if _, err := fencedlock.NewPostgres(nil, nil); !errors.Is(err, fencedlock.ErrInvalid) {
		t.Errorf("NewPostgres(nil) = %v, want ErrInvalid", err)
	}
	pool, err := pgxpool.New(ctx, "postgres://unused@127.0.0.1:1/unused") // never dialled
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	for _, tables := range []migrate.Names{
		{Prefix: "x'"},
		{Prefix: "x');--"},
		{Prefix: "x\x00"},
		{Schema: "app'"},
		{Schema: "app\x00"},
	} {
		_, err := fencedlock.NewPostgres(pool, &fencedlock.PostgresConfig{Tables: tables, Notify: true})
		if !errors.Is(err, fencedlock.ErrInvalid) || !errors.Is(err, migrate.ErrInvalidName) {
			t.Errorf("NewPostgres(%+q) = %v, want ErrInvalid and migrate.ErrInvalidName", tables, err)
		}
	}
}

// Purge forgets expired locks of the memory store; tokens keep increasing
// for a name whose entry was purged, as with the PostgreSQL sequence.
func TestMemoryPurge(t *testing.T) {
	t.Parallel()
	c := &clock.Manual{}
	store := newMemory(t, c)
	var tokens []int64
	for i := range 10 {
		l, err := store.Acquire(ctx, fmt.Sprintf("purged-%d", i), "a", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		tokens = append(tokens, l.Token)
	}
	held, err := store.Acquire(ctx, "held", "a", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Purge(ctx, -time.Second, 10); !errors.Is(err, fencedlock.ErrInvalid) {
		t.Fatalf("Purge with a negative age = %v, want ErrInvalid", err)
	}
	if _, err := store.Purge(ctx, 0, 0); !errors.Is(err, fencedlock.ErrInvalid) {
		t.Fatalf("Purge with no limit = %v, want ErrInvalid", err)
	}
	if n, err := store.Purge(ctx, 0, 100); err != nil || n != 0 {
		t.Fatalf("Purge before expiry = %d, %v; want 0", n, err)
	}
	c.Advance(2 * time.Second)
	if n, err := store.Purge(ctx, time.Minute, 100); err != nil || n != 0 {
		t.Fatalf("Purge of locks expired 1s ago, older than 1m = %d, %v; want 0", n, err)
	}
	if n, err := store.Purge(ctx, 0, 4); err != nil || n != 4 {
		t.Fatalf("Purge limit 4 = %d, %v", n, err)
	}
	if n, err := store.Purge(ctx, 0, 100); err != nil || n != 6 {
		t.Fatalf("Purge of the rest = %d, %v; want 6", n, err)
	}
	if _, ok, _ := store.Holder(ctx, "held"); !ok {
		t.Fatal("Purge forgot a held lock")
	}
	l, err := store.Acquire(ctx, "purged-9", "b", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if l.Token <= tokens[9] || l.Token <= held.Token {
		t.Fatalf("token %d after purge, earlier tokens %v and %d", l.Token, tokens, held.Token)
	}
}

// The lease Holder returns can be verified, as the Release doc promises.
func TestVerifyHolderLease(t *testing.T) {
	t.Parallel()
	db := testdb.New(t, fencedlock.Migrations()...)
	store := newPostgres(t, db, false)
	a, err := store.Acquire(ctx, "verified", "a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	cur, held, err := store.Holder(ctx, "verified")
	if err != nil || !held {
		t.Fatalf("Holder = %v, %v", held, err)
	}
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if err := store.Verify(ctx, tx, cur); err != nil {
		t.Fatalf("Verify of Holder's lease = %v", err)
	}
	stale := cur
	stale.Holder = "b"
	if err := store.Verify(ctx, tx, stale); !errors.Is(err, fencedlock.ErrNotHeld) || a.Token != cur.Token {
		t.Fatalf("Verify of another holder = %v", err)
	}
}

// Error messages quote names and holders shortened: a 255-byte name does not
// make a 600-byte error.
func TestErrorsShortenNames(t *testing.T) {
	t.Parallel()
	store := newMemory(t, nil)
	long, holder := strings.Repeat("n", fencedlock.MaxNameLen), strings.Repeat("h", fencedlock.MaxNameLen)
	a, err := store.Acquire(ctx, long, holder, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	_, held := store.Acquire(ctx, long, "b", time.Minute)
	stale := a
	stale.Token++
	for _, err := range []error{held, store.Release(ctx, stale)} {
		if err == nil || len(err.Error()) > 200 || !strings.Contains(err.Error(), "(255 bytes)") {
			t.Errorf("error of %d bytes, want the name shortened: %v", len(fmt.Sprint(err)), err)
		}
	}
}

// An install made before migration 2 upgrades in place: the index on the
// expiry goes, and tokens continue from the same sequence.
func TestUpgradeKeepsTokens(t *testing.T) {
	t.Parallel()
	db := testdb.New(t, migrationsUpTo(1, false)...)
	var before int64
	err := db.Pool.QueryRow(ctx, `INSERT INTO lockfree_locks VALUES ('old', 'a', nextval('lockfree_lock_tokens'), now(), now())
		RETURNING token`).Scan(&before)
	if err != nil {
		t.Fatal(err)
	}
	if err := migrate.Up(ctx, db.Pool, migrate.Names{}, fencedlock.Migrations()); err != nil {
		t.Fatal(err)
	}
	var indexes int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_indexes WHERE schemaname = $1 AND indexname = 'lockfree_locks_expires_at'`,
		db.Schema).Scan(&indexes); err != nil || indexes != 0 {
		t.Fatalf("expiry index after the upgrade: %d (%v)", indexes, err)
	}
	store := newPostgres(t, db, false)
	for _, name := range []string{"old", "new"} {
		l, err := store.Acquire(ctx, name, "b", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if l.Token <= before {
			t.Fatalf("%s: token %d after the upgrade, not above %d before it", name, l.Token, before)
		}
	}
}
