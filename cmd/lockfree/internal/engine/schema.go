package engine

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/internal/pgschema"
	"github.com/lockfree-go/lockfree/migrate"
)

// schema is one approach's run's fresh schema, so that runs never see each
// other's rows.
type schema struct {
	*pgschema.Schema
	url   string        // base with search_path set to the schema
	admin *pgxpool.Pool // the harness's own pool in the schema
}

func newSchema(ctx context.Context, base string, sc Scenario, a Approach, s Sizes) (*schema, error) {
	prefix := "compare_" + sc.Name() + "_" + strings.ReplaceAll(string(a), "-", "_")
	created, err := pgschema.New(ctx, base, prefix)
	if err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	sch := &schema{Schema: created, url: created.URL, admin: created.Pool}
	if err := migrate.Up(ctx, sch.admin, migrate.Names{}, fencedlock.Migrations(), sc.Migrations()); err != nil {
		sch.drop()
		return nil, fmt.Errorf("engine: migrating: %w", err)
	}
	if err := sc.Setup(ctx, sch.admin, s); err != nil {
		sch.drop()
		return nil, fmt.Errorf("engine: %s setup: %w", sc.Name(), err)
	}
	return sch, nil
}

// drop removes the schema, retrying for a minute while the server comes
// back from a restart.
func (s *schema) drop() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_ = s.Close(ctx)
}
