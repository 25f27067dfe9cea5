package fencedlock_test

import (
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/fencedlock/fencedlocktest"
	"github.com/lockfree-go/lockfree/internal/clock"
	"github.com/lockfree-go/lockfree/internal/testdb"
	"github.com/lockfree-go/lockfree/migrate"
)

func TestMemoryStore(t *testing.T) {
	t.Parallel()
	fencedlocktest.Run(t, func(t *testing.T) fencedlocktest.Harness {
		c := &clock.Manual{}
		return fencedlocktest.Harness{Store: fencedlock.NewMemory(c), TTL: time.Second, Advance: c.Advance}
	})
}

func TestPostgresStore(t *testing.T) {
	t.Parallel()
	db := testdb.New(t, fencedlock.Migrations()...)
	store := newPostgres(t, db, false)
	fencedlocktest.Run(t, func(t *testing.T) fencedlocktest.Harness {
		return fencedlocktest.Harness{Store: store, TTL: 300 * time.Millisecond, Advance: time.Sleep}
	})
}

func newPostgres(t testing.TB, db *testdb.DB, notify bool) *fencedlock.Postgres {
	t.Helper()
	s, err := fencedlock.NewPostgres(db.Pool, &fencedlock.PostgresConfig{Notify: notify})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// A nil connection or a table name that is not a plain identifier is refused
// before anything runs: a quote in the prefix would otherwise end the string
// literal of the NOTIFY channel, and a nil pool panic at the first release.
func TestPostgresRejectsBadConfig(t *testing.T) {
	t.Parallel()
	if _, err := fencedlock.NewPostgres(nil, nil); !errors.Is(err, fencedlock.ErrInvalid) {
		t.Errorf("NewPostgres(nil) = %v, want ErrInvalid", err)
	}
	if _, err := fencedlock.NewListener(nil, migrate.Names{}); !errors.Is(err, fencedlock.ErrInvalid) {
		t.Errorf("NewListener(nil) = %v, want ErrInvalid", err)
	}
	pool, err := pgxpool.New(ctx, "postgres://unused@127.0.0.1:1/unused") // never dialled
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	for _, tables := range []migrate.Names{
		{Prefix: "x'"},
		{Prefix: "x');--"},
		{Prefix: "x\x00"},
		{Schema: "app'"},
		{Schema: "app\x00"},
	} {
		_, err := fencedlock.NewPostgres(pool, &fencedlock.PostgresConfig{Tables: tables, Notify: true})
		if !errors.Is(err, fencedlock.ErrInvalid) || !errors.Is(err, migrate.ErrInvalidName) {
			t.Errorf("NewPostgres(%+q) = %v, want ErrInvalid and migrate.ErrInvalidName", tables, err)
		}
		if _, err := fencedlock.NewListener(pool, tables); !errors.Is(err, fencedlock.ErrInvalid) {
			t.Errorf("NewListener(%+q) = %v, want ErrInvalid", tables, err)
		}
	}
}
