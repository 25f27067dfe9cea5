package atomic_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/lockfree-go/lockfree/atomic"
	"github.com/lockfree-go/lockfree/internal/testdb"
)

// checkRefusalRecheck guards the value a refusal reports when its change
// re-checked a newer row version than its statement's snapshot (READ
// COMMITTED). Another transaction empties the row and holds it; the
// decrement's snapshot still sees 5, so its UPDATE waits for the row, finds
// 0 once the other commits, and is refused. The read in the same statement
// sees the snapshot's 5, a value that would have let the decrement apply:
// the store must run the statement again and report 0.
func checkRefusalRecheck(t *testing.T) error {
	db := newTable(t)
	pool, tr := tracedPool(t, db)
	store := newPostgres(t, pool, inventory)
	claim(t, store, "recheck", 5)
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	var txPID int
	if err := tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&txPID); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `UPDATE "Inventory ""stock""" SET quantity = 0 WHERE sku = 'recheck'`); err != nil {
		t.Fatal(err)
	}
	tr.take()
	done := make(chan error, 1)
	go func() { _, err := store.Decrement(ctx, "recheck", 3); done <- err }()
	waitBlockedBy(t, db, txPID, done)
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	err = <-done
	var short *atomic.InsufficientError
	if !errors.As(err, &short) {
		t.Fatalf("decrement of 3 from a row emptied under it: %v, want an *InsufficientError", err)
	}
	if short.Actual >= 3 {
		return fmt.Errorf("refusal reports Actual %d, a value a decrement of 3 applies to; the row held 0", short.Actual)
	}
	if short.Actual != 0 {
		t.Fatalf("refusal reports Actual %d; the row held 0", short.Actual)
	}
	if sent, _ := tr.take(); len(sent) != 2 {
		t.Fatalf("sent %d statements, want 2: the refused one and its run again", len(sent))
	}
	return nil
}

// waitBlockedBy waits until a session waits for a lock that the session
// pid holds. It fails the test if done (the waiter's outcome) arrives first.
func waitBlockedBy(t *testing.T, db *testdb.DB, pid int, done <-chan error) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var waiting bool
		if err := db.Pool.QueryRow(ctx, `SELECT count(*) > 0 FROM pg_stat_activity WHERE $1 = ANY (pg_blocking_pids(pid))`, pid).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting {
			return
		}
		select {
		case err := <-done:
			t.Fatalf("returned before it waited for the row: %v", err)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("no session waited for the row within 2 minutes")
		}
	}
}
