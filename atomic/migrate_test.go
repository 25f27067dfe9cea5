package atomic_test

import (
	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/internal/testdb"
	"github.com/lockfree-go/lockfree/migrate"
)

func migrateLocks(db *testdb.DB) error {
	return migrate.Up(ctx, db.Pool, migrate.Names{}, fencedlock.Migrations())
}
