// Package backend opens the database an example program runs on: the URL
// given with -postgres (or $DATABASE_URL), else a throwaway local PostgreSQL
// started from the machine's binaries, else nothing — the memory backends.
//
// A given database is never written outside a fresh schema
// (lockfree_example_<random>) that Close drops, so an example can be pointed
// at a real server without leaving anything behind.
package backend

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockfree-go/lockfree/internal/localpg"
	"github.com/lockfree-go/lockfree/internal/pgschema"
)

// Memory is the -postgres value that asks for the memory backends even when
// PostgreSQL binaries are installed.
const Memory = "memory"

// Backend is an open database, or none.
type Backend struct {
	// Pool connects to the example's own schema (its search_path); nil
	// means the memory backends.
	Pool *pgxpool.Pool

	schema *pgschema.Schema
	server *localpg.Server
}

// Open picks the backend for pgURL and says which on w: pgURL itself
// ("memory" for the memory backends), else a throwaway local PostgreSQL when
// its binaries exist, else memory.
func Open(ctx context.Context, pgURL string, w io.Writer) (*Backend, error) {
	b := &Backend{}
	switch {
	case pgURL == Memory:
		fmt.Fprintln(w, "backend: memory")
		return b, nil
	case pgURL == "" && !localpg.Available():
		fmt.Fprintln(w, "backend: memory (no -postgres, no $DATABASE_URL, no PostgreSQL binaries for a throwaway server)")
		return b, nil
	case pgURL == "":
		fmt.Fprintln(w, "backend: throwaway local PostgreSQL (no -postgres and no $DATABASE_URL given)")
		srv, err := localpg.Start(ctx)
		if err != nil {
			return nil, err
		}
		b.server, pgURL = srv, srv.URL
	default:
		fmt.Fprintf(w, "backend: PostgreSQL at %s\n", redact(pgURL))
	}
	if err := b.openSchema(ctx, pgURL); err != nil {
		b.Close()
		return nil, err
	}
	return b, nil
}

func (b *Backend) openSchema(ctx context.Context, base string) error {
	s, err := pgschema.New(ctx, base, "lockfree_example")
	if err != nil {
		return fmt.Errorf("backend: %w", err)
	}
	b.schema, b.Pool = s, s.Pool
	return nil
}

// Close drops the example's schema and stops the throwaway server, if any.
func (b *Backend) Close() {
	if b.schema != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_ = b.schema.Close(ctx)
		cancel()
	}
	if b.server != nil {
		b.server.Stop()
	}
}

// redact hides the password of a URL.
func redact(u string) string {
	if i, j := strings.Index(u, "://"), strings.LastIndex(u, "@"); i >= 0 && j > i {
		if k := strings.Index(u[i+3:j], ":"); k >= 0 {
			return u[:i+3+k+1] + "***" + u[j:]
		}
	}
	return u
}
