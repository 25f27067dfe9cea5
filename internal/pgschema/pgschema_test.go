package pgschema_test

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lockfree-go/lockfree/internal/pgschema"
	"github.com/lockfree-go/lockfree/internal/testdb"
)

const existsSQL = `SELECT EXISTS (SELECT FROM pg_namespace WHERE nspname = $1)`

func exists(t *testing.T, base, name string) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var ok bool
	if err := conn.QueryRow(ctx, existsSQL, name).Scan(&ok); err != nil {
		t.Fatal(err)
	}
	return ok
}

// dropBounded drops a schema a failed test left, for at most a minute.
func dropBounded(base, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_ = pgschema.Drop(ctx, base, name)
}

// TestNewAndClose checks the whole life of a schema: created, the pool's
// unqualified tables land in it, the URL reaches it too, and Close drops it
// with its tables.
func TestNewAndClose(t *testing.T) {
	base := testdb.URL(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := pgschema.New(ctx, base, "pgschema_test")
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			dropBounded(base, s.Name)
		}
	})
	if !strings.HasPrefix(s.Name, "pgschema_test_") || !exists(t, base, s.Name) {
		t.Fatalf("schema %q: want created with the prefix", s.Name)
	}
	if _, err := s.Pool.Exec(ctx, `CREATE TABLE things (id int)`); err != nil {
		t.Fatal(err)
	}
	var where string
	if err := s.Pool.QueryRow(ctx, `SELECT table_schema FROM information_schema.tables WHERE table_name = 'things'
		AND table_schema = current_schema()`).Scan(&where); err != nil || where != s.Name {
		t.Fatalf("table created in %q (%v), want %q", where, err, s.Name)
	}
	conn, err := pgx.Connect(ctx, s.URL)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `INSERT INTO things VALUES (1)`); err != nil {
		t.Fatalf("URL does not reach the schema: %v", err)
	}
	conn.Close(ctx)
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	closed = true
	if exists(t, base, s.Name) {
		t.Fatalf("schema %q still exists after Close", s.Name)
	}
}

// TestQuoting checks that a name that is not a plain identifier is created
// and dropped as itself, not as SQL.
func TestQuoting(t *testing.T) {
	base := testdb.URL(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// A double quote, upper case and a space: as an unquoted or naively
	// quoted identifier it is a syntax error or another name. Nothing in it
	// may do harm if the quoting breaks: the server is shared.
	name := pgschema.Name("quoting") + ` We"ird Name`
	if err := pgschema.Create(ctx, base, name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dropBounded(base, name) })
	if !exists(t, base, name) {
		t.Fatalf("schema %q not created under its own name", name)
	}
	if err := pgschema.Drop(ctx, base, name); err != nil {
		t.Fatal(err)
	}
	if exists(t, base, name) {
		t.Fatalf("schema %q still exists after Drop", name)
	}
	if err := pgschema.Drop(ctx, base, name); err != nil {
		t.Fatalf("dropping a schema that is gone: %v", err)
	}
}

// TestDropGivesUp checks that Drop returns, with the error, once its
// context ends on a server that never answers.
func TestDropGivesUp(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	// Port 1 on loopback refuses every connection.
	err := pgschema.Drop(ctx, "postgres://nobody@127.0.0.1:1/none?connect_timeout=1", "gone")
	if err == nil || !strings.Contains(err.Error(), "pgschema: drop schema gone") {
		t.Fatalf("Drop = %v, want the last connection error", err)
	}
}

func TestName(t *testing.T) {
	valid := regexp.MustCompile(`^[a-z0-9_]+_[0-9a-f]{8}$`)
	for _, prefix := range []string{"t_TestX/sub test", strings.Repeat("Long", 40), "compare_payments_fenced-lock", ""} {
		a, b := pgschema.Name(prefix), pgschema.Name(prefix)
		if !valid.MatchString(a) || len(a) > 63 {
			t.Errorf("Name(%q) = %q: want [a-z0-9_], ≤ 63 bytes, 8 hex digits at the end", prefix, a)
		}
		if a == b {
			t.Errorf("Name(%q) gave %q twice", prefix, a)
		}
	}
	if got := pgschema.Name("t_TestX/sub test"); !strings.HasPrefix(got, "t_testx_sub_test_") {
		t.Errorf("Name = %q, want the prefix lowered and its other characters replaced", got)
	}
}

// TestNewRefusesBadURL checks that a connection string that does not parse
// creates nothing.
func TestNewRefusesBadURL(t *testing.T) {
	if _, err := pgschema.New(context.Background(), "postgres://[::1", "x"); err == nil {
		t.Fatal("New with an unparseable URL: no error")
	}
}
