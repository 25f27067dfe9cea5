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
	n := migrate.Names{Schema: `we"ird`, Prefix: "p_"}
	got := migrate.Render(`{{a}} {{bare a}} {{raw a}} {{regclass a}}`, n)
	want := `"we""ird"."p_a" "p_a" p_a '"we""ird"."p_a"'`
	if got != want {
		t.Fatalf("Render = %s, want %s", got, want)
	}
	if err := (migrate.Names{Prefix: strings.Repeat("x", 40)}).Validate(); !errors.Is(err, migrate.ErrInvalidName) {
		t.Fatalf("long prefix: %v", err)
	}
}

func TestPrint(t *testing.T) {
	ms := migrate.FromDir("demo", files, "m")
	if len(ms) != 2 || ms[0].Name != "first" || ms[1].Version != 2 {
		t.Fatalf("FromDir = %+v", ms)
	}
	var up, down bytes.Buffer
	if err := migrate.Print(&up, migrate.Names{}, false, ms...); err != nil {
		t.Fatal(err)
	}
	if err := migrate.Print(&down, migrate.Names{}, true, ms...); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(up.String(), `CREATE TABLE "lockfree_things"`) || strings.Index(up.String(), "001") > strings.Index(up.String(), "002") {
		t.Fatalf("up:\n%s", up.String())
	}
	if strings.Index(down.String(), "002") > strings.Index(down.String(), "001") {
		t.Fatalf("down is not reversed:\n%s", down.String())
	}
	if err := migrate.Print(&up, migrate.Names{}, false, append(ms, ms[0])...); err == nil {
		t.Fatal("a duplicate migration was accepted")
	}
}

// Up applies each migration once, even when several services start at once.
func TestUpConcurrentAndIdempotent(t *testing.T) {
	db := testdb.New(t)
	ms := migrate.FromDir("demo", files, "m")
	ctx := context.Background()
	errs := make(chan error, 4)
	for i := 0; i < 4; i++ {
		go func() { errs <- migrate.Up(ctx, db.Pool, migrate.Names{}, ms...) }()
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
