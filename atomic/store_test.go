package atomic_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockfree-go/lockfree/atomic"
	"github.com/lockfree-go/lockfree/atomic/atomictest"
	"github.com/lockfree-go/lockfree/internal/testdb"
)

var ctx = context.Background()

// inventoryDDL is the user's own table; the fencing_token column is needed
// only by the fenced-lock twin. The odd table name checks quoting.
const inventoryDDL = `CREATE TABLE "Inventory ""stock""" (
	sku           text   PRIMARY KEY,
	quantity      bigint NOT NULL,
	fencing_token bigint NOT NULL DEFAULT 0
)`

var inventory = atomic.Table{Name: `Inventory "stock"`, Key: "sku", Value: "quantity"}

// newTable returns a fresh schema holding the inventory table and the
// operations table of operation IDs.
func newTable(t testing.TB) *testdb.DB {
	t.Helper()
	db := testdb.New(t, atomic.Migrations()...)
	if _, err := db.Pool.Exec(ctx, inventoryDDL); err != nil {
		t.Fatal(err)
	}
	return db
}

func newPostgres(t testing.TB, db atomic.DB, table atomic.Table) *atomic.Postgres {
	t.Helper()
	p, err := atomic.NewPostgres(db, table)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func newMemory(t testing.TB, floor int64) *atomic.Memory {
	t.Helper()
	m, err := atomic.NewMemory(&atomic.MemoryConfig{Floor: floor})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestMemoryStore(t *testing.T) {
	t.Parallel()
	for _, floor := range []int64{0, 5, -20} {
		atomictest.Run(t, func(t *testing.T) atomictest.Harness {
			return atomictest.Harness{Store: newMemory(t, floor), Floor: floor}
		})
	}
}

// A nil config is the defaults: the floor is 0.
func TestNewMemoryDefaults(t *testing.T) {
	t.Parallel()
	m, err := atomic.NewMemory(nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Claim(ctx, "k", 1); err != nil {
		t.Fatal(err)
	}
	_, err = m.Decrement(ctx, "k", 2)
	var ie *atomic.InsufficientError
	if !errors.As(err, &ie) || ie.Bound != 0 || ie.Actual != 1 {
		t.Fatalf("Decrement past the default floor: %v, want an *InsufficientError with floor 0", err)
	}
}

func TestPostgresStore(t *testing.T) {
	t.Parallel()
	db := newTable(t)
	for _, floor := range []int64{0, 5} {
		table := inventory
		table.Floor = floor
		table.Schema = db.Schema
		store := newPostgres(t, db.Pool, table)
		// Each floor gets its own keys: the suite's key names include the
		// subtest name, which differs per run only by the #01 suffix.
		atomictest.Run(t, func(t *testing.T) atomictest.Harness {
			return atomictest.Harness{Store: store, Floor: floor}
		})
	}
}

func TestNewPostgresRejectsBadTables(t *testing.T) {
	t.Parallel()
	long := string(make([]byte, 64))
	for _, tb := range []atomic.Table{
		{},
		{Name: "t", Key: "k"},
		{Name: "t", Value: "v"},
		{Key: "k", Value: "v"},
		{Name: "t\x00", Key: "k", Value: "v"},
		{Name: "t", Key: "k", Value: "v", Schema: long},
	} {
		if _, err := atomic.NewPostgres(nilDB{}, tb); !errors.Is(err, atomic.ErrInvalid) {
			t.Errorf("NewPostgres(%+v) = %v, want ErrInvalid", tb, err)
		}
	}
	if _, err := atomic.NewPostgres(nil, inventory); !errors.Is(err, atomic.ErrInvalid) {
		t.Errorf("NewPostgres(nil DB) = %v, want ErrInvalid", err)
	}
}

type nilDB struct{ atomic.TxDB }

// The caller's transaction decides: a decrement rolled back with it is
// undone, one committed with it stays, and a batch inside it holds its row
// locks until the caller commits.
func TestPostgresInCallersTransaction(t *testing.T) {
	t.Parallel()
	db := newTable(t)
	store := newPostgres(t, db.Pool, inventory)
	if err := store.Claim(ctx, "sku", 10); err != nil {
		t.Fatal(err)
	}
	for _, commit := range []bool{false, true} {
		tx, err := db.Pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		left, err := store.WithDB(tx).Decrement(ctx, "sku", 4)
		if err != nil || left != 6 {
			t.Fatalf("Decrement in tx = %d, %v", left, err)
		}
		if _, err := store.WithDB(tx).DecrementMany(ctx, map[string]int64{"sku": 1}); err != nil {
			t.Fatal(err)
		}
		if commit {
			err = tx.Commit(ctx)
		} else {
			err = tx.Rollback(ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if v, err := store.Value(ctx, "sku"); err != nil || v != 5 {
		t.Fatalf("after rollback and commit: %d, %v; want 5", v, err)
	}
	// Under REPEATABLE READ a concurrent change is a serialization error
	// from PostgreSQL, not a wrong answer.
	tx, err := db.Pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := store.WithDB(tx).Value(ctx, "sku"); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Decrement(ctx, "sku", 1); err != nil {
		t.Fatal(err)
	}
	_, err = store.WithDB(tx).Decrement(ctx, "sku", 1)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "40001" {
		t.Fatalf("Decrement after a concurrent change under REPEATABLE READ: %v, want SQLSTATE 40001", err)
	}
}

// The unsafe twin of the batch tests: two transactions that decrement the
// same two rows in opposite orders, one row at a time, deadlock — PostgreSQL
// aborts one with 40P01. DecrementMany, given the same keys in the same
// opposite orders at the same moment, does not.
func TestBatchesInOppositeOrders(t *testing.T) {
	t.Parallel()
	db := newTable(t)
	store := newPostgres(t, db.Pool, inventory)
	for _, k := range []string{"a", "b"} {
		if err := store.Claim(ctx, k, 1000); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("row by row deadlocks", func(t *testing.T) {
		// Each transaction locks its first row, then both go for the other.
		first := [2]string{"a", "b"}
		txs := make([]pgx.Tx, 2)
		for i := range txs {
			tx, err := db.Pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx)
			txs[i] = tx
			if _, err := tx.Exec(ctx, `UPDATE "Inventory ""stock""" SET quantity = quantity - 1 WHERE sku = $1`, first[i]); err != nil {
				t.Fatal(err)
			}
		}
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for i, tx := range txs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, errs[i] = tx.Exec(ctx, `UPDATE "Inventory ""stock""" SET quantity = quantity - 1 WHERE sku = $1`, first[1-i])
				if errs[i] != nil {
					tx.Rollback(ctx) // let the other one finish
				}
			}()
		}
		wg.Wait()
		deadlocks := 0
		for _, err := range errs {
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) && pgErr.Code == "40P01" {
				deadlocks++
			} else if err != nil {
				t.Fatal(err)
			}
		}
		if deadlocks != 1 {
			t.Fatalf("%d deadlocks, want 1 (errors %v)", deadlocks, errs)
		}
	})

	t.Run("DecrementMany does not", func(t *testing.T) {
		// Hold b, start a batch {a, b} and a batch {b, a}: both queue
		// behind the lock; neither may deadlock when it is released.
		hold, err := db.Pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer hold.Rollback(ctx)
		if _, err := hold.Exec(ctx, `SELECT 1 FROM "Inventory ""stock""" WHERE sku = 'b' FOR UPDATE`); err != nil {
			t.Fatal(err)
		}
		// The batches' own pool, named so that we can watch them wait.
		app := strings.ReplaceAll(db.Schema, "_", "")
		pool, err := pgxpool.New(ctx, db.URL+"&application_name="+app)
		if err != nil {
			t.Fatal(err)
		}
		defer pool.Close()
		batches := store.WithDB(pool)
		before, _ := store.Value(ctx, "a")
		errs := make(chan error, 2)
		for _, req := range []map[string]int64{{"a": 1, "b": 1}, {"b": 1, "a": 1}} {
			go func() {
				_, err := batches.DecrementMany(ctx, req)
				errs <- err
			}()
		}
		// Wait until both batches wait for a lock.
		waitFor(t, 30*time.Second, func() bool {
			var n int
			err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
				WHERE wait_event_type = 'Lock' AND application_name = $1`, app).Scan(&n)
			return err == nil && n == 2
		})
		if err := hold.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if err := <-errs; err != nil {
				t.Fatalf("DecrementMany: %v", err)
			}
		}
		if after, _ := store.Value(ctx, "a"); after != before-2 {
			t.Fatalf("a went from %d to %d, want −2", before, after)
		}
	})
}

func waitFor(t testing.TB, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %v", timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
