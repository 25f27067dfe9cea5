package fencedlock_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/internal/testdb"
)

// checkPurgeFence guards the purge fence of Acquire's fresh-row branch: a
// later tenure never gets a smaller token, even across a Purge. A fresh
// row's token is minted before the row exists; were a Purge of the same name
// to commit between that mint and the insert, the fresh row would carry a
// smaller token than the purged tenure. The check builds exactly that
// interleaving: session P holds the purge lock (as Purge does) while it
// creates a tenure of "fresh"; the acquire of "fresh" starts and blocks; P
// then gives its tenure a newer token, purges the row and commits. The
// acquire must come out with a token above P's: it waited for the purge
// before minting. (Without the purge lock — the mutant — it mints first,
// blocks on P's row, and inserts the smaller token once P's row is gone.)
// The acquire's first statement finds no row (P's is not committed); its
// second, the insert, is the one that waits.
func checkPurgeFence(t *testing.T) error {
	db := testdb.New(t, fencedlock.Migrations()...)
	store := newPostgres(t, db, false)
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	var pid int
	for _, q := range []string{
		`SELECT pg_advisory_xact_lock(hashtext('lockfree.fencedlock.purge'), 'lockfree_locks'::regclass::oid::int)`,
		`INSERT INTO lockfree_locks VALUES ('fresh', 'earlier', lockfree_fence_mint('lockfree_lock_fences'), now(), now())`,
	} {
		if _, err := tx.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	type result struct {
		lease fencedlock.Lease
		err   error
	}
	got := make(chan result, 1)
	go func() {
		l, err := store.Acquire(ctx, "fresh", "later", time.Minute)
		got <- result{l, err}
	}()
	waitFor(t, 30*time.Second, func() bool {
		var waiting bool
		db.Pool.QueryRow(ctx, `SELECT count(*) > 0 FROM pg_stat_activity WHERE $1 = ANY (pg_blocking_pids(pid))`, pid).Scan(&waiting)
		return waiting
	})
	var purged int64
	if err := tx.QueryRow(ctx, `UPDATE lockfree_locks SET token = lockfree_fence_mint('lockfree_lock_fences') WHERE name = 'fresh' RETURNING token`).Scan(&purged); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `DELETE FROM lockfree_locks WHERE name = 'fresh'`); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.lease.Token <= purged {
		return fmt.Errorf("the tenure after the purge has token %d, not above the purged tenure's %d", r.lease.Token, purged)
	}
	return nil
}

// Purge itself takes the lock: an acquire minting a fresh row's token holds
// it shared until it commits, and the Purge waits for it.
func TestPurgeWaitsForMints(t *testing.T) {
	t.Parallel()
	db := testdb.New(t, fencedlock.Migrations()...)
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	store := newPostgres(t, db, false)
	// An acquire inside an open transaction: its shared lock lasts until
	// the transaction ends.
	if _, err := store.WithDB(tx).Acquire(ctx, "minting", "a", time.Minute); err != nil {
		t.Fatal(err)
	}
	var pid int
	if err := tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := store.Purge(ctx, 0, 100)
		done <- err
	}()
	waitFor(t, 30*time.Second, func() bool {
		var waiting bool
		db.Pool.QueryRow(ctx, `SELECT count(*) > 0 FROM pg_stat_activity WHERE $1 = ANY (pg_blocking_pids(pid))`, pid).Scan(&waiting)
		return waiting
	})
	select {
	case err := <-done:
		t.Fatalf("Purge returned (%v) while a mint was in flight", err)
	default:
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
