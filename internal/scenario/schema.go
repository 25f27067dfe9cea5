package scenario

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

// schema is one approach's fresh schema, so runs never see each other's rows.
type schema struct {
	name  string
	url   string
	admin *pgxpool.Pool
	base  string
}

func newSchema(ctx context.Context, base string, sc Scenario, a Approach) (*schema, error) {
	name := fmt.Sprintf("compare_%s_%s_%06x", sc.Name, strings.ReplaceAll(string(a), "-", "_"), rand.Uint32()&0xffffff)
	admin, err := pgxpool.New(ctx, base)
	if err != nil {
		return nil, err
	}
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{name}.Sanitize()); err != nil {
		admin.Close()
		return nil, err
	}
	admin.Close()
	conn, err := pgaddr.WithParam(base, "search_path", name)
	if err != nil {
		return nil, err
	}
	s := &schema{name: name, url: conn, base: base}
	if s.admin, err = pgxpool.New(ctx, s.url); err != nil {
		return nil, err
	}
	if err := migrate.Up(ctx, s.admin, migrate.Names{}, fencedlock.Migrations(), sc.Migrations); err != nil {
		s.drop()
		return nil, err
	}
	return s, nil
}

func (s *schema) drop() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s.admin.Close()
	for attempt := 0; attempt < 20; attempt++ {
		pool, err := pgxpool.New(ctx, s.base)
		if err == nil {
			_, err = pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{s.name}.Sanitize()+" CASCADE")
			pool.Close()
		}
		if err == nil {
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
}
