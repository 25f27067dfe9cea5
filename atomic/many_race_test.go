package atomic_test

import (
	"testing"
	"time"
)

// A basket whose row another transaction changes after the statement's
// snapshot and before its lock is decided on the locked values, and applied
// to every row or none: a row that was short in the snapshot and has enough
// once locked is not skipped by the update while the others are taken.
func TestDecrementManyDecidesOnLockedValues(t *testing.T) {
	t.Parallel()
	db := newTable(t)
	store := newPostgres(t, db.Pool, inventory)
	for k, v := range map[string]int64{"case": 5, "sku": 0} {
		if err := store.Claim(ctx, k, v); err != nil {
			t.Fatal(err)
		}
	}
	// A restock of sku, uncommitted: it holds sku's row lock.
	restock, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer restock.Rollback(ctx)
	if _, err := restock.Exec(ctx, `UPDATE "Inventory ""stock""" SET quantity = 3 WHERE sku = 'sku'`); err != nil {
		t.Fatal(err)
	}
	type result struct {
		left map[string]int64
		err  error
	}
	done := make(chan result, 1)
	go func() {
		left, err := store.DecrementMany(ctx, map[string]int64{"case": 1, "sku": 1})
		done <- result{left, err}
	}()
	// The basket has taken its snapshot (sku = 0) and waits for sku's lock.
	waitFor(t, 10*time.Second, func() bool {
		var n int
		err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE 'WITH req AS%'`).Scan(&n)
		return err == nil && n > 0
	})
	if err := restock.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatalf("basket over case 5 and sku 3: %v", r.err)
	}
	for k, want := range map[string]int64{"case": 4, "sku": 2} {
		if v, err := store.Value(ctx, k); err != nil || v != want || r.left[k] != want {
			t.Errorf("%s: value %d (err %v), basket said %d; want %d", k, v, err, r.left[k], want)
		}
	}
}
