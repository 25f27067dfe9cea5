package failover_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/lockfree-go/lockfree/internal/replpair"
)

// Test 3 of docs/failover.md, with the timeline scheme switched off (the
// plain forms) and on: which synchronous replication protects a fence a
// client was told it holds, and which does not.

// An acknowledged commit under synchronous replication survives the
// failover: no plain fence goes back either.
func TestSyncAcknowledgedCommit(t *testing.T) {
	p := replpair.Get(t)
	p.SetSync(true)
	setup(t, p)
	old := p.Primary()
	before := mintAll(t, p.Connect(p.URL(old)), 50)
	p.Kill(old)
	p.Promote()
	after := mintAll(t, p.Connect(p.MultiURL()), 10)
	for _, f := range fences() {
		if hi, lo := slices.Max(before[f]), slices.Min(after[f]); lo <= hi {
			t.Errorf("%v went back although every commit was acknowledged by the standby: %d after, %d before", f, lo, hi)
		}
	}
}

// noticed is a connection that keeps the notices (warnings) it receives.
type noticed struct {
	*pgx.Conn
	mu      sync.Mutex
	notices []string
}

func connectNoticed(t *testing.T, p *replpair.Test, url string) *noticed {
	t.Helper()
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	n := &noticed{}
	cfg.OnNotice = func(_ *pgconn.PgConn, notice *pgconn.Notice) {
		n.mu.Lock()
		defer n.mu.Unlock()
		n.notices = append(n.notices, notice.Severity+": "+notice.Message)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if n.Conn, err = pgx.ConnectConfig(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close(context.Background()) })
	return n
}

func (n *noticed) warned(substr string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.ContainsFunc(n.notices, func(s string) bool { return strings.Contains(s, substr) })
}

// waitSyncRep returns once backend pid waits for the synchronous standby.
func waitSyncRep(t *testing.T, admin *pgx.Conn, pid uint32) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	for {
		var waiting bool
		err := admin.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_stat_activity WHERE pid = $1 AND wait_event = 'SyncRep')`,
			pid).Scan(&waiting)
		if err != nil {
			t.Fatalf("backend %d never waited for the synchronous standby: %v", pid, err)
		}
		if waiting {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitNotSyncRep returns once backend pid no longer waits for the
// synchronous standby (it went on, or it is gone).
func waitNotSyncRep(t *testing.T, admin *pgx.Conn, pid uint32) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	for {
		var waiting bool
		err := admin.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_stat_activity WHERE pid = $1 AND wait_event = 'SyncRep')`,
			pid).Scan(&waiting)
		if err != nil {
			t.Fatalf("backend %d still waits for the synchronous standby: %v", pid, err)
		}
		if !waiting {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// mintTx mints every fence n times in one transaction and commits it with
// ctx. It returns what was minted, and the commit's error in commitErr: the
// caller tells it from err, the failure of a mint. It runs on goroutines
// other than the test's, so it does not fail the test itself.
func mintTx(ctx context.Context, conn *pgx.Conn, n int) (m minted, commitErr, err error) {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return nil, nil, err
	}
	m = minted{}
	for range n {
		for _, f := range fences() {
			v, err := f.mint(ctx, tx)
			if err != nil {
				return nil, nil, fmt.Errorf("mint %v: %w", f, err)
			}
			m[f] = append(m[f], v)
		}
	}
	return m, tx.Commit(ctx), nil
}

// A commit whose wait for the synchronous standby is cancelled has
// committed on the primary, and the client is told so with a warning: the
// fences it minted are lost by a failover, and the plain forms go back.
func TestSyncCancelledWait(t *testing.T) {
	p := replpair.Get(t)
	p.SetSync(true)
	setup(t, p)
	old := p.Primary()
	before := mintAll(t, p.Connect(p.URL(old)), 5)
	admin := p.Connect(p.URL(old))
	client := connectNoticed(t, p, p.URL(old))

	p.HoldStandby()
	type result struct {
		minted         minted
		commitErr, err error
	}
	done := make(chan result, 1)
	go func() {
		m, commitErr, err := mintTx(t.Context(), client.Conn, 40)
		done <- result{m, commitErr, err}
	}()
	waitSyncRep(t, admin, client.PgConn().PID())
	if _, err := admin.Exec(t.Context(), `SELECT pg_cancel_backend($1)`, client.PgConn().PID()); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.commitErr != nil {
		t.Fatalf("the commit whose wait was cancelled failed (%v): the client was not told it holds its fences", r.commitErr)
	}
	if !client.warned("canceling wait for synchronous replication") {
		t.Errorf("no warning about the cancelled wait; notices: %q", client.notices)
	}
	for f, vs := range r.minted {
		before[f] = append(before[f], vs...)
	}
	measureContextCancel(t, p, admin)

	p.Kill(old)
	p.Promote()
	checkAfter(t, before, mintAll(t, p.Connect(p.MultiURL()), 50))
}

// measureContextCancel: a Go client whose context ends while its commit
// waits for the synchronous standby. pgx cancels the wait; the commit has
// happened on the primary all the same.
func measureContextCancel(t *testing.T, p *replpair.Test, admin *pgx.Conn) {
	t.Helper()
	conn := p.Connect(p.URL(p.Primary()))
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	var m minted
	var mintErr error
	go func() {
		var commitErr error
		m, commitErr, mintErr = mintTx(ctx, conn, 1)
		done <- commitErr
	}()
	pid := conn.PgConn().PID()
	waitSyncRep(t, admin, pid)
	cancel()
	err := <-done
	if mintErr != nil {
		t.Fatal(mintErr)
	}
	waitNotSyncRep(t, admin, pid)
	f := plainEpoch
	var now int64
	if err := admin.QueryRow(t.Context(), `SELECT epoch FROM plain_epochs`).Scan(&now); err != nil {
		t.Fatal(err)
	}
	// pgx reports the cancellation and drops the connection, so this client
	// does not believe it holds the fence; other sessions on the primary see
	// it committed all the same.
	if !errors.Is(err, context.Canceled) || now != m[f][0] {
		t.Errorf("context cancelled during the commit wait: Commit returned %v, the primary shows %v = %d, the client minted %d; want context.Canceled and the commit made",
			err, f, now, m[f][0])
	}
	t.Logf("context cancelled during the commit wait: Commit returned %v (connection closed: %v); the primary shows %d, the client minted %d",
		err, conn.IsClosed(), now, m[f][0])
}

// A bare nextval, outside any transaction that writes, returns at once
// under synchronous replication when its value was logged ahead by an
// earlier call — even by a transaction that rolled back, whose WAL was never
// waited for: the client holds a value the standby has no record of, and a
// failover hands it out again. fence_mint on the same path does not go back.
func TestSyncBareNextval(t *testing.T) {
	p := replpair.Get(t)
	p.SetSync(true)
	old := p.Primary()
	p.Exec(old, `CREATE SEQUENCE bare_plain; CREATE SEQUENCE bare_era`)
	setup(t, p)
	conn := p.Connect(p.URL(old))
	era := func(seq string) string { return strings.Replace(eraMint, "SEQ", seq, 1) }
	// The first fence_mint records the era; its commit waits while the
	// standby streams.
	before := map[string][]int64{"bare_plain": nil, "bare_era": nil}
	before["bare_era"] = append(before["bare_era"], scalar(t, t.Context(), conn, era("bare_era")))

	p.HoldStandby()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	for _, q := range []string{`SELECT nextval('bare_plain')`, era("bare_era")} {
		// A rollback does not wait for the standby, whatever it wrote.
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := tx.QueryRow(ctx, q).Scan(new(int64)); err != nil {
			t.Fatal(err)
		}
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// Within the values logged ahead: no WAL, no wait. A checkpoint in
	// between would make one wait for ever: ctx then ends the test.
	for range 10 {
		before["bare_plain"] = append(before["bare_plain"], scalar(t, ctx, conn, `SELECT nextval('bare_plain')`))
		before["bare_era"] = append(before["bare_era"], scalar(t, ctx, conn, era("bare_era")))
	}
	p.Kill(old)
	p.Promote()
	conn = p.Connect(p.MultiURL())
	plainAfter := scalar(t, t.Context(), conn, `SELECT nextval('bare_plain')`)
	eraAfter := scalar(t, t.Context(), conn, era("bare_era"))
	if hi := slices.Max(before["bare_plain"]); plainAfter > hi {
		t.Errorf("foil: a bare nextval did not go back (%d after, %d before): the test proves nothing", plainAfter, hi)
	}
	if hi := slices.Max(before["bare_era"]); eraAfter <= hi {
		t.Errorf("a bare fence_mint went back: %d after, %d before", eraAfter, hi)
	}
	t.Logf("bare nextval: before up to %d, after %d; bare fence_mint: before up to %d, after %d",
		slices.Max(before["bare_plain"]), plainAfter, slices.Max(before["bare_era"]), eraAfter)
}

func scalar(t *testing.T, ctx context.Context, conn *pgx.Conn, sql string) int64 {
	t.Helper()
	var v int64
	if err := conn.QueryRow(ctx, sql).Scan(&v); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return v
}
