package faultproxy

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/lockfree-go/lockfree/internal/pgaddr"
	"github.com/lockfree-go/lockfree/internal/testdb"
)

// startPostgres puts a proxy in front of the test server and returns it with
// a URL that connects through it.
func startPostgres(t *testing.T) (*Proxy, string) {
	t.Helper()
	u := testdb.URL(t)
	target, err := pgaddr.HostPort(u)
	if err != nil {
		t.Fatal(err)
	}
	p := start(t, target)
	through, err := pgaddr.WithHostPort(u, p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	return p, through
}

func connect(t *testing.T, ctx context.Context, u string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

type answer struct {
	n   int
	err error
}

func query(ctx context.Context, conn *pgx.Conn, sql string) <-chan answer {
	done := make(chan answer, 1)
	go func() {
		var a answer
		a.err = conn.QueryRow(ctx, sql).Scan(&a.n)
		done <- a
	}()
	return done
}

// A query sent during a hold stalls, its connection open, and completes
// once the held bytes are delivered.
func TestPostgresQueryStallsDuringHold(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	p, u := startPostgres(t)
	conn := connect(t, ctx, u)
	if a := <-query(ctx, conn, "SELECT 1"); a.err != nil || a.n != 1 {
		t.Fatalf("before the hold: %d, %v", a.n, a.err)
	}

	p.Set(Hold, 0)
	before := p.Stats().Held
	done := query(ctx, conn, "SELECT 42")
	waitFor(t, "the query to be held", func() bool { return p.Stats().Held > before })
	select {
	case a := <-done:
		t.Fatalf("the query returned during the hold: %d, %v", a.n, a.err)
	default:
	}
	if held := p.Deliver(); held == 0 {
		t.Fatal("Deliver reports that the hold held nothing")
	}
	if a := <-done; a.err != nil || a.n != 42 {
		t.Fatalf("after Deliver: %d, %v; want 42", a.n, a.err)
	}
}

// A client that connects during a hold does not slip past it: its startup
// is held, and it connects once the bytes are delivered.
func TestPostgresConnectDuringHold(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	p, u := startPostgres(t)
	p.Set(Hold, 0)
	connected := make(chan *pgx.Conn, 1)
	failed := make(chan error, 1)
	go func() {
		conn, err := pgx.Connect(ctx, u)
		if err != nil {
			failed <- err
			return
		}
		connected <- conn
	}()
	waitFor(t, "the startup to be held", func() bool { return p.Stats().Held > 0 })
	if held := p.Deliver(); held == 0 {
		t.Fatal("Deliver reports that the hold held nothing")
	}
	var conn *pgx.Conn
	select {
	case conn = <-connected:
	case err := <-failed:
		t.Fatalf("connect after Deliver: %v", err)
	}
	defer conn.Close(context.Background())
	if a := <-query(ctx, conn, "SELECT 7"); a.err != nil || a.n != 7 {
		t.Fatalf("query: %d, %v", a.n, a.err)
	}
}

// A reset breaks a pgx connection; a new one goes through.
func TestPostgresReset(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	p, u := startPostgres(t)
	conn := connect(t, ctx, u)
	if n := p.ResetConns(); n != 1 {
		t.Fatalf("ResetConns = %d, want 1", n)
	}
	if a := <-query(ctx, conn, "SELECT 1"); a.err == nil {
		t.Fatal("a query on a reset connection succeeded")
	}
	conn = connect(t, ctx, u)
	if a := <-query(ctx, conn, "SELECT 1"); a.err != nil || a.n != 1 {
		t.Fatalf("on a new connection: %d, %v", a.n, a.err)
	}
}

// lostTable makes a table "lost" in a new schema and returns the schema, a
// proxy of its server and a connection through the proxy.
func lostTable(t *testing.T, ctx context.Context) (*testdb.DB, *Proxy, *pgx.Conn) {
	t.Helper()
	db := testdb.New(t)
	if _, err := db.Pool.Exec(ctx, "CREATE TABLE lost (n int)"); err != nil {
		t.Fatal(err)
	}
	target, err := pgaddr.HostPort(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	p := start(t, target)
	u, err := pgaddr.WithHostPort(db.URL, p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	return db, p, connect(t, ctx, u)
}

// A COMMIT whose answer is lost took effect: the client gets an error, and
// the row it inserted is there.
func TestPostgresLostCommit(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	db, p, conn := lostTable(t, ctx)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "INSERT INTO lost VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	p.LoseReply(PostgresCommit)
	if err := tx.Commit(ctx); err == nil {
		t.Fatal("Commit succeeded: its answer was not lost")
	}
	var n int
	if err := db.Pool.QueryRow(ctx, "SELECT count(*) FROM lost").Scan(&n); err != nil || n != 1 {
		t.Fatalf("rows after the lost COMMIT: %d, %v; want 1 (it committed)", n, err)
	}
	if st := p.Stats(); st.LostReplies != 1 {
		t.Fatalf("stats %+v, want 1 lost reply", st)
	}
}

// A statement whose answer is lost took effect: the client, on the extended
// protocol, gets an error, and the row its INSERT added is there.
func TestPostgresLostStatement(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	db, p, conn := lostTable(t, ctx)
	p.LoseReply(PostgresExecute)
	if _, err := conn.Exec(ctx, "INSERT INTO lost VALUES ($1)", 1); err == nil {
		t.Fatal("INSERT succeeded: its answer was not lost")
	}
	var n int
	if err := db.Pool.QueryRow(ctx, "SELECT count(*) FROM lost").Scan(&n); err != nil || n != 1 {
		t.Fatalf("rows after the lost answer: %d, %v; want 1 (it applied)", n, err)
	}
	if st := p.Stats(); st.LostReplies != 1 {
		t.Fatalf("stats %+v, want 1 lost reply", st)
	}
}
