package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lockfree-go/lockfree/idempotency"
	"github.com/lockfree-go/lockfree/internal/testdb"
)

var ctx = context.Background()

func newPostgres(t testing.TB, db *testdb.DB, cfg *idempotency.PostgresConfig) *idempotency.Postgres {
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
	store := newPostgres(t, db, &idempotency.PostgresConfig{InFlightWait: 100 * time.Millisecond})
	key := idempotency.Key{ID: "charge-1"}
	fp := idempotency.NewFingerprint([]byte("charge-1"))

	first, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Rollback(ctx)
	if _, err := store.WithDB(first).Do(ctx, key, fp, func(context.Context) (idempotency.Result, error) {
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
	_, err = store.WithDB(dup).Do(ctx, key, fp, func(context.Context) (idempotency.Result, error) {
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
	res, err := store.WithDB(dup).Do(ctx, key, fp, func(context.Context) (idempotency.Result, error) {
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
		if _, err := store.WithDB(tx).Do(ctx, key, idempotency.Fingerprint{}, charge); err != nil {
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

// Do sends the result with COMMIT in one batch: whatever makes the store
// fail must keep the COMMIT from happening, on every kind of DB (a pool and
// a connection take the pipelined path, a transaction the savepoint path),
// and leave the key free for a retry.
func TestDoFailedStoreDoesNotCommit(t *testing.T) {
	t.Parallel()
	failures := []struct {
		name string
		fn   func(ctx context.Context, tx pgx.Tx, key idempotency.Key) (idempotency.Result, error)
	}{
		{"record replaced", func(ctx context.Context, tx pgx.Tx, key idempotency.Key) (idempotency.Result, error) {
			// fn removes the claim (in the caller's transaction) and writes a
			// record of the key that is not Do's (in every mode).
			if _, err := tx.Exec(ctx, `DELETE FROM lockfree_idempotency_keys WHERE key = $1`, key.ID); err != nil {
				return idempotency.Result{}, err
			}
			_, err := tx.Exec(ctx, `INSERT INTO lockfree_idempotency_keys (tenant, key, fingerprint, state, token, created_at, expires_at)
				VALUES ('', $1, '', 'done', 1, now(), now() + interval '1 hour')`, key.ID)
			return idempotency.Result{Status: 201}, err
		}},
		{"result not encodable", func(ctx context.Context, tx pgx.Tx, key idempotency.Key) (idempotency.Result, error) {
			return idempotency.Result{Status: 1 << 40}, nil // outside integer: refused by the client
		}},
		{"statement failed, error ignored", func(ctx context.Context, tx pgx.Tx, key idempotency.Key) (idempotency.Result, error) {
			tx.Exec(ctx, `SELECT 1 / 0`) // aborts the transaction
			return idempotency.Result{Status: 201}, nil
		}},
		{"statement failed, empty result", func(ctx context.Context, tx pgx.Tx, key idempotency.Key) (idempotency.Result, error) {
			tx.Exec(ctx, `SELECT 1 / 0`)
			return idempotency.Result{}, nil
		}},
		{"fn failed", func(ctx context.Context, tx pgx.Tx, key idempotency.Key) (idempotency.Result, error) {
			return idempotency.Result{}, errors.New("declined")
		}},
	}
	for _, kind := range []string{"pool", "conn", "tx"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			tdb := testdb.New(t, idempotency.Migrations()...)
			if _, err := tdb.Pool.Exec(ctx, `CREATE TABLE charges (key text NOT NULL, amount int NOT NULL)`); err != nil {
				t.Fatal(err)
			}
			var db idempotency.TxDB = tdb.Pool
			switch kind {
			case "conn":
				conn, err := pgx.Connect(ctx, tdb.URL)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { conn.Close(ctx) })
				db = conn
			case "tx":
				tx, err := tdb.Pool.Begin(ctx)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { tx.Rollback(ctx) })
				db = tx
			}
			store, err := idempotency.NewPostgres(db, nil)
			if err != nil {
				t.Fatal(err)
			}
			charges := func(key idempotency.Key) int {
				t.Helper()
				var n int
				if err := db.QueryRow(ctx, `SELECT count(*) FROM charges WHERE key = $1`, key.ID).Scan(&n); err != nil {
					t.Fatalf("%s: %v", key.ID, err)
				}
				return n
			}
			for _, f := range failures {
				key := idempotency.Key{ID: f.name}
				_, err := store.Do(ctx, key, idempotency.Fingerprint{}, func(ctx context.Context) (idempotency.Result, error) {
					tx, _ := idempotency.TxFrom(ctx)
					if _, err := tx.Exec(ctx, `INSERT INTO charges VALUES ($1, 100)`, key.ID); err != nil {
						return idempotency.Result{}, err
					}
					return f.fn(ctx, tx, key)
				})
				if err == nil {
					t.Fatalf("%s: Do succeeded", f.name)
				}
				if n := charges(key); n != 0 {
					t.Fatalf("%s: %d charges committed by a failed store (%v)", f.name, n, err)
				}
				if _, found, err := store.Lookup(ctx, key); err != nil || found {
					t.Fatalf("%s: the failed execution left its key (found %v, %v)", f.name, found, err)
				}
				// The connection is usable and the retry runs.
				res, err := store.Do(ctx, key, idempotency.Fingerprint{}, func(ctx context.Context) (idempotency.Result, error) {
					tx, _ := idempotency.TxFrom(ctx)
					_, err := tx.Exec(ctx, `INSERT INTO charges VALUES ($1, 100)`, key.ID)
					return idempotency.Result{Status: 201, Body: []byte("retry")}, err
				})
				if err != nil || res.Replayed {
					t.Fatalf("%s: retry = %+v, %v", f.name, res, err)
				}
				res, err = store.Do(ctx, key, idempotency.Fingerprint{}, func(context.Context) (idempotency.Result, error) {
					t.Errorf("%s: ran after the retry committed", f.name)
					return idempotency.Result{}, nil
				})
				if err != nil || !res.Replayed || string(res.Body) != "retry" || res.Status != 201 {
					t.Fatalf("%s: replay = %+v, %v", f.name, res, err)
				}
				if n := charges(key); n != 1 {
					t.Fatalf("%s: %d charges after the retry, want 1", f.name, n)
				}
			}
		})
	}
}

// A duplicate that gives up waiting (pipelined claim: the bounded wait
// aborts Do's own transaction) leaves its pooled connection idle and usable.
func TestDoInFlightReleasesConnection(t *testing.T) {
	t.Parallel()
	tdb := testdb.New(t, idempotency.Migrations()...)
	store := newPostgres(t, tdb, &idempotency.PostgresConfig{InFlightWait: 50 * time.Millisecond})
	key := idempotency.Key{ID: "busy"}
	started, finish := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := store.Do(ctx, key, idempotency.Fingerprint{}, func(context.Context) (idempotency.Result, error) {
			close(started)
			<-finish
			return idempotency.Result{Status: 200}, nil
		})
		done <- err
	}()
	<-started
	for i := 0; i < 3; i++ {
		if _, err := store.Do(ctx, key, idempotency.Fingerprint{}, mustNotRunHere(t)); !errors.Is(err, idempotency.ErrInFlight) {
			t.Fatalf("duplicate = %v, want ErrInFlight", err)
		}
	}
	var timeout string
	if err := tdb.Pool.QueryRow(ctx, `SHOW lock_timeout`).Scan(&timeout); err != nil || timeout != "0" {
		t.Fatalf("a pooled connection kept lock_timeout %q (%v)", timeout, err)
	}
	close(finish)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if res, err := store.Do(ctx, key, idempotency.Fingerprint{}, mustNotRunHere(t)); err != nil || !res.Replayed || res.Status != 200 {
		t.Fatalf("after completion = %+v, %v", res, err)
	}
	if st := tdb.Pool.Stat(); st.AcquiredConns() != 0 {
		t.Fatalf("%d connections still acquired", st.AcquiredConns())
	}
}

func mustNotRunHere(t *testing.T) func(context.Context) (idempotency.Result, error) {
	return func(context.Context) (idempotency.Result, error) {
		t.Error("a duplicate ran")
		return idempotency.Result{}, nil
	}
}

// The claim bounds its own wait with lock_timeout and gives the caller's
// setting back: fn, and the connection afterwards, see the caller's value,
// after a first execution, a replay and a claim in the caller's transaction.
func TestClaimRestoresLockTimeout(t *testing.T) {
	t.Parallel()
	tdb := testdb.New(t, idempotency.Migrations()...)
	conn, err := pgx.Connect(ctx, tdb.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `SET lock_timeout = '42s'`); err != nil {
		t.Fatal(err)
	}
	show := func(db idempotency.DB) string {
		t.Helper()
		var v string
		if err := db.QueryRow(ctx, `SHOW lock_timeout`).Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	store, err := idempotency.NewPostgres(conn, nil)
	if err != nil {
		t.Fatal(err)
	}
	key := idempotency.Key{ID: "timeout"}
	for _, step := range []string{"first", "replay"} {
		_, err := store.Do(ctx, key, idempotency.Fingerprint{}, func(ctx context.Context) (idempotency.Result, error) {
			tx, _ := idempotency.TxFrom(ctx)
			if v := show(tx); v != "42s" {
				t.Errorf("fn sees lock_timeout %q, want the caller's 42s", v)
			}
			return idempotency.Result{Status: 200}, nil
		})
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		if v := show(conn); v != "42s" {
			t.Fatalf("after the %s execution lock_timeout = %q, want 42s", step, v)
		}
	}
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		_, err := store.WithDB(tx).Do(ctx, idempotency.Key{ID: "in-tx"}, idempotency.Fingerprint{}, func(ctx context.Context) (idempotency.Result, error) {
			if v := show(tx); v != "42s" {
				t.Errorf("fn in the caller's transaction sees lock_timeout %q", v)
			}
			return idempotency.Result{}, nil
		})
		if v := show(tx); v != "42s" {
			t.Errorf("after WithDB(tx).Do lock_timeout = %q", v)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// Stores in two schemas of one database, each found by its connection's
// search_path (Schema unset), lock apart: an execution in flight in one
// does not hold up the same key in the other, in a transaction of its own
// or in the caller's.
func TestSchemasLockApart(t *testing.T) {
	t.Parallel()
	a := newPostgres(t, testdb.New(t, idempotency.Migrations()...), nil)
	bdb := testdb.New(t, idempotency.Migrations()...)
	b := newPostgres(t, bdb, &idempotency.PostgresConfig{InFlightWait: 50 * time.Millisecond})
	for i, inTx := range []bool{false, true} {
		key := idempotency.Key{Tenant: "t", ID: fmt.Sprint("same-", i)}
		started, finish := make(chan struct{}), make(chan struct{})
		done := make(chan error, 1)
		go func() {
			_, err := a.Do(ctx, key, idempotency.Fingerprint{}, func(context.Context) (idempotency.Result, error) {
				close(started)
				<-finish
				return idempotency.Result{Status: 200}, nil
			})
			done <- err
		}()
		<-started
		ran := false
		fn := func(context.Context) (idempotency.Result, error) {
			ran = true
			return idempotency.Result{Status: 201}, nil
		}
		var res idempotency.Result
		var err error
		if inTx {
			err = pgx.BeginFunc(ctx, bdb.Pool, func(tx pgx.Tx) error {
				res, err = b.WithDB(tx).Do(ctx, key, idempotency.Fingerprint{}, fn)
				return err
			})
		} else {
			res, err = b.Do(ctx, key, idempotency.Fingerprint{}, fn)
		}
		close(finish)
		if err != nil || !ran || res.Replayed {
			t.Errorf("in the caller's transaction %v: the other schema's store, while the key is in flight in the first: %+v, ran %v, %v",
				inTx, res, ran, err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}
