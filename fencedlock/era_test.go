package fencedlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/internal/fence"
	"github.com/lockfree-go/lockfree/internal/testdb"
	"github.com/lockfree-go/lockfree/migrate"
)

// migrationsUpTo returns the migrations of fencedlock up to version v, with
// the fence functions when with is true.
func migrationsUpTo(v int, withFence bool) []migrate.Migration {
	var out []migrate.Migration
	for _, m := range fencedlock.Migrations() {
		if m.Package == "fencedlock" && m.Version <= v || m.Package == "fence" && withFence {
			out = append(out, m)
		}
	}
	return out
}

// An installation of the previous version, which minted plain tokens (and
// more than 2^40 of them), carried over to fence eras: the first token after
// the migration exceeds every token before it, the lease held across the
// migration can still be released, and an acquire of the previous version,
// prepared before the migration, fails afterwards instead of minting a
// plain token lower than the era tokens minted beside it.
func TestUpgradeToFenceEras(t *testing.T) {
	t.Parallel()
	db := testdb.New(t, migrationsUpTo(2, false)...)
	old, err := pgx.Connect(ctx, db.URL) // caches its prepared statements
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close(context.Background())
	const plainAcquire = `INSERT INTO lockfree_locks VALUES ($1, 'old', nextval('lockfree_lock_tokens'), now(), now() + interval '1 hour')
		RETURNING token`
	var before int64
	if err := old.QueryRow(ctx, plainAcquire, "held").Scan(&before); err != nil {
		t.Fatal(err)
	}
	if _, err := old.Exec(ctx, `SELECT setval('lockfree_lock_tokens', $1)`, 3*fence.EraSize); err != nil {
		t.Fatal(err)
	}
	if err := old.QueryRow(ctx, plainAcquire, "last").Scan(&before); err != nil {
		t.Fatal(err)
	}

	if err := migrate.Up(ctx, db.Pool, migrate.Names{}, fencedlock.Migrations()); err != nil {
		t.Fatal(err)
	}
	var pgErr *pgconn.PgError
	if err := old.QueryRow(ctx, plainAcquire, "again").Scan(new(int64)); !errors.As(err, &pgErr) || pgErr.Code != "42P01" {
		t.Errorf("the previous version's acquire after the migration: %v, want SQLSTATE 42P01 (undefined table)", err)
	}
	store := newPostgres(t, db, false)
	l, err := store.Acquire(ctx, "new", "b", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if l.Token <= before || l.Token < fence.EraSize {
		t.Errorf("the first token after the migration is %d: not an era token above %d, the last before it", l.Token, before)
	}
	held, ok, err := store.Holder(ctx, "held")
	if err != nil || !ok {
		t.Fatalf("the lease held across the migration: %v, %v", ok, err)
	}
	if err := store.Release(ctx, held); err != nil {
		t.Errorf("releasing the lease held across the migration: %v", err)
	}
}

// The fence functions' fast path (fence migration 2), applied to an
// installation of the previous version and taken back: the lease held
// across both steps can still be released, and every token minted after a
// step exceeds every token minted before it.
func TestUpgradeToFastEra(t *testing.T) {
	t.Parallel()
	var previous []migrate.Migration
	var fast migrate.Migration
	for _, m := range fencedlock.Migrations() {
		if m.Package == "fence" && m.Version == 2 {
			fast = m
			continue
		}
		previous = append(previous, m)
	}
	if fast.Up == "" {
		t.Fatal("no fence migration 2")
	}
	db := testdb.New(t, previous...)
	store := newPostgres(t, db, false)
	held, err := store.Acquire(ctx, "held", "a", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	last := cycle(t, store, "used")
	for _, step := range []struct{ name, sql string }{{"up", fast.Up}, {"down", fast.Down}} {
		if _, err := db.Pool.Exec(ctx, migrate.Render(step.sql, migrate.Names{})); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		for _, name := range []string{"used", "fresh-" + step.name} {
			if tok := cycle(t, store, name); tok <= last {
				t.Errorf("after %s: %s got token %d, not above %d minted before", step.name, name, tok, last)
			} else {
				last = tok
			}
		}
	}
	if err := store.Release(ctx, held); err != nil {
		t.Errorf("releasing the lease held across the migrations: %v", err)
	}
}

// cycle acquires and releases name and returns the lease's token.
func cycle(t *testing.T, store *fencedlock.Postgres, name string) int64 {
	t.Helper()
	l, err := store.Acquire(ctx, name, "b", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Release(ctx, l); err != nil {
		t.Fatal(err)
	}
	return l.Token
}

// When the database's era goes back below one already minted in (a restore
// or an upgrade onto a cluster with a lower timeline), Acquire fails with
// ErrFenceEra and says which statement moves fences on; once it has run,
// Acquire mints tokens above every earlier one.
func TestAcquireFenceEraWentBack(t *testing.T) {
	t.Parallel()
	db := testdb.New(t, fencedlock.Migrations()...)
	store := newPostgres(t, db, false)
	first, err := store.Acquire(ctx, "a", "h", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	era := first.Token / fence.EraSize
	// As if era+5 had been minted in before the database moved.
	if _, err := db.Pool.Exec(ctx, `SELECT setval('lockfree_fence_eras', $1)`, era+5); err != nil {
		t.Fatal(err)
	}
	_, err = store.Acquire(ctx, "b", "h", time.Minute)
	var fenceErr *fencedlock.FenceError
	if !errors.Is(err, fencedlock.ErrFenceEra) || !errors.As(err, &fenceErr) {
		t.Fatalf("Acquire with the era gone back: %v, want a *FenceError matching ErrFenceEra", err)
	}
	const advance = `SELECT "lockfree_fence_advance"()` // the test's tables live on its search_path
	if fenceErr.Advance != advance || !strings.Contains(err.Error(), advance) || !strings.HasPrefix(err.Error(), `fencedlock: acquire "b": `) {
		t.Errorf("the error does not tell the operator to run %s: %v", advance, err)
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "55000" {
		t.Errorf("the error does not unwrap to the server's 55000: %v", err)
	}
	t.Log(err)
	if _, err := db.Pool.Exec(ctx, fenceErr.Advance); err != nil {
		t.Fatal(err)
	}
	l, err := store.Acquire(ctx, "b", "h", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if l.Token/fence.EraSize != era+6 {
		t.Errorf("after fence_advance: token %d in era %d, want era %d", l.Token, l.Token/fence.EraSize, era+6)
	}
}

// On a read-only connection (as on a standby) Acquire fails with
// ErrFenceReadOnly, which says to connect to the primary.
func TestAcquireReadOnly(t *testing.T) {
	t.Parallel()
	db := testdb.New(t, fencedlock.Migrations()...)
	conn, err := pgx.Connect(ctx, db.URL+"&default_transaction_read_only=on")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	store, err := fencedlock.NewPostgres(conn, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = store.Acquire(ctx, "a", "h", time.Minute)
	if !errors.Is(err, fencedlock.ErrFenceReadOnly) || errors.Is(err, fencedlock.ErrFenceEra) ||
		!strings.Contains(err.Error(), "target_session_attrs=read-write") {
		t.Fatalf("Acquire on a read-only connection: %v, want ErrFenceReadOnly naming target_session_attrs", err)
	}
	t.Log(err)
}
