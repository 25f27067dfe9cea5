package migrate_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/lockfree-go/lockfree/internal/testdb"
	"github.com/lockfree-go/lockfree/migrate"
)

var files = fstest.MapFS{
	"m/001_first.up.sql":    {Data: []byte(`CREATE TABLE {{things}} (id int PRIMARY KEY); CREATE INDEX {{bare things_id}} ON {{things}} (id)`)},
	"m/001_first.down.sql":  {Data: []byte(`DROP TABLE {{things}}`)},
	"m/002_second.up.sql":   {Data: []byte(`CREATE SEQUENCE {{thing_ids}}; SELECT nextval({{regclass thing_ids}})`)},
	"m/002_second.down.sql": {Data: []byte(`DROP SEQUENCE {{thing_ids}}`)},
	"m/README.md":           {Data: []byte("ignored")},
}

func TestRender(t *testing.T) {
	n := migrate.Names{Schema: "app", Prefix: "p_"}
	got := migrate.Render(`{{a}} {{bare a}} '{{raw a}}' {{regclass a}}`, n)
	want := `"app"."p_a" "p_a" 'p_a' '"app"."p_a"'`
	if got != want {
		t.Fatalf("Render = %s, want %s", got, want)
	}
	// Render quotes even names that Validate refuses: nothing ends an
	// identifier or a string literal early.
	weird := migrate.Names{Schema: `we"ird`, Prefix: "p'"}
	got = migrate.Render(`{{a}} {{bare a}} '{{raw a}}' {{regclass a}}`, weird)
	want = `"we""ird"."p'a" "p'a" 'p''a' '"we""ird"."p''a"'`
	if got != want {
		t.Fatalf("Render = %s, want %s", got, want)
	}
}

// Schemas and prefixes are plain identifiers: a quote or a NUL could
// otherwise end the SQL string literal of a NOTIFY channel or a regclass.
func TestValidateAdmitsOnlyIdentifiers(t *testing.T) {
	for _, n := range []migrate.Names{
		{},
		{Schema: "app", Prefix: "lf_"},
		{Schema: "_Tenant_42", Prefix: "A"},
		{Schema: strings.Repeat("s", 63), Prefix: strings.Repeat("p", 63-migrate.MaxBaseLen)},
	} {
		if err := n.Validate(); err != nil {
			t.Errorf("Validate(%+v) = %v", n, err)
		}
	}
	for _, n := range []migrate.Names{
		{Prefix: "x'"},
		{Prefix: "x'); DROP TABLE users; --"},
		{Prefix: "x\x00"},
		{Prefix: `x"`},
		{Prefix: "x y"},
		{Prefix: "1x"},
		{Prefix: "é"},
		{Prefix: strings.Repeat("p", 64-migrate.MaxBaseLen)},
		{Schema: "app'"},
		{Schema: "app\x00"},
		{Schema: `we"ird`},
		{Schema: "a.b"},
		{Schema: strings.Repeat("s", 64)},
	} {
		err := n.Validate()
		if !errors.Is(err, migrate.ErrInvalidName) {
			t.Errorf("Validate(%+q) = %v, want ErrInvalidName", n, err)
		}
		var buf bytes.Buffer
		if err := migrate.Print(&buf, n, false, migrate.FromDir("demo", files, "m")); !errors.Is(err, migrate.ErrInvalidName) || buf.Len() != 0 {
			t.Errorf("Print(%+q) = %v, wrote %q", n, err, buf.String())
		}
	}
}

// Up and Print check the exact names: prefix and base name together must
// fit in PostgreSQL's 63 bytes, or the server would truncate them.
func TestNamesFitInIdentifiers(t *testing.T) {
	long := migrate.Migration{Package: "demo", Version: 1, Name: "long",
		Up: `CREATE TABLE {{` + strings.Repeat("t", migrate.MaxBaseLen+1) + `}} (id int)`}
	n := migrate.Names{Prefix: strings.Repeat("p", 63-migrate.MaxBaseLen)}
	var buf bytes.Buffer
	if err := migrate.Print(&buf, n, false, []migrate.Migration{long}); !errors.Is(err, migrate.ErrInvalidName) {
		t.Fatalf("Print of a 64-byte name = %v, want ErrInvalidName", err)
	}
	if err := migrate.Print(&buf, migrate.Names{}, false, []migrate.Migration{long}); err != nil {
		t.Fatalf("Print with the default prefix: %v", err)
	}
}

func TestPrint(t *testing.T) {
	ms := migrate.FromDir("demo", files, "m")
	if len(ms) != 2 || ms[0].Name != "first" || ms[1].Version != 2 {
		t.Fatalf("FromDir = %+v", ms)
	}
	var up, down bytes.Buffer
	if err := migrate.Print(&up, migrate.Names{}, false, ms); err != nil {
		t.Fatal(err)
	}
	if err := migrate.Print(&down, migrate.Names{}, true, ms); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(up.String(), `CREATE TABLE "lockfree_things"`) || strings.Index(up.String(), "001") > strings.Index(up.String(), "002") {
		t.Fatalf("up:\n%s", up.String())
	}
	if strings.Index(down.String(), "002") > strings.Index(down.String(), "001") {
		t.Fatalf("down is not reversed:\n%s", down.String())
	}
	// The same migration twice (two packages needing fencedlock's, say) is
	// printed once; two different ones under one version are an error.
	var twice bytes.Buffer
	if err := migrate.Print(&twice, migrate.Names{}, false, ms, ms[:1]); err != nil || twice.String() != up.String() {
		t.Fatalf("Print of a repeated set = %v:\n%s", err, twice.String())
	}
	other := ms[0]
	other.Up = `CREATE TABLE {{other}} (id int)`
	if err := migrate.Print(&twice, migrate.Names{}, false, ms, []migrate.Migration{other}); err == nil {
		t.Fatal("two different migrations under one version were accepted")
	}
}

// Up applies each migration once, even when several services start at once.
func TestUpConcurrentAndIdempotent(t *testing.T) {
	db := testdb.New(t)
	ms := migrate.FromDir("demo", files, "m")
	ctx := context.Background()
	if err := migrate.Up(ctx, db.Pool, migrate.Names{Prefix: "x'"}, ms); !errors.Is(err, migrate.ErrInvalidName) {
		t.Fatalf("Up with a quote in the prefix = %v, want ErrInvalidName", err)
	}
	var tables int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname = $1`, db.Schema).Scan(&tables); err != nil || tables != 0 {
		t.Fatalf("a refused Up left %d tables (%v)", tables, err)
	}
	errs := make(chan error, 4)
	for i := 0; i < 4; i++ {
		go func() { errs <- migrate.Up(ctx, db.Pool, migrate.Names{}, ms, ms[:1]) }()
	}
	for i := 0; i < 4; i++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	var n int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM lockfree_migrations WHERE package = 'demo'`).Scan(&n); err != nil || n != 2 {
		t.Fatalf("recorded migrations = %d, %v", n, err)
	}
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM lockfree_things`).Scan(&n); err != nil {
		t.Fatal(err)
	}
}

// Up applies several packages' sets in one transaction: a migration that
// fails leaves none of the set applied, so a retry starts from a clean
// schema.
func TestUpSetsAllOrNothing(t *testing.T) {
	db := testdb.New(t)
	ctx := context.Background()
	demo := migrate.FromDir("demo", files, "m")
	broken := []migrate.Migration{{Package: "zbroken", Version: 1, Name: "broken", Up: `CREATE TABLE {{things}} (id int)`}}
	if err := migrate.Up(ctx, db.Pool, migrate.Names{}, demo, broken); err == nil {
		t.Fatal("Up of a set that creates a table twice succeeded")
	}
	var tables int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname = $1`, db.Schema).Scan(&tables); err != nil || tables != 0 {
		t.Fatalf("a failed Up left %d tables (%v)", tables, err)
	}
	other := []migrate.Migration{{Package: "other", Version: 1, Name: "others", Up: `CREATE TABLE {{others}} (id int)`}}
	if err := migrate.Up(ctx, db.Pool, migrate.Names{}, other, demo); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM lockfree_migrations`).Scan(&n); err != nil || n != 3 {
		t.Fatalf("recorded migrations = %d, %v; want 3", n, err)
	}
}
