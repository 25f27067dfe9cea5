package history

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockfree-go/lockfree/internal/faultproxy"
	"github.com/lockfree-go/lockfree/internal/pgaddr"
	"github.com/lockfree-go/lockfree/internal/testdb"
)

// patience bounds every wait for a condition: generous, the machine may be
// busy.
const patience = time.Minute

func requireOutcome(t *testing.T, what string, err error, want Outcome) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: no error", what)
	}
	if got := Classify(err); got != want {
		t.Errorf("%s: Classify(%v) = %s, want %s", what, err, got, want)
	} else {
		t.Logf("%s: %v → %s", what, err, got)
	}
}

// closedAddr is an address where nothing listens any more.
func closedAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// Errors before anything is sent need no server.
func TestClassifyNotSent(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	if Classify(nil) != OK {
		t.Error("Classify(nil) is not OK")
	}
	addr := closedAddr(t)
	_, err := net.Dial("tcp", addr)
	requireOutcome(t, "dial refused", err, Fail)

	u := "postgres://lockfree@" + addr + "/lockfree?connect_timeout=5"
	_, err = pgx.Connect(ctx, u)
	requireOutcome(t, "pgx connect refused", err, Fail)

	pool, err := pgxpool.New(ctx, u) // connects lazily
	if err != nil {
		t.Fatal(err)
	}
	pool.Close()
	_, err = pool.Exec(ctx, "SELECT 1")
	requireOutcome(t, "closed pool", err, Fail)

	requireOutcome(t, "NotSent", NotSent(context.DeadlineExceeded), Fail)
	requireOutcome(t, "bare context error", context.DeadlineExceeded, Unknown)
	refused := errors.New("insufficient")
	if got := Classify(fmt.Errorf("sale: %w", refused), refused); got != Fail {
		t.Errorf("a refusal: %s, want fail", got)
	}
	if NotSent(nil) != nil {
		t.Error("NotSent(nil) is not nil")
	}
}

// connectPG connects to the test server, through proxy when given.
func connectPG(t *testing.T, ctx context.Context, proxy *faultproxy.Proxy) *pgx.Conn {
	t.Helper()
	u := testdb.URL(t)
	if proxy != nil {
		var err error
		if u, err = pgaddr.WithHostPort(u, proxy.Addr()); err != nil {
			t.Fatal(err)
		}
	}
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// sleeping starts a long statement on conn under ctx and waits until the
// server runs it; the returned channel gets its error.
func sleeping(t *testing.T, ctx context.Context, conn *pgx.Conn) <-chan error {
	t.Helper()
	admin := connectPG(t, context.Background(), nil)
	pid := conn.PgConn().PID()
	done := make(chan error, 1)
	go func() {
		_, err := conn.Exec(ctx, "SELECT pg_sleep(600)")
		done <- err
	}()
	waitFor(t, "the statement to run on the server", func() bool {
		var n int
		err := admin.QueryRow(context.Background(),
			`SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND state = 'active' AND query LIKE 'SELECT pg_sleep%'`, pid).Scan(&n)
		return err == nil && n == 1
	})
	return done
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(patience)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// manualDeadline is a context whose deadline the test makes pass.
type manualDeadline struct {
	context.Context
	once sync.Once
	done chan struct{}
}

func newManualDeadline() *manualDeadline {
	return &manualDeadline{Context: context.Background(), done: make(chan struct{})}
}

func (c *manualDeadline) expire()               { c.once.Do(func() { close(c.done) }) }
func (c *manualDeadline) Done() <-chan struct{} { return c.done }
func (c *manualDeadline) Err() error {
	select {
	case <-c.done:
		return context.DeadlineExceeded
	default:
		return nil
	}
}

// Errors from a real server, before and after the statement was sent.
func TestClassifyPostgres(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	conn := connectPG(t, ctx, nil)

	_, err := conn.Exec(ctx, "SELECT 1/0")
	requireOutcome(t, "server error", err, Fail)

	ended, end := context.WithCancel(ctx)
	end()
	_, err = conn.Exec(ended, "SELECT 1")
	requireOutcome(t, "context ended before send", err, Fail)

	cancelled, stop := context.WithCancel(ctx)
	done := sleeping(t, cancelled, conn)
	stop()
	requireOutcome(t, "context cancelled after send", <-done, Unknown)

	conn = connectPG(t, ctx, nil)
	dl := newManualDeadline()
	done = sleeping(t, dl, conn)
	dl.expire()
	err = <-done
	requireOutcome(t, "deadline after send", err, Unknown)
	if !pgconn.Timeout(err) {
		t.Errorf("deadline after send: %v is not a pgconn timeout", err)
	}

	conn = connectPG(t, ctx, nil)
	done = sleeping(t, ctx, conn)
	admin := connectPG(t, ctx, nil)
	if _, err := admin.Exec(ctx, "SELECT pg_terminate_backend($1)", conn.PgConn().PID()); err != nil {
		t.Fatal(err)
	}
	err = <-done
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Severity != "FATAL" {
		t.Fatalf("terminated session: %v, want a FATAL PgError", err)
	}
	requireOutcome(t, "session terminated after send", err, Unknown)
}

// Network faults from a proxy: a reset after the statement left is
// uncertain, a reset of the connect is not.
func TestClassifyProxy(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	target, err := pgaddr.HostPort(testdb.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := faultproxy.Start(target)
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()

	conn := connectPG(t, ctx, proxy)
	done := sleeping(t, ctx, conn)
	proxy.ResetConns()
	requireOutcome(t, "reset after send", <-done, Unknown)

	// Held in the proxy, the statement never reached the server; the
	// client cannot know that.
	conn = connectPG(t, ctx, proxy)
	proxy.Set(faultproxy.Hold, 0)
	before := proxy.Stats().Held
	held := make(chan error, 1)
	go func() {
		_, err := conn.Exec(ctx, "SELECT 1")
		held <- err
	}()
	waitFor(t, "the statement to be held", func() bool { return proxy.Stats().Held > before })
	proxy.Set(faultproxy.Reset, 0)
	requireOutcome(t, "reset while held", <-held, Unknown)

	u, err := pgaddr.WithHostPort(testdb.URL(t), proxy.Addr())
	if err != nil {
		t.Fatal(err)
	}
	_, err = pgx.Connect(ctx, u)
	requireOutcome(t, "connect reset", err, Fail)
	proxy.Set(faultproxy.Pass, 0)
}
