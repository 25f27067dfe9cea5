package localpg_test

import (
	"context"
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
	if err := s.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	query()
}
