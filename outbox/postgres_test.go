package outbox_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lockfree-go/lockfree/internal/fence"
	"github.com/lockfree-go/lockfree/internal/testdb"
	"github.com/lockfree-go/lockfree/migrate"
	"github.com/lockfree-go/lockfree/outbox"
)

func newPostgres(t *testing.T, cfg *outbox.PostgresConfig) (*testdb.DB, *outbox.Postgres) {
	t.Helper()
	db := testdb.New(t, outbox.Migrations()...)
	p, err := outbox.NewPostgres(db.Pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return db, p
}

// An event written in a transaction exists if and only if the transaction
// commits.
func TestPostgresWriteJoinsTheTransaction(t *testing.T) {
	t.Parallel()
	db, store := newPostgres(t, nil)
	for _, commit := range []bool{false, true} {
		tx, err := db.Pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := store.WithDB(tx).Write(ctx, outbox.Event{Key: "order-1", ID: fmt.Sprint(commit)}); err != nil {
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
	var ids []string
	rows, _ := db.Pool.Query(ctx, `SELECT event_id FROM lockfree_outbox_events`)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(ids) != 1 || ids[0] != "true" {
		t.Fatalf("outbox holds %v (%v), want only the committed event", ids, err)
	}
}

func TestPostgresWritersOfOneEntityTakeTurns(t *testing.T) {
	t.Parallel()
	if err := checkWritersTakeTurns(t); err != nil {
		t.Fatal(err)
	}
}

// checkWritersTakeTurns guards the entity's row in Write: a second writer
// of an entity waits for the first one's transaction, then gets a higher
// sequence, so that sequences follow the order of commits.
func checkWritersTakeTurns(t *testing.T) error {
	db, store := newPostgres(t, nil)
	if _, err := store.Write(ctx, outbox.Event{Key: "k", ID: "0"}); err != nil {
		t.Fatal(err)
	}
	first, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Rollback(ctx)
	r1, err := store.WithDB(first).Write(ctx, outbox.Event{Key: "k", ID: "1"})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan outbox.Record, 1)
	go func() {
		var r2 outbox.Record
		err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
			var err error
			r2, err = store.WithDB(tx).Write(ctx, outbox.Event{Key: "k", ID: "2"})
			return err
		})
		if err != nil {
			t.Error(err)
		}
		done <- r2
	}()
	var early bool
	waitFor(t, 30*time.Second, func() bool {
		select {
		case r2 := <-done:
			early = true
			done <- r2
			return true
		default:
			return lockWaits(db) > 0
		}
	})
	if err := first.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	r2 := <-done
	switch {
	case early:
		return fmt.Errorf("a second writer of the entity went on while the first one's transaction was open (sequences %d, %d)", r1.Seq, r2.Seq)
	case r2.Seq <= r1.Seq:
		return fmt.Errorf("the second writer got sequence %d, not above the first one's %d", r2.Seq, r1.Seq)
	}
	return nil
}

// lockWaits counts the sessions of the test's database waiting for a lock.
func lockWaits(db *testdb.DB) int {
	var n int
	db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
		WHERE wait_event_type = 'Lock' AND datname = current_database() AND query LIKE '%outbox_sequences%'`).Scan(&n)
	return n
}

// Under contention, an entity's events are read back (the relay's order)
// in sequence order: the event's position is drawn after the entity's row
// was taken.
func TestPostgresConcurrentWritersKeepOrder(t *testing.T) {
	t.Parallel()
	_, store := newPostgres(t, &outbox.PostgresConfig{Partitions: 1})
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 25 {
				if _, err := store.Write(ctx, outbox.Event{Key: []string{"a", "b"}[i%2], ID: fmt.Sprintf("%d-%d", w, i)}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	recs, err := outbox.Pending(ctx, store, 0, 1000)
	if err != nil || len(recs) != 200 {
		t.Fatalf("pending: %d, %v", len(recs), err)
	}
	last := map[string]int64{}
	for _, r := range recs {
		if r.Seq <= last[r.Key] {
			t.Fatalf("entity %s: sequence %d read after %d", r.Key, r.Seq, last[r.Key])
		}
		last[r.Key] = r.Seq
	}
}

// After the database went back to an earlier era (a restore onto another
// cluster), Write refuses to mint sequences until fence_advance; then they
// are above every earlier one.
func TestPostgresWriteAfterRestore(t *testing.T) {
	t.Parallel()
	db, store := newPostgres(t, nil)
	before, err := store.Write(ctx, outbox.Event{Key: "k"})
	if err != nil {
		t.Fatal(err)
	}
	// The era recorded goes above the server's timeline: what a restore
	// onto a cluster with a lower timeline looks like to fence_era.
	if _, err := db.Pool.Exec(ctx, `SELECT setval('lockfree_fence_eras', 5)`); err != nil {
		t.Fatal(err)
	}
	_, err = store.Write(ctx, outbox.Event{Key: "k"})
	var fe *outbox.FenceError
	if !errors.Is(err, outbox.ErrFenceEra) || !errors.As(err, &fe) || fe.Advance == "" {
		t.Fatalf("Write in a lower era = %v, want a *FenceError matching ErrFenceEra", err)
	}
	if _, err := db.Pool.Exec(ctx, fe.Advance); err != nil {
		t.Fatal(err)
	}
	after, err := store.Write(ctx, outbox.Event{Key: "k"})
	if err != nil {
		t.Fatal(err)
	}
	if after.Seq < 6*fence.EraSize || after.Seq <= before.Seq {
		t.Fatalf("sequence after fence_advance %d, before %d", after.Seq, before.Seq)
	}
}

func TestPostgresTables(t *testing.T) {
	t.Parallel()
	names := migrate.Names{Prefix: "shop_outbox_"}
	db := testdb.New(t)
	if err := migrate.Up(ctx, db.Pool, names, outbox.Migrations()); err != nil {
		t.Fatal(err)
	}
	store, err := outbox.NewPostgres(db.Pool, &outbox.PostgresConfig{Tables: names})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Write(ctx, outbox.Event{Key: "k"}); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM shop_outbox_outbox_events`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("shop_outbox_outbox_events holds %d (%v)", n, err)
	}
	if _, err := outbox.NewPostgres(db.Pool, &outbox.PostgresConfig{Tables: migrate.Names{Prefix: "bad-prefix"}}); !errors.Is(err, outbox.ErrInvalid) {
		t.Fatalf("bad prefix: %v", err)
	}
}
