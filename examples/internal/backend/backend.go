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
	"math/rand/v2"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockfree-go/lockfree/internal/localpg"
)

// Memory is the -postgres value that asks for the memory backends even when
// PostgreSQL binaries are installed.
const Memory = "memory"

// Backend is an open database, or none.
type Backend struct {
	// Pool connects to the example's own schema (its search_path); nil
	// means the memory backends.
	Pool *pgxpool.Pool

	schema, base string
	server       *localpg.Server
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
	b.base = base
	name := fmt.Sprintf("lockfree_example_%08x", rand.Uint32())
	admin, err := pgx.Connect(ctx, base)
	if err != nil {
		return err
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{name}.Sanitize()); err != nil {
		return err
	}
	b.schema = name
	u, err := url.Parse(base)
	if err != nil || u.Scheme == "" {
		return fmt.Errorf("backend: %q is not a postgres:// URL", redact(base))
	}
	q := u.Query()
	q.Set("search_path", name)
	u.RawQuery = q.Encode()
	b.Pool, err = pgxpool.New(ctx, u.String())
	return err
}

// Close drops the example's schema and stops the throwaway server, if any.
func (b *Backend) Close() {
	if b.Pool != nil {
		b.Pool.Close()
	}
	if b.schema != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if conn, err := pgx.Connect(ctx, b.base); err == nil {
			_, _ = conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{b.schema}.Sanitize()+" CASCADE")
			conn.Close(ctx)
		}
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
