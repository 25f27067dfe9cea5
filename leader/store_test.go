package leader_test

import (
	"context"
	"testing"
	"time"

	"github.com/lockfree-go/lockfree/clock"
	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/internal/testdb"
	"github.com/lockfree-go/lockfree/leader/leadertest"
)

var ctx = context.Background()

func TestMemory(t *testing.T) {
	t.Parallel()
	leadertest.Run(t, func(t *testing.T) leadertest.Harness {
		c := clock.NewManual(time.Unix(0, 0))
		return leadertest.Harness{Store: newMemory(t, c), TTL: time.Second, Advance: c.Advance}
	})
}

func TestPostgres(t *testing.T) {
	t.Parallel()
	db := testdb.New(t, fencedlock.Migrations()...)
	store := newPostgres(t, db, false)
	leadertest.Run(t, func(t *testing.T) leadertest.Harness {
		return leadertest.Harness{Store: store, TTL: 300 * time.Millisecond, Advance: time.Sleep}
	})
}

// The suite again on a store with Notify: candidates and observers are
// woken through LISTEN/NOTIFY.
func TestPostgresNotify(t *testing.T) {
	t.Parallel()
	db := testdb.New(t, fencedlock.Migrations()...)
	store := newPostgres(t, db, true)
	leadertest.Run(t, func(t *testing.T) leadertest.Harness {
		return leadertest.Harness{Store: store, TTL: 300 * time.Millisecond, Advance: time.Sleep}
	})
}

func newMemory(t testing.TB, c clock.Clock) *fencedlock.Memory {
	t.Helper()
	m, err := fencedlock.NewMemory(&fencedlock.MemoryConfig{Clock: c})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func newPostgres(t testing.TB, db *testdb.DB, notify bool) *fencedlock.Postgres {
	t.Helper()
	s, err := fencedlock.NewPostgres(db.Pool, &fencedlock.PostgresConfig{Notify: notify})
	if err != nil {
		t.Fatal(err)
	}
	return s
}
