package localpg_test

import (
	"context"
	"net/url"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/lockfree-go/lockfree/internal/localpg"
	"github.com/lockfree-go/lockfree/internal/testdb"
)

func TestStartRestartStop(t *testing.T) {
	if !localpg.Available() {
		testdb.Missing(t, "PostgreSQL binaries", "initdb and pg_ctl not found")
	}
	ctx := context.Background()
	s, err := localpg.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	query := func() {
		t.Helper()
		conn, err := pgx.Connect(ctx, s.URL)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		var one int
		if err := conn.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil || one != 1 {
			t.Fatalf("SELECT 1 = %d, %v", one, err)
		}
	}
	query()
	// Another local account knows the port, not the password: no superuser
	// for it (COPY … TO PROGRAM would run commands as the server's user).
	u, err := url.Parse(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	if pw, ok := u.User.Password(); !ok || pw == "" {
		t.Errorf("URL %s carries no password", u.Redacted())
	}
	for _, who := range []*url.Userinfo{url.User("postgres"), url.UserPassword("postgres", "guess")} {
		u.User = who
		if conn, err := pgx.Connect(ctx, u.String()); err == nil {
			conn.Close(ctx)
			t.Errorf("connected as %s", u.Redacted())
		}
	}
	if err := s.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	query()
}
