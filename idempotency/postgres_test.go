package idempotency_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lockfree-go/lockfree/idempotency"
	"github.com/lockfree-go/lockfree/internal/testdb"
)

var ctx = context.Background()

func newPostgres(t testing.TB, db *testdb.DB, cfg *idempotency.Config) *idempotency.Postgres {
	t.Helper()
	s, err := idempotency.NewPostgres(db.Pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// A duplicate that times out waiting for the first transaction gets
// ErrInFlight and keeps a usable transaction with its own lock_timeout.
func TestInFlightKeepsCallerTransaction(t *testing.T) {
	t.Parallel()
	db := testdb.New(t, idempotency.Migrations()...)
	store := newPostgres(t, db, &idempotency.Config{InFlightWait: 100 * time.Millisecond})
	key := idempotency.Key{ID: "charge-1"}
	fp := idempotency.NewFingerprint([]byte("charge-1"))

	first, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Rollback(ctx)
	if _, err := store.DoTx(ctx, first, key, fp, func(context.Context) (idempotency.Result, error) {
		return idempotency.Result{Status: 201, Body: []byte("first")}, nil
	}); err != nil {
		t.Fatal(err)
	}

	dup, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer dup.Rollback(ctx)
	if _, err := dup.Exec(ctx, `SET LOCAL lock_timeout = '42s'`); err != nil {
		t.Fatal(err)
	}
	_, err = store.DoTx(ctx, dup, key, fp, func(context.Context) (idempotency.Result, error) {
		t.Error("the duplicate ran")
		return idempotency.Result{}, nil
	})
	if !errors.Is(err, idempotency.ErrInFlight) {
		t.Fatalf("duplicate = %v, want ErrInFlight", err)
	}
	var timeout string
	if err := dup.QueryRow(ctx, `SHOW lock_timeout`).Scan(&timeout); err != nil {
		t.Fatalf("the caller's transaction is unusable after ErrInFlight: %v", err)
	}
	if timeout != "42s" {
		t.Fatalf("lock_timeout = %q after the claim, want the caller's 42s", timeout)
	}
	if err := first.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	res, err := store.DoTx(ctx, dup, key, fp, func(context.Context) (idempotency.Result, error) {
		t.Error("ran after the first committed")
		return idempotency.Result{}, nil
	})
	if err != nil || !res.Replayed || string(res.Body) != "first" {
		t.Fatalf("after commit = %+v, %v", res, err)
	}
	if err := dup.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

// The claim, the effect and the result commit or roll back together.
func TestRollbackLeavesNoTrace(t *testing.T) {
	t.Parallel()
	db := testdb.New(t, idempotency.Migrations()...)
	if _, err := db.Pool.Exec(ctx, `CREATE TABLE charges (key text PRIMARY KEY, amount int NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	store := newPostgres(t, db, nil)
	key := idempotency.Key{Tenant: "acme", ID: "k"}
	charge := func(ctx context.Context) (idempotency.Result, error) {
		tx, _ := idempotency.TxFrom(ctx)
		_, err := tx.Exec(ctx, `INSERT INTO charges VALUES ($1, 100)`, key.ID)
		return idempotency.Result{Status: 201}, err
	}
	err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		if _, err := store.DoTx(ctx, tx, key, idempotency.Fingerprint{}, charge); err != nil {
			return err
		}
		return errors.New("the caller's later step fails")
	})
	if err == nil {
		t.Fatal("expected the rollback")
	}
	if _, found, _ := store.Lookup(ctx, key); found {
		t.Fatal("a rolled-back execution left its key")
	}
	res, err := store.Do(ctx, key, idempotency.Fingerprint{}, charge)
	if err != nil || res.Replayed {
		t.Fatalf("retry = %+v, %v", res, err)
	}
	var n int
	db.Pool.QueryRow(ctx, `SELECT count(*) FROM charges`).Scan(&n)
	if n != 1 {
		t.Fatalf("%d charges, want 1", n)
	}
}
