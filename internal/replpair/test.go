package replpair

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lockfree-go/lockfree/internal/pgschema"
)

// The tests' side of the package: each test binary that fails a pair over
// makes one pair of its own on its first Get, hands it to its tests one
// after another, healthy, each in a schema of its own, and removes it when
// its tests end (Main). It takes TB and M rather than the testing package's
// types, so that the lab, which links this package for its failover fault,
// does not link the testing package.

// TB is what Get needs of a test: testing.TB satisfies it.
type TB interface {
	Helper()
	Name() string
	Cleanup(func())
	Logf(format string, args ...any)
	Fatalf(format string, args ...any)
	Fatal(args ...any)
	Skip(args ...any)
}

// M is what Main needs of a test binary: *testing.M satisfies it.
type M interface{ Run() int }

// missing skips t for want of what a pair needs, or fails it under
// CI=true, as every test of the repository that lacks a service does.
func missing(t TB, why string) {
	t.Helper()
	msg := fmt.Sprintf("a PostgreSQL replication pair is not available: %s; run `make test`, or `make services` and the exports it prints", why)
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// Test is one test's hold on the binary's replication pair (Get). Its
// methods fail the test when a step fails, and are meant for the test's
// own goroutine.
type Test struct {
	t      TB
	c      *cluster
	schema string
}

// Get returns the binary's pair for t, made on first use and handed over
// healthy. It holds the pair until t ends.
func Get(t TB) *Test {
	t.Helper()
	c, err := theCluster()
	if err != nil {
		if why, ok := IsMissing(err); ok {
			missing(t, why)
			return nil
		}
		t.Fatalf("replpair: %v", err)
	}
	c.mu.Lock()
	c.t = t
	p := &Test{t: t, c: c, schema: pgschema.Name("t_" + t.Name())}
	t.Cleanup(func() {
		p.dropSchema()
		c.t = nil // t may no longer log
		c.mu.Unlock()
	})
	if err := c.restore(); err != nil {
		t.Logf("replpair: restoring the pair failed (%v); making it again", err)
		if err := c.remake(); err != nil {
			t.Fatalf("replpair: %v", err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := pgschema.Create(ctx, p.URL(p.Primary()), p.schema); err != nil {
		t.Fatalf("replpair: on %v: %v", p.Primary(), err)
	}
	p.WaitReplayed()
	return p
}

// dropSchema drops the test's schema from the primary, so that the next
// rebuild of the standby copies no more than it needs to. A primary the test
// left down, isolated, or waiting for a held synchronous standby keeps it,
// which costs only time.
func (p *Test) dropSchema() {
	if !p.c.pair.Writable() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := pgschema.Drop(ctx, p.URL(p.Primary()), p.schema); err != nil {
		p.t.Logf("replpair: %v", err)
	}
}

// Shared is the binary's pair itself, for code that takes steps of its own
// on it (the lab's failover fault); the next Get restores whatever they
// did.
func (p *Test) Shared() *Pair { return p.c.pair }

// Schema is the test's own schema: the URLs set it as search_path.
func (p *Test) Schema() string { return p.schema }

// Primary returns the node that accepts writes (after a promotion, the
// promoted one; an isolated old primary does too, but is no longer this).
func (p *Test) Primary() Node { return p.c.pair.Primary() }

// Standby returns the node that is not Primary.
func (p *Test) Standby() Node { return p.c.pair.Standby() }

// URL connects to node n alone, in the test's schema.
func (p *Test) URL(n Node) string {
	return p.c.pair.URL(n, "search_path="+p.schema)
}

// MultiURL lists both nodes with target_session_attrs=read-write, as an
// application configured for failover would: pgx connects to the first one
// that accepts writes, in list order (node1 first).
func (p *Test) MultiURL() string {
	return p.c.pair.MultiURL("search_path=" + p.schema)
}

// Connect opens a connection to url (URL or MultiURL), closed when the test
// ends.
func (p *Test) Connect(url string) *pgx.Conn {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		p.t.Fatalf("replpair: connect %s: %v", redact(url), err)
	}
	p.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		conn.Close(ctx)
	})
	return conn
}

// Exec runs sql on node n through a connection of its own.
func (p *Test) Exec(n Node, sql string, args ...any) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, p.URL(n))
	if err != nil {
		p.t.Fatalf("replpair: connect to %v: %v", n, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql, args...); err != nil {
		p.t.Fatalf("replpair: on %v: %s: %v", n, sql, err)
	}
}

// Timeline returns the WAL timeline node n writes on (a primary) or has
// received (a standby).
func (p *Test) Timeline(n Node) int64 {
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

func (p *Test) queryRow(n Node, sql string, dest ...any) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, p.URL(n))
	if err != nil {
		p.t.Fatalf("replpair: connect to %v: %v", n, err)
	}
	defer conn.Close(ctx)
	if err := conn.QueryRow(ctx, sql).Scan(dest...); err != nil {
		p.t.Fatalf("replpair: on %v: %v", n, err)
	}
}

var password = regexp.MustCompile(`//[^@/]*@`)

func redact(url string) string { return password.ReplaceAllString(url, "//…@") }

// cluster is the binary's pair and the test that holds it.
type cluster struct {
	mu   sync.Mutex // held by the test that has the pair
	t    TB         // that test, for the script's messages
	pair *Pair
}

var (
	once      sync.Once
	shared    *cluster
	sharedErr error
)

func theCluster() (*cluster, error) {
	once.Do(func() { shared, sharedErr = newCluster() })
	return shared, sharedErr
}

// Main runs the tests of a binary that uses Get, then removes its pair.
func Main(m M) {
	code := m.Run()
	if shared != nil && shared.pair != nil { // no pair when Start failed
		if err := shared.pair.Remove(context.Background()); err != nil {
			fmt.Fprintf(os.Stderr, "replpair: removing the replication pair: %v\n", err)
			if code == 0 {
				code = 1
			}
		}
	}
	os.Exit(code)
}

func newCluster() (*cluster, error) {
	c := &cluster{}
	pair, err := Start(context.Background())
	if pair != nil {
		c.pair = pair
		pair.Logf = c.logf
	}
	if err != nil {
		return c, err
	}
	return c, nil
}

// logf logs to the test holding the pair, if any (Main removes the pair
// after every test has ended).
func (c *cluster) logf(format string, args ...any) {
	if c.t == nil {
		return
	}
	c.t.Helper()
	c.t.Logf(format, args...)
}

func (c *cluster) restore() error { return c.pair.Restore(context.Background()) }
func (c *cluster) remake() error  { return c.pair.Remake(context.Background()) }

// step runs one step on the pair for the test, failing it when the step
// fails.
func (p *Test) step(do func(ctx context.Context) error) {
	p.t.Helper()
	if err := do(context.Background()); err != nil {
		p.t.Fatalf("replpair: %v", err)
	}
}

// HoldStandby stops the standby's WAL receiver: from now on the primary's
// commits do not reach it (and, with SetSync(true), they wait for it).
func (p *Test) HoldStandby() {
	p.t.Helper()
	p.step(p.c.pair.HoldStandby)
}

// ReleaseStandby starts the standby's WAL receiver again and returns once
// it streams.
func (p *Test) ReleaseStandby() {
	p.t.Helper()
	p.step(p.c.pair.ReleaseStandby)
}

// Kill crashes node n: SIGKILL to its postmaster, no shutdown checkpoint,
// its open sessions gone. Whatever it had not sent to the standby is lost.
func (p *Test) Kill(n Node) {
	p.t.Helper()
	p.step(func(ctx context.Context) error { return p.c.pair.Kill(ctx, n) })
}

// Stop shuts node n down cleanly (fast mode).
func (p *Test) Stop(n Node) {
	p.t.Helper()
	p.step(func(ctx context.Context) error { return p.c.pair.Stop(ctx, n) })
}

// Start starts node n again, in the role its data gives it.
func (p *Test) Start(n Node) {
	p.t.Helper()
	p.step(func(ctx context.Context) error { return p.c.pair.StartNode(ctx, n) })
}

// Isolate cuts node n off as a network partition would: new connections
// and replication are refused, sessions already open keep working (clients
// on its side of the partition).
func (p *Test) Isolate(n Node) {
	p.t.Helper()
	p.step(func(ctx context.Context) error { return p.c.pair.Isolate(ctx, n) })
}

// Heal undoes Isolate.
func (p *Test) Heal(n Node) {
	p.t.Helper()
	p.step(func(ctx context.Context) error { return p.c.pair.Heal(ctx, n) })
}

// Promote promotes the standby and returns once it accepts writes; it
// becomes Primary. The old primary is left as it is: kill or isolate it
// first, or have a split brain.
func (p *Test) Promote() {
	p.t.Helper()
	p.step(p.c.pair.Promote)
}

// SetSync makes replication synchronous (the primary's commits wait until
// the standby has flushed them) or asynchronous again.
func (p *Test) SetSync(on bool) {
	p.t.Helper()
	p.step(func(ctx context.Context) error { return p.c.pair.SetSync(ctx, on) })
}

// WaitReplayed returns once the standby has replayed all the WAL the
// primary had written when it was called.
func (p *Test) WaitReplayed() {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var target string
	p.queryRow(p.Primary(), `SELECT pg_current_wal_lsn()::text`, &target)
	conn, err := pgx.Connect(ctx, p.URL(p.Standby()))
	if err != nil {
		p.t.Fatalf("replpair: connect to the standby: %v", err)
	}
	defer conn.Close(ctx)
	for {
		var done bool
		err := conn.QueryRow(ctx, `SELECT coalesce(pg_last_wal_replay_lsn() >= $1::pg_lsn, false)`, target).Scan(&done)
		if err != nil {
			p.t.Fatalf("replpair: the standby did not replay up to %s: %v", target, err)
		}
		if done {
			return
		}
		select {
		case <-ctx.Done():
			p.t.Fatalf("replpair: the standby did not replay up to %s within a minute", target)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
