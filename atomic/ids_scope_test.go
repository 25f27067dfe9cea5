package atomic_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/lockfree-go/lockfree/atomic"
	"github.com/lockfree-go/lockfree/internal/testdb"
	"github.com/lockfree-go/lockfree/migrate"
)

// tenants returns two stores on tables of the same name in two schemas,
// each found through its connection's search_path, which share one
// operations table (the first schema's): two tenants of one database.
func tenants(t *testing.T) (a, b *atomic.Postgres) {
	t.Helper()
	first, second := newTable(t), testdb.New(t)
	if _, err := second.Pool.Exec(ctx, inventoryDDL); err != nil {
		t.Fatal(err)
	}
	for _, db := range []*testdb.DB{first, second} {
		if _, err := db.Pool.Exec(ctx, `INSERT INTO "Inventory ""stock""" VALUES ('k', 10)`); err != nil {
			t.Fatal(err)
		}
	}
	shared := inventory
	shared.Tables = migrate.Names{Schema: first.Schema}
	return newPostgres(t, first.Pool, shared), newPostgres(t, second.Pool, shared)
}

// checkIDScoped guards the scope of operation IDs: another store that
// shares the operations table can neither read an ID's outcome (Resolve)
// nor replay it, and applies nothing with it.
func checkIDScoped(t *testing.T) error {
	a, b := tenants(t)
	id := newID(t)
	if left, err := a.Decrement(ctx, "k", 3, atomic.WithID(id)); err != nil || left != 7 {
		t.Fatalf("Decrement = %d, %v; want 7", left, err)
	}
	if out, err := b.Resolve(ctx, id); !errors.Is(err, atomic.ErrIDReused) {
		return fmt.Errorf("another tenant's Resolve = %+v, %v; want ErrIDReused and no outcome", out, err)
	}
	if left, err := b.Decrement(ctx, "k", 3, atomic.WithID(id)); !errors.Is(err, atomic.ErrIDReused) {
		return fmt.Errorf("another tenant's Decrement with the ID = %d, %v; want ErrIDReused", left, err)
	}
	if v, err := b.Value(ctx, "k"); err != nil || v != 10 {
		return fmt.Errorf("the other tenant's value = %d, %v; want 10", v, err)
	}
	if out, err := a.Resolve(ctx, id); err != nil || out.Err != nil || out.Value != 7 {
		t.Fatalf("the store's own Resolve = %+v, %v; want applied, 7", out, err)
	}
	return nil
}
