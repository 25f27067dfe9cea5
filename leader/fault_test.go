package leader_test

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

	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/internal/faultproxy"
	"github.com/lockfree-go/lockfree/internal/pgaddr"
	"github.com/lockfree-go/lockfree/internal/testdb"
	"github.com/lockfree-go/lockfree/internal/testproc"
	"github.com/lockfree-go/lockfree/leader"
)

// The job's table: one closing row per period, written by the leader.
const closingDDL = `CREATE TABLE closing (
	period        text PRIMARY KEY,
	closed_by     text NOT NULL,
	fencing_token bigint NOT NULL DEFAULT 0
);
INSERT INTO closing (period, closed_by) VALUES ('2026-01', 'nobody')`

var closing = fencedlock.Fence{Table: "closing", Key: "period"}

// pausedLeader is the child process of TestPausedLeaderIsFenced: it
// campaigns, checks that it leads, reports its term, and writes when told
// to — after its parent stopped it past its lease, elected another leader
// and resumed it. With CHILD_FENCED=true it writes with its term
// (Fence.Update); otherwise it writes as a leader without a term check
// does, trusting the check it made before the pause.
func pausedLeader(in *bufio.Scanner, out io.Writer) error {
	pool, err := pgxpool.New(ctx, os.Getenv("CHILD_DATABASE_URL"))
	if err != nil {
		return err
	}
	defer pool.Close()
	store, err := fencedlock.NewPostgres(pool, nil)
	if err != nil {
		return err
	}
	if err := pool.Ping(ctx); err != nil { // connected before the lease's time starts
		return err
	}
	e, err := leader.NewElection(store, "close-period", &leader.Config{Holder: "child", TTL: 5 * time.Second})
	if err != nil {
		return err
	}
	term, err := e.Campaign(ctx, "child")
	if err != nil {
		return err
	}
	defer term.Resign(ctx)
	if !term.HeldSafely() { // the machine is too loaded for a 5 s lease
		return fmt.Errorf("elected, but not leading safely: %v", context.Cause(term.Context()))
	}
	fmt.Fprintf(out, "elected %d\n", term.Token())
	if !in.Scan() || in.Text() != "write" {
		return errors.New("expected a write command")
	}
	if os.Getenv("CHILD_FENCED") == "true" {
		err = closing.Update(ctx, pool, "2026-01", term.Token(), "closed_by = $1", "child")
	} else {
		_, err = pool.Exec(ctx, `UPDATE closing SET closed_by = $1 WHERE period = '2026-01'`, "child")
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

// A leader is stopped with SIGSTOP past its lease, right after it checked
// that it leads; another candidate is elected and closes the period; the
// first is resumed and writes. With its term the resource refuses it, and
// the new leader's row stays. The foil, a leader that writes without its
// term, overwrites the new leader's row: the pause was real.
func TestPausedLeaderIsFenced(t *testing.T) {
	t.Parallel()
	for _, fenced := range []bool{true, false} {
		t.Run(map[bool]string{true: "term refused", false: "naive leader overwrites"}[fenced], func(t *testing.T) {
			t.Parallel()
			db := testdb.New(t, fencedlock.Migrations()...)
			if _, err := db.Pool.Exec(ctx, closingDDL); err != nil {
				t.Fatal(err)
			}
			child := testproc.Start(t, "paused-leader", "CHILD_DATABASE_URL="+db.URL, "CHILD_FENCED="+strconv.FormatBool(fenced))
			stale, _ := strconv.ParseInt(child.Expect("elected", 60*time.Second), 10, 64)
			child.Stop()

			e, err := leader.NewElection(newPostgres(t, db, false), "close-period", &leader.Config{Holder: "parent", TTL: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
			defer cancel()
			term, err := e.Campaign(cctx, "parent") // once the child's lease expired
			if err != nil {
				t.Fatal(err)
			}
			defer term.Resign(ctx)
			if term.Token() <= stale {
				t.Fatalf("new term %d not above the paused leader's %d", term.Token(), stale)
			}
			if err := closing.Update(ctx, db.Pool, "2026-01", term.Token(), "closed_by = $1", "parent"); err != nil {
				t.Fatal(err)
			}

			child.Send("write")
			child.Continue()
			result := child.Expect("result", 60*time.Second)
			var closedBy string
			if err := db.Pool.QueryRow(ctx, `SELECT closed_by FROM closing WHERE period = '2026-01'`).Scan(&closedBy); err != nil {
				t.Fatal(err)
			}
			if fenced {
				if result != fmt.Sprintf("fenced %d", term.Token()) || closedBy != "parent" {
					t.Fatalf("paused leader's write: %q, closed by %q; want refused for term %d, closed by parent", result, closedBy, term.Token())
				}
				return
			}
			if result != "written" || closedBy != "child" {
				t.Fatalf("naive leader's write: %q, closed by %q; the pause did not happen", result, closedBy)
			}
		})
	}
}

// A leader cut off from PostgreSQL (its renewals blackholed) is told —
// its term's context ends with fencedlock.ErrExpiring — before another
// candidate is elected. TestGuards runs it; under the mutant
// leader.term.context the term's context is not the lease's, and the check
// sees a leader still working while another leads.
func checkToldBeforeNextElected(t *testing.T) error {
	db := testdb.New(t, fencedlock.Migrations()...)
	direct := newPostgres(t, db, false)
	proxy, err := faultproxy.Start(pgHostPort(t, db.URL))
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
	cut, err := fencedlock.NewPostgres(pool, nil)
	if err != nil {
		t.Fatal(err)
	}

	const ttl = 4 * time.Second
	ea, err := leader.NewElection(cut, "job", &leader.Config{Holder: "a", TTL: ttl,
		Keepalive: &fencedlock.KeepaliveConfig{Margin: time.Second, MaxRenewals: -1}})
	if err != nil {
		t.Fatal(err)
	}
	a := renewedOnce(t, ea)
	defer a.Resign(ctx)
	proxy.Set(faultproxy.Blackhole, 0)
	defer proxy.Set(faultproxy.Pass, 0)

	eb, err := leader.NewElection(direct, "job", &leader.Config{Holder: "b", TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	bctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	b, err := eb.Campaign(bctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Resign(ctx)
	// b leads now; a must already have been told.
	select {
	case <-a.Context().Done():
	default:
		return fmt.Errorf("b was elected (term %d) while a's term %d was still live", b.Token(), a.Token())
	}
	if cause := context.Cause(a.Context()); !errors.Is(cause, fencedlock.ErrExpiring) {
		return fmt.Errorf("a's cause %v, want fencedlock.ErrExpiring", cause)
	}
	if b.Token() <= a.Token() {
		t.Fatalf("b's term %d not above a's %d", b.Token(), a.Token())
	}
	return nil
}

// renewedOnce campaigns on e until a term has been renewed once, and
// returns that term: on a loaded machine a term can end before its first
// renewal (its grant took most of its safe time), and then proves nothing.
func renewedOnce(t *testing.T, e *leader.Election) *leader.Term {
	t.Helper()
	for range 5 {
		term, err := e.Campaign(ctx, e.Holder())
		if err != nil {
			t.Fatal(err)
		}
		first := term.Lease().Expires
		var renewed bool
		waitFor(t, 60*time.Second, func() bool {
			renewed = term.Lease().Expires.After(first)
			return renewed || isDone(term.Done())
		})
		if renewed {
			return term
		}
		t.Logf("term %d ended before its first renewal (%v): again", term.Token(), context.Cause(term.Context()))
		_ = term.Resign(ctx)
	}
	t.Fatal("no term was renewed once in 5 campaigns")
	return nil
}

func isDone(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// checkToldWhenLost: a leader whose lease an operator released, and
// another took, is told at its next renewal (fencedlock.ErrLost).
func checkToldWhenLost(t *testing.T) error {
	store := newMemory(t, nil)
	cfg := func(holder string) *leader.Config {
		return &leader.Config{Holder: holder, TTL: time.Minute,
			Keepalive: &fencedlock.KeepaliveConfig{Interval: 10 * time.Millisecond, MaxRenewals: -1}}
	}
	ea, err := leader.NewElection(store, "job", cfg("a"))
	if err != nil {
		t.Fatal(err)
	}
	a, err := ea.Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Resign(ctx)
	forced, _, err := store.Holder(ctx, ea.Name())
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Release(ctx, forced); err != nil {
		t.Fatal(err)
	}
	eb, err := leader.NewElection(store, "job", cfg("b"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := eb.Campaign(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Resign(ctx)
	select {
	case <-a.Context().Done():
	case <-time.After(5 * time.Second): // 500 renewal intervals
		return fmt.Errorf("a was not told that b leads (term %d)", b.Token())
	}
	if cause := context.Cause(a.Context()); !errors.Is(cause, fencedlock.ErrLost) {
		return fmt.Errorf("a's cause %v, want fencedlock.ErrLost", cause)
	}
	return nil
}

// guard is one check and the mutant that breaks it.
type guard struct {
	mutant string
	check  func(t *testing.T) error
}

func guards() []guard {
	return []guard{
		{"leader.term.context/expiring", checkToldBeforeNextElected},
		{"leader.term.context/lost", checkToldWhenLost},
	}
}

func TestGuards(t *testing.T) {
	t.Parallel()
	for _, g := range guards() {
		t.Run(g.mutant, func(t *testing.T) {
			t.Parallel()
			if err := g.check(t); err != nil {
				t.Fatal(err)
			}
		})
	}
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

func pgHostPort(t testing.TB, u string) string {
	t.Helper()
	addr, err := pgaddr.HostPort(u)
	if err != nil {
		t.Fatal(err)
	}
	return addr
}
