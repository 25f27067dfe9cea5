package harness

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/internal/pgaddr"
	"github.com/lockfree-go/lockfree/migrate"
)

// schema is one approach's run's fresh schema, so that runs never see each
// other's rows.
type schema struct {
	name  string
	url   string // base with search_path set to the schema
	base  string
	admin *pgxpool.Pool
}

func newSchema(ctx context.Context, base string, sc Scenario, a Approach, s Sizes) (*schema, error) {
	name := fmt.Sprintf("compare_%s_%s_%06x", sc.Name(), strings.ReplaceAll(string(a), "-", "_"), rand.Uint32()&0xffffff)
	root, err := pgxpool.New(ctx, base)
	if err != nil {
		return nil, fmt.Errorf("harness: connecting: %w", err)
	}
	_, err = root.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{name}.Sanitize())
	root.Close()
	if err != nil {
		return nil, fmt.Errorf("harness: creating schema: %w", err)
	}
	url, err := pgaddr.WithParam(base, "search_path", name)
	if err != nil {
		return nil, err
	}
	sch := &schema{name: name, url: url, base: base}
	if sch.admin, err = pgxpool.New(ctx, url); err != nil {
		sch.drop()
		return nil, err
	}
	if err := migrate.Up(ctx, sch.admin, migrate.Names{}, fencedlock.Migrations(), sc.Migrations()); err != nil {
		sch.drop()
		return nil, fmt.Errorf("harness: migrating: %w", err)
	}
	if err := sc.Setup(ctx, sch.admin, s); err != nil {
		sch.drop()
		return nil, fmt.Errorf("harness: %s setup: %w", sc.Name(), err)
	}
	return sch, nil
}

// drop removes the schema, retrying while the server comes back from a
// restart.
func (s *schema) drop() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if s.admin != nil {
		s.admin.Close()
	}
	for attempt := 0; attempt < 20; attempt++ {
		pool, err := pgxpool.New(ctx, s.base)
		if err == nil {
			_, err = pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{s.name}.Sanitize()+" CASCADE")
			pool.Close()
		}
		if err == nil {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(500 * time.Millisecond):
		}
	}
}
