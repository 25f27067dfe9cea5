package occ_test

import (
	"context"
	"testing"
	"time"

	"github.com/lockfree-go/lockfree/clock"
	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/internal/testdb"
	"github.com/lockfree-go/lockfree/occ"
	"github.com/lockfree-go/lockfree/occ/occtest"
)

var ctx = context.Background()

func TestMemoryStore(t *testing.T) {
	t.Parallel()
	occtest.Run(t, func(t *testing.T) occtest.Harness {
		s, err := occ.NewMemory[occtest.Doc](occtest.Config)
		if err != nil {
			t.Fatal(err)
		}
		c := &clock.Manual{}
		return occtest.Harness{Store: s, Locks: memoryLocks(c), TTL: time.Second, Advance: c.Advance}
	})
}

func TestPostgresStore(t *testing.T) {
	t.Parallel()
	db := newDocs(t)
	locks, err := fencedlock.NewPostgres(db.Pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := occ.NewPostgres[occtest.Doc](db.Pool, occtest.Config)
	if err != nil {
		t.Fatal(err)
	}
	occtest.Run(t, func(t *testing.T) occtest.Harness {
		return occtest.Harness{Store: s, Locks: locks, TTL: 300 * time.Millisecond, Advance: time.Sleep}
	})
}

// newDocs returns a schema with the suite's table and the lock table.
func newDocs(t testing.TB) *testdb.DB {
	t.Helper()
	db := testdb.New(t, fencedlock.Migrations()...)
	if _, err := db.Pool.Exec(ctx, occtest.Table); err != nil {
		t.Fatal(err)
	}
	return db
}
