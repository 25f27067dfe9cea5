// Package exampletest runs an example program's main logic on each backend
// and compares its output with the lines its README promises.
package exampletest

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockfree-go/lockfree/internal/testdb"
)

// Backends calls fn once on the memory backends (pool nil) and once on a
// fresh PostgreSQL schema from internal/testdb, which skips (fails under
// CI=true) without TEST_DATABASE_URL or Docker.
func Backends(t *testing.T, fn func(t *testing.T, pool *pgxpool.Pool)) {
	t.Helper()
	t.Run("memory", func(t *testing.T) {
		t.Parallel()
		fn(t, nil)
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		fn(t, testdb.New(t).Pool)
	})
}

// Output runs run with a two-minute deadline and returns what it printed,
// failing the test on an error.
func Output(t *testing.T, run func(ctx context.Context, w io.Writer) error) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out bytes.Buffer
	if err := run(ctx, &out); err != nil {
		t.Fatalf("run: %v\noutput so far:\n%s", err, out.String())
	}
	return out.String()
}

// Lines fails the test unless got is exactly the lines of want.
func Lines(t *testing.T, got string, want ...string) {
	t.Helper()
	if g, w := strings.TrimRight(got, "\n"), strings.Join(want, "\n"); g != w {
		t.Errorf("output:\n%s\nwant:\n%s", g, w)
	}
}
