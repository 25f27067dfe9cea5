package occ_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/lockfree-go/lockfree/internal/testdb"
	"github.com/lockfree-go/lockfree/migrate"
	"github.com/lockfree-go/lockfree/occ"
	"github.com/lockfree-go/lockfree/occ/occtest"
)

// tenants returns two stores on tables of the same name in two schemas,
// each found through its connection's search_path, which share one
// operations table (the first schema's): two tenants of one database.
// Each holds the row "k" at version 1.
func tenants(t *testing.T) (a, b *occ.Postgres[string, occtest.Doc]) {
	t.Helper()
	first, second := newDocs(t), testdb.New(t)
	if _, err := second.Pool.Exec(ctx, occtest.Table); err != nil {
		t.Fatal(err)
	}
	cfg := occtest.Config
	cfg.Tables = migrate.Names{Schema: first.Schema}
	var stores []*occ.Postgres[string, occtest.Doc]
	for _, db := range []*testdb.DB{first, second} {
		s, err := occ.NewPostgres[string, occtest.Doc](db.Pool, occtest.TableName, &cfg)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Insert(ctx, occtest.Doc{ID: "k", Title: "t"}); err != nil {
			t.Fatal(err)
		}
		stores = append(stores, s)
	}
	return stores[0], stores[1]
}

// checkIDScoped guards the scope of operation IDs: another store that
// shares the operations table can neither read an ID's outcome (Resolve)
// nor replay it, and writes nothing with it.
func checkIDScoped(t *testing.T) error {
	a, b := tenants(t)
	id := newID(t)
	if v, err := a.Update(ctx, occtest.Doc{ID: "k", Title: "a"}, 1, occ.WithID(id)); err != nil || v != 2 {
		t.Fatalf("Update = %d, %v; want 2", v, err)
	}
	if out, err := b.Resolve(ctx, id); !errors.Is(err, occ.ErrIDReused) {
		return fmt.Errorf("another tenant's Resolve = %+v, %v; want ErrIDReused and no outcome", out, err)
	}
	if v, err := b.Update(ctx, occtest.Doc{ID: "k", Title: "a"}, 1, occ.WithID(id)); !errors.Is(err, occ.ErrIDReused) {
		return fmt.Errorf("another tenant's Update with the ID = %d, %v; want ErrIDReused", v, err)
	}
	if d, v, err := b.Load(ctx, "k"); err != nil || v != 1 || d.Title != "t" {
		return fmt.Errorf("the other tenant's row = %+v at %d, %v; want version 1 untouched", d, v, err)
	}
	if out, err := a.Resolve(ctx, id); err != nil || out.Err != nil || out.Version != 2 {
		t.Fatalf("the store's own Resolve = %+v, %v; want applied, 2", out, err)
	}
	return nil
}
