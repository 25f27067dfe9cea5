package atomic_test

import (
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockfree-go/lockfree/atomic"
	"github.com/lockfree-go/lockfree/clock"
	"github.com/lockfree-go/lockfree/internal/faultproxy"
	"github.com/lockfree-go/lockfree/internal/opid"
	"github.com/lockfree-go/lockfree/internal/pgaddr"
	"github.com/lockfree-go/lockfree/migrate"
)

// A decrement whose answer is lost — the server applied it and committed,
// and the client's connection was reset before the answer reached it — is
// retried. Without an ID the retry applies it a second time (the unsafe
// twin, which also shows that the fault bit after the effect); with an ID
// the retry answers the first outcome and applies nothing.
func TestLostAnswerRetriedWithID(t *testing.T) {
	t.Parallel()
	db := newTable(t)
	target, err := pgaddr.HostPort(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := faultproxy.Start(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	through, err := pgaddr.WithHostPort(db.URL, proxy.Addr())
	if err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.New(ctx, through)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	direct := newPostgres(t, db.Pool, inventory)
	store := newPostgres(t, pool, inventory)

	for _, c := range []struct {
		name    string
		key     string
		opts    []atomic.Option
		applied int64 // units taken by the call and its retry
	}{
		{"without an ID", "lost-answer-without-id", nil, 2},
		{"with an ID", "lost-answer-with-id", []atomic.Option{atomic.WithID(newID(t))}, 1},
	} {
		claim(t, direct, c.key, 10)
		lost := proxy.Stats().LostReplies
		proxy.LoseReply([]byte(c.key)) // the Bind that carries the key
		if _, err := store.Decrement(ctx, c.key, 1, c.opts...); err == nil {
			t.Fatalf("%s: the decrement's answer was not lost", c.name)
		}
		if n := proxy.Stats().LostReplies; n != lost+1 {
			t.Fatalf("%s: %d answers lost, want %d", c.name, n, lost+1)
		}
		if v, err := direct.Value(ctx, c.key); err != nil || v != 9 {
			t.Fatalf("%s: value %d, %v after the lost answer; want 9 (the decrement applied)", c.name, v, err)
		}
		left, err := store.Decrement(ctx, c.key, 1, c.opts...)
		if err != nil || left != 10-c.applied {
			t.Fatalf("%s: the retry answered %d, %v; want %d", c.name, left, err, 10-c.applied)
		}
		if v, err := direct.Value(ctx, c.key); err != nil || v != 10-c.applied {
			t.Fatalf("%s: value %d, %v after the retry; want %d", c.name, v, err, 10-c.applied)
		}
	}
}

// In the caller's transaction the record commits or rolls back with it: a
// rolled-back decrement leaves its ID free, and a retry of the ID from
// another session waits for the transaction and then replays it.
func TestIDInCallersTransaction(t *testing.T) {
	t.Parallel()
	db := newTable(t)
	store := newPostgres(t, db.Pool, inventory)
	claim(t, store, "k", 10)
	id := newID(t)

	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if left, err := store.WithDB(tx).Decrement(ctx, "k", 2, atomic.WithID(id)); err != nil || left != 8 {
		t.Fatalf("Decrement in a transaction = %d, %v", left, err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}

	tx, err = db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if left, err := store.WithDB(tx).Decrement(ctx, "k", 2, atomic.WithID(id)); err != nil || left != 8 {
		t.Fatalf("Decrement in a transaction after the rollback = %d, %v; want 8", left, err)
	}
	type answer struct {
		left int64
		err  error
	}
	retried := make(chan answer, 1)
	go func() {
		left, err := store.Decrement(ctx, "k", 2, atomic.WithID(id))
		retried <- answer{left, err}
	}()
	waitFor(t, 30*time.Second, func() bool {
		var n int
		err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE 'WITH age AS%'`).Scan(&n)
		return err == nil && n > 0
	})
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if a := <-retried; a.err != nil || a.left != 8 {
		t.Fatalf("the retry beside the transaction = %d, %v; want the replay 8", a.left, a.err)
	}
	if v, err := store.Value(ctx, "k"); err != nil || v != 8 {
		t.Fatalf("value %d, %v; want 8", v, err)
	}
}

// An ID expires Retention after the time it carries: its retry is then
// refused (not applied again), Purge deletes its record, and the retry is
// still refused.
func TestIDExpires(t *testing.T) {
	t.Parallel()
	t.Run("memory", func(t *testing.T) {
		t.Parallel()
		c := clock.NewManual(time.Now())
		m, err := atomic.NewMemory(&atomic.MemoryConfig{Clock: c, Retention: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		claim(t, m, "k", 10)
		id := opid.At(c.Now())
		if _, err := m.Decrement(ctx, "k", 1, atomic.WithID(id)); err != nil {
			t.Fatal(err)
		}
		c.Advance(time.Minute - time.Millisecond)
		if left, err := m.Decrement(ctx, "k", 1, atomic.WithID(id)); err != nil || left != 9 {
			t.Fatalf("retry within Retention = %d, %v; want the replay 9", left, err)
		}
		if n, err := m.Purge(ctx, 10); err != nil || n != 0 {
			t.Fatalf("Purge within Retention = %d, %v; want 0", n, err)
		}
		c.Advance(2 * time.Millisecond)
		expectExpired(t, m, id)
		if n, err := m.Purge(ctx, 10); err != nil || n != 1 {
			t.Fatalf("Purge after Retention = %d, %v; want 1", n, err)
		}
		expectExpired(t, m, id)
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		table := inventory
		table.Retention = time.Second
		p := newPostgres(t, newTable(t).Pool, table)
		claim(t, p, "k", 10)
		id := newID(t)
		if _, err := p.Decrement(ctx, "k", 1, atomic.WithID(id)); err != nil {
			t.Fatal(err)
		}
		// On the database's clock: wait until the ID is older than
		// Retention.
		waitFor(t, 30*time.Second, func() bool {
			_, err := p.Resolve(ctx, id)
			return errors.Is(err, atomic.ErrExpired)
		})
		expectExpired(t, p, id)
		if n, err := p.Purge(ctx, 10); err != nil || n != 1 {
			t.Fatalf("Purge after Retention = %d, %v; want 1", n, err)
		}
		expectExpired(t, p, id)
	})
}

// expectExpired checks that a retry of id's decrement of k (from 10, once)
// is refused and that Resolve cannot answer for id.
func expectExpired(t *testing.T, s atomic.Recorder, id uuid.UUID) {
	t.Helper()
	if _, err := s.Decrement(ctx, "k", 1, atomic.WithID(id)); !errors.Is(err, atomic.ErrExpired) {
		t.Fatalf("retry after Retention: %v, want ErrExpired", err)
	}
	if _, err := s.Resolve(ctx, id); !errors.Is(err, atomic.ErrExpired) {
		t.Fatalf("Resolve after Retention: %v, want ErrExpired", err)
	}
	if v, err := s.Value(ctx, "k"); err != nil || v != 9 {
		t.Fatalf("value %d, %v; want 9: the decrement once", v, err)
	}
}

// Purge deletes the records of expired IDs in batches of at most its
// limit, oldest first, and leaves every live one.
func TestPurgeInBatches(t *testing.T) {
	t.Parallel()
	db := newTable(t)
	table := inventory
	table.Retention = time.Hour
	p := newPostgres(t, db.Pool, table)
	for i := range 25 {
		id := opid.At(time.Now().Add(-2*time.Hour - time.Duration(i)*time.Second))
		if _, err := db.Pool.Exec(ctx, `INSERT INTO lockfree_atomic_operations (id, scope, fingerprint, op, key, outcome)
			VALUES ($1, '', '', 'decrement', 'k', 'applied')`, id); err != nil {
			t.Fatal(err)
		}
	}
	claim(t, p, "k", 100)
	for range 5 {
		if _, err := p.Decrement(ctx, "k", 1, atomic.WithID(newID(t))); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range []int{10, 10, 5, 0} {
		if n, err := p.Purge(ctx, 10); err != nil || n != want {
			t.Fatalf("Purge(10) = %d, %v; want %d", n, err, want)
		}
	}
	var left int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM lockfree_atomic_operations`).Scan(&left); err != nil || left != 5 {
		t.Fatalf("%d records left, %v; want the 5 live ones", left, err)
	}
}

// A record is kept in the table the store's Tables name, under its prefix.
func TestIDTablesPrefix(t *testing.T) {
	t.Parallel()
	db := newTable(t)
	names := migrate.Names{Prefix: "shop_"}
	if err := migrate.Up(ctx, db.Pool, names, atomic.Migrations()); err != nil {
		t.Fatal(err)
	}
	table := inventory
	table.Tables = names
	p := newPostgres(t, db.Pool, table)
	claim(t, p, "k", 10)
	if _, err := p.Decrement(ctx, "k", 1, atomic.WithID(newID(t))); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := db.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM shop_atomic_operations) * 10 + (SELECT count(*) FROM lockfree_atomic_operations)`).Scan(&n); err != nil || n != 10 {
		t.Fatalf("records: %d (shop_ × 10 + lockfree_), %v; want 10", n, err)
	}
	bad := inventory
	bad.Tables = migrate.Names{Prefix: "bad-prefix"}
	if _, err := atomic.NewPostgres(db.Pool, bad); !errors.Is(err, atomic.ErrInvalid) {
		t.Fatalf("NewPostgres with a bad prefix: %v, want ErrInvalid", err)
	}
	for _, r := range []time.Duration{-time.Second, time.Millisecond} {
		bad := inventory
		bad.Retention = r
		if _, err := atomic.NewPostgres(db.Pool, bad); !errors.Is(err, atomic.ErrInvalid) {
			t.Fatalf("NewPostgres with Retention %v: %v, want ErrInvalid", r, err)
		}
		if _, err := atomic.NewMemory(&atomic.MemoryConfig{Retention: r}); !errors.Is(err, atomic.ErrInvalid) {
			t.Fatalf("NewMemory with Retention %v: %v, want ErrInvalid", r, err)
		}
	}
}

// Operations without an ID record nothing.
func TestNoIDRecordsNothing(t *testing.T) {
	t.Parallel()
	db := newTable(t)
	p := newPostgres(t, db.Pool, inventory)
	claim(t, p, "k", 10)
	if _, err := p.Decrement(ctx, "k", 1); err != nil {
		t.Fatal(err)
	}
	if _, err := p.DecrementMany(ctx, map[string]int64{"k": 1}); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM lockfree_atomic_operations`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d records, %v; want none", n, err)
	}
}
