// Package testrepl gives a test a real PostgreSQL primary with a streaming
// standby on this machine, and the steps of a failover one at a time: hold
// the standby's WAL receiver, mint and commit on the primary, kill or isolate
// the primary, promote the standby, reconnect through a multi-host URL with
// target_session_attrs=read-write.
//
// A test binary that uses it calls [Main] from its TestMain. Its first [Get]
// makes a pair of its own with scripts/pg-replication.sh, in a temporary
// folder and on free ports, so that test binaries running side by side never
// share one; Main removes it when the tests end (and a later binary removes
// what a killed one left behind). Tests use the pair one after another: Get
// waits until the previous test has ended, then hands the pair over healthy —
// both nodes up, neither isolated, the standby streaming, replication
// asynchronous — rebuilding the standby from the primary when the previous
// test promoted it. Each test gets a schema of its own, which the URLs set as
// search_path and which the standby has replayed before Get returns.
//
// The pair needs bash and PostgreSQL's server programs (initdb, pg_ctl,
// pg_basebackup: PATH, PG_BINDIR or Debian's /usr/lib/postgresql). Without
// them the test is skipped, or failed under CI=true, like every test of this
// module that lacks a service.
package testrepl

import (
	"context"
	"regexp"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lockfree-go/lockfree/internal/pgschema"
	"github.com/lockfree-go/lockfree/internal/replpair"
	"github.com/lockfree-go/lockfree/internal/testdb"
)

// Node names one server of the pair: 1 or 2. Which one is the primary
// changes with every promotion.
type Node = replpair.Node

// Pair is one test's hold on the binary's replication pair. Its methods fail
// the test when a step fails, and are meant for the test's own goroutine.
type Pair struct {
	t      testing.TB
	c      *cluster
	schema string
}

// Get returns the binary's pair for t, made on first use and handed over
// healthy. It holds the pair until t ends.
func Get(t testing.TB) *Pair {
	t.Helper()
	c, err := theCluster()
	if err != nil {
		if why, ok := replpair.IsMissing(err); ok {
			testdb.Missing(t, "a PostgreSQL replication pair", why)
			return nil
		}
		t.Fatalf("testrepl: %v", err)
	}
	c.mu.Lock()
	c.t = t
	p := &Pair{t: t, c: c, schema: pgschema.Name("t_" + t.Name())}
	t.Cleanup(func() {
		p.dropSchema()
		c.t = nil // t may no longer log
		c.mu.Unlock()
	})
	if err := c.restore(); err != nil {
		t.Logf("testrepl: restoring the pair failed (%v); making it again", err)
		if err := c.remake(); err != nil {
			t.Fatalf("testrepl: %v", err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := pgschema.Create(ctx, p.URL(p.Primary()), p.schema); err != nil {
		t.Fatalf("testrepl: on %v: %v", p.Primary(), err)
	}
	p.WaitReplayed()
	return p
}

// dropSchema drops the test's schema from the primary, so that the next
// rebuild of the standby copies no more than it needs to. A primary the test
// left down, isolated, or waiting for a held synchronous standby keeps it,
// which costs only time.
func (p *Pair) dropSchema() {
	if !p.c.pair.Writable() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := pgschema.Drop(ctx, p.URL(p.Primary()), p.schema); err != nil {
		p.t.Logf("testrepl: %v", err)
	}
}

// Shared is the binary's pair itself, for code that takes steps of its own
// on it (the harness's failover fault); the next Get restores whatever they
// did.
func (p *Pair) Shared() *replpair.Pair { return p.c.pair }

// Schema is the test's own schema: the URLs set it as search_path.
func (p *Pair) Schema() string { return p.schema }

// Primary returns the node that accepts writes (after a promotion, the
// promoted one; an isolated old primary does too, but is no longer this).
func (p *Pair) Primary() Node { return p.c.pair.Primary() }

// Standby returns the node that is not Primary.
func (p *Pair) Standby() Node { return p.c.pair.Standby() }

// URL connects to node n alone, in the test's schema.
func (p *Pair) URL(n Node) string {
	return p.c.pair.URL(n, "search_path="+p.schema)
}

// MultiURL lists both nodes with target_session_attrs=read-write, as an
// application configured for failover would: pgx connects to the first one
// that accepts writes, in list order (node1 first).
func (p *Pair) MultiURL() string {
	return p.c.pair.MultiURL("search_path=" + p.schema)
}

// Connect opens a connection to url (URL or MultiURL), closed when the test
// ends.
func (p *Pair) Connect(url string) *pgx.Conn {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		p.t.Fatalf("testrepl: connect %s: %v", redact(url), err)
	}
	p.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		conn.Close(ctx)
	})
	return conn
}

// Exec runs sql on node n through a connection of its own.
func (p *Pair) Exec(n Node, sql string, args ...any) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, p.URL(n))
	if err != nil {
		p.t.Fatalf("testrepl: connect to %v: %v", n, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql, args...); err != nil {
		p.t.Fatalf("testrepl: on %v: %s: %v", n, sql, err)
	}
}

// Timeline returns the WAL timeline node n writes on (a primary) or has
// received (a standby).
func (p *Pair) Timeline(n Node) int64 {
	p.t.Helper()
	var tl int64
	p.queryRow(n, timelineSQL, &tl)
	return tl
}

// timelineSQL reads the timeline from the name of the WAL file being
// written, which changes the moment a promotion ends; pg_control_checkpoint()
// lags until the next checkpoint. A standby has no current WAL position.
const timelineSQL = `SELECT CASE WHEN pg_is_in_recovery()
	THEN coalesce((SELECT received_tli FROM pg_stat_wal_receiver), 0)::bigint
	ELSE ('x' || left(pg_walfile_name(pg_current_wal_lsn()), 8))::bit(32)::bigint END`

func (p *Pair) queryRow(n Node, sql string, dest ...any) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, p.URL(n))
	if err != nil {
		p.t.Fatalf("testrepl: connect to %v: %v", n, err)
	}
	defer conn.Close(ctx)
	if err := conn.QueryRow(ctx, sql).Scan(dest...); err != nil {
		p.t.Fatalf("testrepl: on %v: %v", n, err)
	}
}

var password = regexp.MustCompile(`//[^@/]*@`)

func redact(url string) string { return password.ReplaceAllString(url, "//…@") }
