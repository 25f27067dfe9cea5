package failover_test

import (
	"context"
	"errors"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/internal/localpg"
	"github.com/lockfree-go/lockfree/internal/replpair"
	"github.com/lockfree-go/lockfree/internal/testdb"
)

// A failover that creates no timeline: the database, dumped after a
// promotion, is restored onto a new cluster, whose timeline is 1. Minting
// there fails until fence_advance; then every fence exceeds every one the
// old cluster minted.
func TestRestoreOntoAnotherCluster(t *testing.T) {
	pgDump, psql := tool(t, "pg_dump"), tool(t, "psql")
	p := replpair.Get(t)
	setup(t, p)
	p.Kill(p.Primary())
	p.Promote()
	conn := p.Connect(p.MultiURL())
	before := mintAll(t, conn, 5)

	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	dump := filepath.Join(t.TempDir(), "dump.sql")
	if out, err := exec.CommandContext(ctx, pgDump, "--no-owner", "-n", p.Schema(), "-f", dump, libpqURL(t, p.URL(p.Primary()))).CombinedOutput(); err != nil {
		t.Fatalf("pg_dump: %v\n%s", err, out)
	}
	srv, err := localpg.Start(ctx)
	if err != nil {
		t.Fatalf("a new cluster: %v", err)
	}
	t.Cleanup(srv.Stop)
	if out, err := exec.CommandContext(ctx, psql, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", srv.URL, "-f", dump).CombinedOutput(); err != nil {
		t.Fatalf("restoring the dump: %v\n%s", err, out)
	}
	restored, err := pgx.Connect(ctx, testdb.WithSearchPath(srv.URL, p.Schema()))
	if err != nil {
		t.Fatal(err)
	}
	defer restored.Close(context.Background())

	// Every fence is refused, each package's with its typed error.
	for _, f := range fences() {
		if !f.era {
			continue
		}
		_, err := f.mint(ctx, restored)
		if !errors.Is(err, fencedlock.ErrFenceEra) {
			t.Fatalf("%v on the restored copy: %v, want ErrFenceEra", f, err)
		}
		t.Logf("%v on the restored copy: %v", f, err)
	}
	var advanced int64
	if err := restored.QueryRow(ctx, `SELECT lockfree_fence_advance()`).Scan(&advanced); err != nil {
		t.Fatal(err)
	}
	after := minted{}
	for _, f := range fences() {
		if f.era {
			after[f] = []int64{mint(t, restored, f)}
		}
	}
	for f, vs := range after {
		if hi := slices.Max(before[f]); vs[0] <= hi {
			t.Errorf("%v: %d minted after fence_advance (era %d), not above %d minted on the old cluster", f, vs[0], advanced, hi)
		}
	}
}

// libpqURL drops search_path, which pgx takes in a URL and libpq does not.
func libpqURL(t *testing.T, u string) string {
	t.Helper()
	parsed, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	q := parsed.Query()
	q.Del("search_path")
	parsed.RawQuery = q.Encode()
	return parsed.String()
}

// tool finds a PostgreSQL client program, or skips (fails under CI=true).
func tool(t *testing.T, name string) string {
	t.Helper()
	if path, err := exec.LookPath(name); err == nil {
		return path
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin/" + name)
	for _, d := range dirs {
		if _, err := os.Stat(d); err == nil {
			return d
		}
	}
	testdb.Missing(t, "PostgreSQL's "+name, "not on PATH nor in /usr/lib/postgresql")
	return ""
}
