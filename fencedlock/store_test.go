package fencedlock_test

import (
	"testing"
	"time"

	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/fencedlock/fencedlocktest"
	"github.com/lockfree-go/lockfree/internal/clock"
	"github.com/lockfree-go/lockfree/internal/testdb"
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
