package fencedlock_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockfree-go/lockfree/clock"
	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/internal/faultproxy"
	"github.com/lockfree-go/lockfree/internal/pgaddr"
	"github.com/lockfree-go/lockfree/internal/testdb"
	"github.com/lockfree-go/lockfree/internal/testproc"
)

var ctx = context.Background()

const resourceDDL = `CREATE TABLE resource (
	id            text PRIMARY KEY,
	owner         text NOT NULL,
	fencing_token bigint NOT NULL DEFAULT 0
);
INSERT INTO resource (id, owner) VALUES ('res', 'nobody')`

var resource = fencedlock.Fence{Table: "resource", Key: "id"}

// pausedWriter is the child process of TestPausedClientIsRejected: it acquires
// the lock, reports its token, and writes when told to (after its parent has
// stopped it past its lease and resumed it).
func pausedWriter(in *bufio.Scanner, out io.Writer) error {
	pool, err := pgxpool.New(ctx, os.Getenv("CHILD_DATABASE_URL"))
	if err != nil {
		return err
	}
	defer pool.Close()
	store, err := fencedlock.NewPostgres(pool, nil)
	if err != nil {
		return err
	}
	lease, err := store.Acquire(ctx, "res", "child", time.Second)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "acquired %d\n", lease.Token)
	if !in.Scan() || in.Text() != "write" {
		return errors.New("expected a write command")
	}
	if os.Getenv("CHILD_FENCED") == "true" {
		err = resource.Update(ctx, pool, "res", lease.Token, "owner = $1", "child")
	} else {
		_, err = pool.Exec(ctx, `UPDATE resource SET owner = $1 WHERE id = 'res'`, "child")
	}
	var fenced *fencedlock.FencedError
	switch {
	case errors.As(err, &fenced):
		fmt.Fprintf(out, "result fenced %d\n", fenced.Required)
	case err != nil:
		return err
	default:
		fmt.Fprintln(out, "result written")
	}
	return nil
}

// The reference design's first verification test, with a real pause: the
// child holding the lock is stopped with SIGSTOP past its lease, another
// client takes over and writes, and the child is resumed and writes.
func TestPausedClientIsRejected(t *testing.T) {
	t.Parallel()
	for _, fenced := range []bool{true, false} {
		t.Run(map[bool]string{true: "fenced write rejected", false: "unfenced write corrupts"}[fenced], func(t *testing.T) {
			t.Parallel()
			db := testdb.New(t, fencedlock.Migrations()...)
			if _, err := db.Pool.Exec(ctx, resourceDDL); err != nil {
				t.Fatal(err)
			}
			store := newPostgres(t, db, false)

			child := testproc.Start(t, "paused-writer", "CHILD_DATABASE_URL="+db.URL, "CHILD_FENCED="+strconv.FormatBool(fenced))
			stale, _ := strconv.ParseInt(child.Expect("acquired", 60*time.Second), 10, 64)
			child.Stop()

			// Wait, on the database's clock, until the child's lease is over.
			waitFor(t, 30*time.Second, func() bool {
				_, held, err := store.Holder(ctx, "res")
				return err == nil && !held
			})
			b, err := store.Acquire(ctx, "res", "client-b", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if b.Token <= stale {
				t.Fatalf("new token %d not above the paused client's %d", b.Token, stale)
			}
			if err := resource.Update(ctx, db.Pool, "res", b.Token, "owner = $1", "client-b"); err != nil {
				t.Fatal(err)
			}

			child.Send("write")
			child.Continue()
			result := child.Expect("result", 60*time.Second)
			var owner string
			if err := db.Pool.QueryRow(ctx, `SELECT owner FROM resource WHERE id = 'res'`).Scan(&owner); err != nil {
				t.Fatal(err)
			}
			if fenced {
				if result != fmt.Sprintf("fenced %d", b.Token) {
					t.Fatalf("paused client's fenced write: %q, want rejection requiring %d", result, b.Token)
				}
				if owner != "client-b" {
					t.Fatalf("owner = %q after the rejected write, want client-b", owner)
				}
				return
			}
			// The twin: without the token check the paused client's write
			// lands over the new holder's, which shows the pause was real.
			if result != "written" || owner != "child" {
				t.Fatalf("unfenced write: result %q owner %q; the fault did not happen", result, owner)
			}
		})
	}
}

// The same sequence on the memory backend, with an in-process pause.
func TestPausedClientIsRejectedMemory(t *testing.T) {
	t.Parallel()
	for _, fenced := range []bool{true, false} {
		c := &clock.Manual{}
		store := newMemory(t, c)
		var gate fencedlock.Gate
		owner := "nobody"
		write := func(token int64, who string) error {
			if !fenced {
				owner = who
				return nil
			}
			return gate.Do(token, func() error { owner = who; return nil })
		}
		a, err := store.Acquire(ctx, "res", "client-a", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		c.Advance(2 * time.Second) // client-a is paused past its lease
		b, err := store.Acquire(ctx, "res", "client-b", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if err := write(b.Token, "client-b"); err != nil {
			t.Fatal(err)
		}
		err = write(a.Token, "client-a") // client-a wakes up
		if fenced {
			var fe *fencedlock.FencedError
			if !errors.As(err, &fe) || fe.Presented != a.Token || fe.Required != b.Token || owner != "client-b" {
				t.Fatalf("stale write: %v, owner %q", err, owner)
			}
		} else if owner != "client-a" {
			t.Fatalf("unfenced stale write did not land: owner %q", owner)
		}
	}
}

// Tokens keep increasing across release, expiry, purge of the rows and a
// restart of the PostgreSQL server.
func TestTokensSurviveRestartAndPurge(t *testing.T) {
	db := testdb.Faults(t, fencedlock.Migrations()...)
	store := newPostgres(t, db.DB, false)
	var last int64
	next := func(step string, ttl time.Duration) fencedlock.Lease {
		t.Helper()
		var l fencedlock.Lease
		// After a restart the pool's first use of an old connection fails.
		waitFor(t, 60*time.Second, func() bool {
			var err error
			l, err = store.Acquire(ctx, "durable", step, ttl)
			return err == nil
		})
		if l.Token <= last {
			t.Fatalf("%s: token %d after %d", step, l.Token, last)
		}
		last = l.Token
		return l
	}
	release := func(l fencedlock.Lease) {
		t.Helper()
		if err := store.Release(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	release(next("first", time.Minute))
	next("after release", 300*time.Millisecond) // left to expire
	waitFor(t, 30*time.Second, func() bool { _, held, _ := store.Holder(ctx, "durable"); return !held })
	release(next("after expiry", time.Minute))
	n, err := store.Purge(ctx, 0, 100)
	if err != nil || n != 1 {
		t.Fatalf("Purge = %d, %v; want the one row", n, err)
	}
	release(next("after purge", time.Minute))
	db.Control("restart")
	release(next("after restart", time.Minute))
	db.Control("stop")
	db.Control("start")
	next("after stop and start", time.Minute)
}

// When renewals fail (a partition between the holder and PostgreSQL), the
// keepalive cancels its context before another client can acquire the lock.
func TestKeepaliveCancelsBeforeTakeover(t *testing.T) {
	t.Parallel()
	db := testdb.New(t, fencedlock.Migrations()...)
	direct := newPostgres(t, db, false)

	proxy, err := faultproxy.Start(hostPort(t, db.URL))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	u, err := pgaddr.WithHostPort(db.URL, proxy.Addr())
	if err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.New(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	partitioned, err := fencedlock.NewPostgres(pool, nil)
	if err != nil {
		t.Fatal(err)
	}

	const ttl = 3 * time.Second
	a, err := partitioned.Acquire(ctx, "kept", "client-a", ttl)
	if err != nil {
		t.Fatal(err)
	}
	k, err := fencedlock.Keep(ctx, partitioned, a, &fencedlock.KeepaliveConfig{Margin: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Stop()
	// Let one renewal through, then cut the holder off.
	waitFor(t, 30*time.Second, func() bool { return k.Lease().Expires.After(a.Expires) })
	proxy.Set(faultproxy.Blackhole, 0)

	var b fencedlock.Lease
	waitFor(t, 60*time.Second, func() bool {
		var err error
		b, err = direct.Acquire(ctx, "kept", "client-b", ttl)
		return err == nil
	})
	// client-b holds the lock now; client-a must already have been told.
	select {
	case <-k.Context().Done():
	default:
		t.Fatal("client-b acquired while client-a's keepalive context was still live")
	}
	if cause := context.Cause(k.Context()); !errors.Is(cause, fencedlock.ErrExpiring) {
		t.Fatalf("cause = %v, want ErrExpiring", cause)
	}
	if k.HeldSafely() {
		t.Fatal("HeldSafely after the lease was lost")
	}
	if b.Token <= a.Token {
		t.Fatalf("token %d after %d", b.Token, a.Token)
	}
	proxy.Set(faultproxy.Pass, 0)
}

// A renewal that finds the lease taken reports ErrLost at once.
func TestKeepaliveReportsLostLease(t *testing.T) {
	t.Parallel()
	c := &clock.Manual{}
	store := newMemory(t, c)
	a, err := store.Acquire(ctx, "lost", "a", 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c.Advance(4 * time.Second) // the store's clock runs ahead of the keepalive's
	if _, err := store.Acquire(ctx, "lost", "b", time.Minute); err != nil {
		t.Fatal(err)
	}
	k, err := fencedlock.Keep(ctx, store, a, &fencedlock.KeepaliveConfig{Interval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	<-k.Context().Done()
	if cause := context.Cause(k.Context()); !errors.Is(cause, fencedlock.ErrLost) {
		t.Fatalf("cause = %v, want ErrLost", cause)
	}
	<-k.Done()
}

func TestKeepaliveStopsAfterMaxRenewals(t *testing.T) {
	t.Parallel()
	store := newMemory(t, nil)
	a, err := store.Acquire(ctx, "bounded", "a", 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	k, err := fencedlock.Keep(ctx, store, a, &fencedlock.KeepaliveConfig{MaxRenewals: 2})
	if err != nil {
		t.Fatal(err)
	}
	<-k.Context().Done()
	if cause := context.Cause(k.Context()); !errors.Is(cause, fencedlock.ErrMaxRenewals) {
		t.Fatalf("cause = %v, want ErrMaxRenewals", cause)
	}
	if err := k.Release(ctx); err != nil && !errors.Is(err, fencedlock.ErrNotHeld) {
		t.Fatal(err)
	}
}

// The same-database path: Verify share-locks the lease inside the resource's
// transaction, so a takeover waits until that transaction ends.
func TestVerifyBlocksTakeoverUntilCommit(t *testing.T) {
	t.Parallel()
	db := testdb.New(t, fencedlock.Migrations()...)
	store := newPostgres(t, db, false)
	a, err := store.Acquire(ctx, "same-db", "a", 500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if err := store.Verify(ctx, tx, a); err != nil {
		t.Fatalf("Verify of the current lease: %v", err)
	}
	var txPID int
	if err := tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&txPID); err != nil {
		t.Fatal(err)
	}
	acquired := make(chan fencedlock.Lease, 1)
	go func() {
		for {
			l, err := store.Acquire(ctx, "same-db", "b", time.Minute)
			if err == nil {
				acquired <- l
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	// Once the lease has expired on the server's clock, b's acquire blocks
	// on the row that a's transaction share-locked.
	waitFor(t, 30*time.Second, func() bool {
		var waiting bool
		db.Pool.QueryRow(ctx, `SELECT count(*) > 0 FROM pg_stat_activity WHERE $1 = ANY (pg_blocking_pids(pid))`, txPID).Scan(&waiting)
		return waiting
	})
	select {
	case l := <-acquired:
		t.Fatalf("b acquired (token %d) while a's verified transaction was open", l.Token)
	default:
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	b := <-acquired
	if err := store.Verify(ctx, db.Pool, a); !errors.Is(err, fencedlock.ErrFenced) {
		t.Fatalf("Verify of the superseded lease: %v, want ErrFenced", err)
	}
	if err := store.Release(ctx, b); err != nil {
		t.Fatal(err)
	}
	if err := store.Verify(ctx, db.Pool, b); !errors.Is(err, fencedlock.ErrNotHeld) {
		t.Fatalf("Verify of the released lease: %v, want ErrNotHeld", err)
	}
}

func TestFenceUpdate(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	if _, err := db.Pool.Exec(ctx, resourceDDL); err != nil {
		t.Fatal(err)
	}
	if err := resource.Update(ctx, db.Pool, "res", 5, "owner = $1", "five"); err != nil {
		t.Fatal(err)
	}
	if err := resource.Update(ctx, db.Pool, "res", 5, "owner = $1", "five again"); err != nil {
		t.Fatalf("same token twice: %v", err)
	}
	var fe *fencedlock.FencedError
	if err := resource.Update(ctx, db.Pool, "res", 4, "owner = $1", "four"); !errors.As(err, &fe) || fe.Required != 5 || fe.Presented != 4 {
		t.Fatalf("stale token: %v", err)
	}
	if err := resource.Update(ctx, db.Pool, "missing", 9, "owner = $1", "x"); !errors.Is(err, fencedlock.ErrNotFound) {
		t.Fatalf("missing row: %v", err)
	}
	// A fenced read raises the row's token: a holder that read with 6 cannot
	// be overtaken by a late write with 5.
	var owner string
	if err := resource.Read(ctx, db.Pool, "res", 6, "owner", &owner); err != nil || owner != "five again" {
		t.Fatalf("fenced read = %q, %v", owner, err)
	}
	if err := resource.Update(ctx, db.Pool, "res", 5, "owner = $1", "late five"); !errors.As(err, &fe) || fe.Required != 6 {
		t.Fatalf("write with 5 after a read with 6: %v", err)
	}
	if err := resource.Read(ctx, db.Pool, "res", 4, "owner", &owner); !errors.As(err, &fe) || fe.Required != 6 {
		t.Fatalf("stale fenced read: %v", err)
	}
	if err := resource.Read(ctx, db.Pool, "missing", 9, "owner", &owner); !errors.Is(err, fencedlock.ErrNotFound) {
		t.Fatalf("fenced read of a missing row: %v", err)
	}
	if err := resource.Update(ctx, db.Pool, "res", 6, "owner = $1", "five again"); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []struct {
		f     fencedlock.Fence
		token int64
		set   string
	}{
		{fencedlock.Fence{Key: "id"}, 1, "owner = $1"},
		{resource, 0, "owner = $1"},
		{resource, 1, " "},
	} {
		if err := bad.f.Update(ctx, db.Pool, "res", bad.token, bad.set, "x"); !errors.Is(err, fencedlock.ErrInvalid) {
			t.Errorf("Update(%+v, %d, %q) = %v, want ErrInvalid", bad.f, bad.token, bad.set, err)
		}
	}
	var token int64
	db.Pool.QueryRow(ctx, `SELECT owner, fencing_token FROM resource WHERE id = 'res'`).Scan(&owner, &token)
	if owner != "five again" || token != 6 {
		t.Fatalf("row = %q/%d", owner, token)
	}
}

// A waiter on PostgreSQL is woken by the release itself, through the
// store's own LISTEN connection (Notify on a pool): its poll delay is ten
// minutes, so only a wake-up can end its wait within the test. Once the wait
// is over, the store gives its listening connection up.
func TestPostgresWakesItsWaiters(t *testing.T) {
	t.Parallel()
	db := testdb.New(t, fencedlock.Migrations()...)
	// A pool of its own, named, so that other tests' listeners do not count.
	cfg, err := pgxpool.ParseConfig(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	app := "wake-" + db.Schema
	cfg.ConnConfig.RuntimeParams["application_name"] = app
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	store, err := fencedlock.NewPostgres(pool, &fencedlock.PostgresConfig{Notify: true})
	if err != nil {
		t.Fatal(err)
	}
	a, err := store.Acquire(ctx, "notified", "a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		_, err := fencedlock.AcquireWait(ctx, store, "notified", "b", time.Minute,
			&fencedlock.WaitConfig{MinDelay: 10 * time.Minute, MaxDelay: 10 * time.Minute, Jitter: 0.01})
		got <- err
	}()
	// The waiter's first attempt has failed and it listens: its LISTEN
	// connection is up.
	waitFor(t, 30*time.Second, func() bool { return listening(t, db, app) == 1 })
	if err := store.Release(ctx, a); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the waiter was not woken by the release")
	}
	waitFor(t, 30*time.Second, func() bool { return listening(t, db, app) == 0 })
}

// listening counts the sessions of application app LISTENing for releases.
func listening(t *testing.T, db *testdb.DB, app string) int {
	t.Helper()
	var n int
	err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
		WHERE application_name = $1 AND query LIKE 'LISTEN %'`, app).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func waitFor(t testing.TB, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %v", timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// hostPort is the TCP address of the server u connects to.
func hostPort(t testing.TB, u string) string {
	t.Helper()
	addr, err := pgaddr.HostPort(u)
	if err != nil {
		t.Fatal(err)
	}
	return addr
}
