package idempotency_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/lockfree-go/lockfree/idempotency"
	"github.com/lockfree-go/lockfree/internal/fence"
	"github.com/lockfree-go/lockfree/internal/testdb"
	"github.com/lockfree-go/lockfree/migrate"
)

// An installation of idempotency 001, which minted plain leased-mode tokens
// (past 2^40), carried over to fence eras: the first token after the
// migration exceeds every token before it, and a mint of the previous
// version, prepared before the migration, fails afterwards. When the era
// goes back, Claim fails with ErrFenceEra naming fence_advance.
func TestLeasedTokensInFenceEras(t *testing.T) {
	t.Parallel()
	var first []migrate.Migration
	for _, m := range idempotency.Migrations() {
		if m.Package == "idempotency" && m.Version == 1 {
			first = append(first, m)
		}
	}
	db := testdb.New(t, first...)
	old, err := pgx.Connect(ctx, db.URL) // caches its prepared statements
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close(context.Background())
	const plainMint = `SELECT nextval('lockfree_idempotency_tokens')`
	if _, err := old.Exec(ctx, `SELECT setval('lockfree_idempotency_tokens', $1)`, 3*fence.EraSize); err != nil {
		t.Fatal(err)
	}
	var before int64
	if err := old.QueryRow(ctx, plainMint).Scan(&before); err != nil {
		t.Fatal(err)
	}
	if err := migrate.Up(ctx, db.Pool, migrate.Names{}, idempotency.Migrations()); err != nil {
		t.Fatal(err)
	}
	var pgErr *pgconn.PgError
	if err := old.QueryRow(ctx, plainMint).Scan(new(int64)); !errors.As(err, &pgErr) || pgErr.Code != "42P01" {
		t.Errorf("the previous version's mint after the migration: %v, want SQLSTATE 42P01 (undefined table)", err)
	}
	store := newPostgres(t, db, nil)
	fp := idempotency.NewFingerprint([]byte("req"))
	l, _, err := store.Claim(ctx, idempotency.Key{ID: "a"}, fp, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if l.Token <= before || l.Token < 4*fence.EraSize {
		t.Errorf("the first token after the migration is %d: not an era token above %d", l.Token, before)
	}

	if _, err := db.Pool.Exec(ctx, `SELECT setval('lockfree_fence_eras', $1)`, l.Token/fence.EraSize+5); err != nil {
		t.Fatal(err)
	}
	_, _, err = store.Claim(ctx, idempotency.Key{ID: "b"}, fp, time.Minute)
	var fenceErr *idempotency.FenceError
	if !errors.Is(err, idempotency.ErrFenceEra) || !errors.As(err, &fenceErr) || !strings.Contains(err.Error(), `SELECT "lockfree_fence_advance"()`) {
		t.Errorf("Claim with the era gone back: %v, want a *FenceError matching ErrFenceEra", err)
	}
	t.Log(err)
}
