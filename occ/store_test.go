package occ_test

import (
	"context"
	"testing"

	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/internal/testdb"
	"github.com/lockfree-go/lockfree/occ"
	"github.com/lockfree-go/lockfree/occ/occtest"
)

var ctx = context.Background()

func TestMemoryStore(t *testing.T) {
	t.Parallel()
	occtest.Run(t, func(t *testing.T) occtest.Harness {
		s, err := occ.NewMemory[string, occtest.Doc](&occtest.Config)
		if err != nil {
			t.Fatal(err)
		}
		return occtest.Harness{Store: s}
	})
}

func TestPostgresStore(t *testing.T) {
	t.Parallel()
	db := newDocs(t)
	s, err := occ.NewPostgres[string, occtest.Doc](db.Pool, occtest.TableName, &occtest.Config)
	if err != nil {
		t.Fatal(err)
	}
	occtest.Run(t, func(t *testing.T) occtest.Harness { return occtest.Harness{Store: s} })
}

// newDocs returns a schema with the suite's table and the lock table.
func newDocs(t testing.TB) *testdb.DB {
	t.Helper()
	db := testdb.New(t, append(fencedlock.Migrations(), occ.Migrations()...)...)
	if _, err := db.Pool.Exec(ctx, occtest.Table); err != nil {
		t.Fatal(err)
	}
	return db
}

// newDocStore returns the store of the suite's table in db.
func newDocStore(t testing.TB, db *testdb.DB) *occ.Postgres[string, occtest.Doc] {
	t.Helper()
	s, err := occ.NewPostgres[string, occtest.Doc](db.Pool, occtest.TableName, &occtest.Config)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
