package replpair_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lockfree-go/lockfree/internal/replpair"
)

func TestMain(m *testing.M) { replpair.Main(m) }

func count(t *testing.T, conn *pgx.Conn) int {
	t.Helper()
	var n int
	if err := conn.QueryRow(t.Context(), `SELECT count(*) FROM rows`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func port(t *testing.T, conn *pgx.Conn) int {
	t.Helper()
	var p int
	if err := conn.QueryRow(t.Context(), `SELECT inet_server_port()`).Scan(&p); err != nil {
		t.Fatal(err)
	}
	return p
}

// A commit made while the standby is held is lost by a crash of the primary
// and a promotion; the multi-host URL then reaches the promoted node, which
// writes on a higher timeline.
func TestLostCommit(t *testing.T) {
	p := replpair.Get(t)
	old := p.Primary()
	p.Exec(old, `CREATE TABLE rows (id int PRIMARY KEY)`)
	p.Exec(old, `INSERT INTO rows VALUES (1)`)
	p.WaitReplayed()
	if n := count(t, p.Connect(p.URL(p.Standby()))); n != 1 {
		t.Fatalf("the standby has %d rows after WaitReplayed, want 1", n)
	}
	tl := p.Timeline(old)

	p.HoldStandby()
	p.Exec(old, `INSERT INTO rows VALUES (2)`)
	p.Kill(old)
	p.Promote()
	if p.Primary() == old {
		t.Fatal("Primary did not change with the promotion")
	}
	conn := p.Connect(p.MultiURL())
	if got, want := port(t, conn), port(t, p.Connect(p.URL(p.Primary()))); got != want {
		t.Fatalf("the multi-host URL reached port %d, want the new primary's %d", got, want)
	}
	if n := count(t, conn); n != 1 {
		t.Fatalf("the promoted node has %d rows, want 1: the commit made while it was held is lost", n)
	}
	if got := p.Timeline(p.Primary()); got <= tl {
		t.Fatalf("the promoted node writes on timeline %d, not above the old primary's %d", got, tl)
	}
}

// Get hands the pair over healthy whatever the previous test left: the
// standby streams from the primary again.
func TestHandedOverHealthy(t *testing.T) {
	p := replpair.Get(t)
	p.Exec(p.Primary(), `CREATE TABLE rows (id int PRIMARY KEY)`)
	p.Exec(p.Primary(), `INSERT INTO rows VALUES (1), (2), (3)`)
	p.WaitReplayed()
	if n := count(t, p.Connect(p.URL(p.Standby()))); n != 3 {
		t.Fatalf("the standby has %d rows, want 3", n)
	}
	if s, pr := p.Timeline(p.Standby()), p.Timeline(p.Primary()); s != pr {
		t.Fatalf("the standby receives timeline %d, the primary writes %d", s, pr)
	}
}

// An isolated primary refuses new connections but keeps the sessions it
// has; after a promotion the multi-host URL reaches the promoted node while
// the isolated one still accepts writes (a split brain).
func TestIsolate(t *testing.T) {
	p := replpair.Get(t)
	old := p.Primary()
	p.Exec(old, `CREATE TABLE rows (id int PRIMARY KEY)`)
	p.WaitReplayed()
	before := p.Connect(p.URL(old))

	p.Isolate(old)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if conn, err := pgx.Connect(ctx, p.URL(old)); err == nil {
		conn.Close(ctx)
		t.Fatal("the isolated node accepted a new connection")
	}
	p.Promote()
	conn := p.Connect(p.MultiURL())
	if got, want := port(t, conn), port(t, p.Connect(p.URL(p.Primary()))); got != want {
		t.Fatalf("the multi-host URL reached port %d, want the promoted node's %d", got, want)
	}
	if _, err := before.Exec(t.Context(), `INSERT INTO rows VALUES (1)`); err != nil {
		t.Fatalf("the isolated old primary refused a write on a session it had: %v", err)
	}
	if _, err := conn.Exec(t.Context(), `INSERT INTO rows VALUES (1)`); err != nil {
		t.Fatalf("the promoted node refused a write: %v", err)
	}
}
