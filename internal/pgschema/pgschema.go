// Package pgschema makes throwaway PostgreSQL schemas: a uniquely named
// schema, a pool whose connections use it (search_path), and its drop on
// Close. The test databases, the replication pair's tests, the harness's
// per-run schemas and the example programs' backend all make theirs here,
// so that none of them writes outside a schema of its own.
package pgschema

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockfree-go/lockfree/internal/pgaddr"
)

// MaxPrefix is how many bytes of a prefix Name keeps: with the random
// suffix, a name stays under PostgreSQL's 63-byte identifier limit, which
// would otherwise truncate it silently and could make two names one.
const MaxPrefix = 50

// retryEvery is the pause between two attempts of Drop.
const retryEvery = 250 * time.Millisecond

// Schema is a created schema and a pool in it.
type Schema struct {
	// Name is the schema's name, unquoted.
	Name string
	// URL is the base connection string with search_path set to Name: give
	// it to child processes and to proxies' clients.
	URL string
	// Pool connects with URL, so unqualified tables resolve in the schema.
	Pool *pgxpool.Pool

	base string
}

// New creates a schema named Name(prefix) on the server base connects to,
// and a pool in it. The caller owns the schema: Close closes the pool and
// drops it. Nothing is left behind when New fails.
func New(ctx context.Context, base, prefix string) (*Schema, error) {
	name := Name(prefix)
	u, err := pgaddr.WithParam(base, "search_path", name)
	if err != nil {
		return nil, fmt.Errorf("pgschema: %w", err)
	}
	if err := Create(ctx, base, name); err != nil {
		return nil, err
	}
	s := &Schema{Name: name, URL: u, base: base}
	if s.Pool, err = pgxpool.New(ctx, u); err != nil {
		return nil, errors.Join(fmt.Errorf("pgschema: connect: %w", err), s.Close(ctx))
	}
	return s, nil
}

// Close closes the pool and drops the schema with everything in it, like
// Drop: retrying while the server is unreachable, until ctx ends. Give it a
// context that is not already over: the drop needs one.
func (s *Schema) Close(ctx context.Context) error {
	if s.Pool != nil {
		s.Pool.Close()
	}
	return Drop(ctx, s.base, s.Name)
}

var unsafeChars = regexp.MustCompile(`[^a-z0-9_]+`)

// Name returns a fresh schema name: prefix in lower case, every run of other
// characters than a-z, 0-9 and _ replaced by _, cut to MaxPrefix bytes, and
// an underscore and eight random hex digits; an empty prefix is "schema".
// Names readable in psql tell which test or run left a schema behind.
func Name(prefix string) string {
	if prefix == "" {
		prefix = "schema"
	}
	p := unsafeChars.ReplaceAllString(strings.ToLower(prefix), "_")
	if len(p) > MaxPrefix {
		p = p[:MaxPrefix]
	}
	return fmt.Sprintf("%s_%08x", p, rand.Uint32())
}

// Create creates the schema name on the server base connects to, through a
// connection of its own. name is quoted as an identifier, whatever it holds.
func Create(ctx context.Context, base, name string) error {
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		return fmt.Errorf("pgschema: connect: %w", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{name}.Sanitize()); err != nil {
		return fmt.Errorf("pgschema: create schema %s: %w", name, err)
	}
	return nil
}

// Drop drops the schema name, if it exists, and everything in it. A test or
// a fault may have stopped or restarted the server: Drop retries every
// 250ms until it succeeds or ctx ends, and then returns the last error.
func Drop(ctx context.Context, base, name string) error {
	for {
		err := drop(ctx, base, name)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pgschema: drop schema %s: %w", name, err)
		case <-time.After(retryEvery):
		}
	}
}

func drop(ctx context.Context, base, name string) error {
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{name}.Sanitize()+" CASCADE")
	return err
}
