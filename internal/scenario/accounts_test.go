package scenario_test

import (
	"context"
	"io"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/internal/scenario"
	"github.com/lockfree-go/lockfree/internal/testdb"
)

// Under pauses past the lease, every entity's sequence stays gapless and
// duplicate-free with the partitioned single writer and with the fenced
// lock; the naive lock appends duplicates, which proves the pauses bit and
// the checker sees them. On PostgreSQL and in memory.
func TestAccountsPauseFault(t *testing.T) {
	backends := testBackends(t)
	sc, ok := scenario.Lookup("accounts")
	if !ok {
		t.Fatal("no scenario accounts")
	}
	for backend, url := range backends {
		t.Run(backend, func(t *testing.T) {
			rep, err := scenario.Run(context.Background(), sc, scenario.Config{
				Clients: 8, Keys: 1, Duration: 2 * time.Second, Faults: []scenario.Fault{scenario.Pause},
			}, scenario.Infra{URL: url})
			if err != nil {
				t.Fatal(err)
			}
			seen := map[scenario.Approach]bool{}
			for _, r := range rep.Results {
				seen[r.Approach] = true
				t.Logf("%-12s ops=%d retries=%d rejected=%d errors=%d uncertain=%d pauses=%d violations=%d %s",
					r.Approach, r.Ops, r.Retries, r.Rejected, r.Errors, r.Uncertain, r.Pauses, r.Violations, r.Detail)
				switch r.Approach {
				case scenario.NaiveLock:
					if r.Violations == 0 {
						t.Errorf("naive lock: no violation under pauses (%d pauses): the fault did not bite", r.Pauses)
					}
				case scenario.Alternative, scenario.FencedLock, scenario.Raw:
					if r.Violations != 0 {
						t.Errorf("%s: %d violations: %s", r.Approach, r.Violations, r.Detail)
					}
					if r.Ops == 0 {
						t.Errorf("%s: no operation succeeded", r.Approach)
					}
				}
				// No partition moves and no write is uncertain here: the
				// serial executor alone keeps the sequence, so the
				// alternative's conditional write never has to refuse one.
				if r.Approach == scenario.Alternative && r.Rejected != 0 {
					t.Errorf("alternative: %d appends rejected without a partition move", r.Rejected)
				}
			}
			for _, a := range []scenario.Approach{scenario.Alternative, scenario.FencedLock, scenario.NaiveLock} {
				if !seen[a] {
					t.Errorf("%s did not run", a)
				}
			}
		})
	}
}

// Without faults every approach appends gaplessly, over many entities.
func TestAccountsNoFault(t *testing.T) {
	backends := testBackends(t)
	sc, _ := scenario.Lookup("accounts")
	for backend, url := range backends {
		t.Run(backend, func(t *testing.T) {
			rep, err := scenario.Run(context.Background(), sc, scenario.Config{
				Clients: 8, Keys: 50, Duration: time.Second,
			}, scenario.Infra{URL: url})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range rep.Results {
				t.Logf("%-12s ops=%d retries=%d rejected=%d errors=%d violations=%d %s",
					r.Approach, r.Ops, r.Retries, r.Rejected, r.Errors, r.Violations, r.Detail)
				if r.Violations != 0 {
					t.Errorf("%s: %d violations: %s", r.Approach, r.Violations, r.Detail)
				}
				if r.Ops == 0 {
					t.Errorf("%s: no operation succeeded", r.Approach)
				}
			}
		})
	}
}

// tracedOp marks the context of the operations whose statements tripCounter
// counts: the alternative's members poll the store in the background, on
// contexts of their own.
type tracedOp struct{}

// tripCounter counts the statements and batches sent on behalf of the
// traced operations — one round trip each — and keeps their text.
type tripCounter struct {
	mu    sync.Mutex
	trips int
	sql   []string
}

func (c *tripCounter) record(ctx context.Context, sql string) {
	if ctx.Value(tracedOp{}) == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.trips++
	c.sql = append(c.sql, sql)
}

func (c *tripCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	c.record(ctx, d.SQL)
	return ctx
}
func (c *tripCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (c *tripCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	c.record(ctx, "batch")
	return ctx
}
func (c *tripCounter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (c *tripCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

// take returns what was counted since the last take, and starts again.
func (c *tripCounter) take() (int, []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, sql := c.trips, c.sql
	c.trips, c.sql = 0, nil
	return n, sql
}

// Each approach of the accounts scenario makes the round trips its label
// states, per operation once warm: the alternative one statement (its last
// number is cached per epoch), the twins acquire, read, write and release,
// raw one statement. And the naive twin's statements are the fenced twin's
// without the token condition, so that the pair differs only in the fence.
func TestAccountsRoundTrips(t *testing.T) {
	if os.Getenv("TEST_DATABASE_URL") == "" && os.Getenv("CI") != "true" {
		t.Skip("needs PostgreSQL (TEST_DATABASE_URL)")
	}
	sc, _ := scenario.Lookup("accounts")
	want := map[scenario.Approach]int{scenario.Alternative: 1, scenario.FencedLock: 4, scenario.NaiveLock: 4, scenario.Raw: 1}
	statements := map[scenario.Approach][]string{}
	for _, a := range sc.Approaches {
		t.Run(string(a), func(t *testing.T) {
			w, counter := tracedAccounts(t, sc, a)
			rnd := rand.New(rand.NewPCG(1, 2))
			op := context.WithValue(context.Background(), tracedOp{}, true)
			for range 3 { // warm up: prepare the statements, fill the cache
				if out := w.Op(op, 0, rnd); out.Err != nil || out.Rejected {
					t.Fatalf("warm-up operation: %+v", out)
				}
			}
			counter.take()
			const ops = 20
			for range ops {
				if out := w.Op(op, 0, rnd); out.Err != nil || out.Rejected {
					t.Fatalf("operation: %+v", out)
				}
			}
			trips, sql := counter.take()
			if trips != want[a]*ops {
				t.Errorf("%d round trips in %d operations, want %d each: %q", trips, ops, want[a], sql[:min(len(sql), 8)])
			}
			statements[a] = sql[:want[a]]
		})
	}
	fenced, naive := statements[scenario.FencedLock], statements[scenario.NaiveLock]
	if len(fenced) != 4 || len(naive) != 4 {
		t.Fatal("a twin did not run")
	}
	for i := range fenced {
		stripped := strings.NewReplacer(` AND "fencing_token" <= $2`, "", ` AND fencing_token <= $3`, "").Replace(fenced[i])
		if naive[i] != stripped {
			t.Errorf("statement %d: naive %q, want the fenced %q without its token condition", i, naive[i], fenced[i])
		}
	}
}

// tracedAccounts returns approach a of the accounts scenario on a fresh
// schema, whose clients' pool counts round trips.
func tracedAccounts(t *testing.T, sc scenario.Scenario, a scenario.Approach) (scenario.Workload, *tripCounter) {
	t.Helper()
	db := testdb.New(t, append(fencedlock.Migrations(), sc.Migrations...)...)
	cfg, err := pgxpool.ParseConfig(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	counter := &tripCounter{}
	cfg.ConnConfig.Tracer = counter
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	locks, err := fencedlock.NewPostgres(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	env := &scenario.Env{DB: pool, Admin: db.Pool, Locks: locks, Keys: 1, Clients: 1, LeaseTTL: 10 * time.Second}
	w, err := sc.New(context.Background(), env, a)
	if err != nil {
		t.Fatal(err)
	}
	if c, ok := w.(io.Closer); ok {
		t.Cleanup(func() { c.Close() })
	}
	return w, counter
}
