package scenario

import (
	"context"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/internal/testdb"
)

// roundTrips counts the round trips a pool makes: one per statement, one per
// batch (its statements travel together).
type roundTrips struct {
	mu  sync.Mutex
	n   int
	sql []string
}

func (r *roundTrips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.n++
	r.sql = append(r.sql, strings.Join(strings.Fields(d.SQL), " "))
	return ctx
}

func (r *roundTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (r *roundTrips) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.n++
	r.sql = append(r.sql, "batch")
	return ctx
}

func (r *roundTrips) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (r *roundTrips) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

// take returns the count and the statements since the last take.
func (r *roundTrips) take() (int, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n, sql := r.n, r.sql
	r.n, r.sql = 0, nil
	return n, sql
}

// Each approach of the documents scenario makes the fewest round trips its
// mechanism allows, uncontended: the optimistic update reads and writes;
// the fenced twin and the naive lock acquire, read, write and release (the
// naive lock's statements are the twin's without the fence); raw is one
// statement.
func TestDocumentsRoundTrips(t *testing.T) {
	url := testdb.URL(t)
	ctx := context.Background()
	sc, _ := Lookup("documents")
	want := map[Approach]int{Alternative: 2, FencedLock: 4, NaiveLock: 4, Raw: 1}
	for _, a := range sc.Approaches {
		t.Run(string(a), func(t *testing.T) {
			sch, err := newSchema(ctx, url, sc, a)
			if err != nil {
				t.Fatal(err)
			}
			defer sch.drop()
			cfg, err := pgxpool.ParseConfig(sch.url)
			if err != nil {
				t.Fatal(err)
			}
			trips := &roundTrips{}
			cfg.ConnConfig.Tracer = trips
			pool, err := pgxpool.NewWithConfig(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer pool.Close()
			env := &Env{DB: pool, Admin: sch.admin, Keys: 1, Clients: 1, LeaseTTL: time.Minute}
			if env.Locks, err = fencedlock.NewPostgres(pool, nil); err != nil {
				t.Fatal(err)
			}
			w, err := sc.New(ctx, env, a)
			if err != nil {
				t.Fatal(err)
			}
			rnd := rand.New(rand.NewPCG(1, 2))
			// The first operation prepares the statements on the connection.
			if out := w.Op(ctx, 0, rnd); out.Err != nil || out.Rejected {
				t.Fatalf("warm-up: %+v", out)
			}
			trips.take()
			const ops = 5
			for range ops {
				if out := w.Op(ctx, 0, rnd); out.Err != nil || out.Rejected || out.Retries != 0 {
					t.Fatalf("operation: %+v", out)
				}
			}
			n, sql := trips.take()
			t.Logf("%s: %d round trips per operation: %q", a, n/ops, sql[:n/ops])
			if n != want[a]*ops {
				t.Fatalf("%d round trips in %d operations, want %d each", n, ops, want[a])
			}
			if violations, detail, err := w.Check(ctx); err != nil || violations != 0 {
				t.Fatalf("check: %d violations (%s), %v", violations, detail, err)
			}
		})
	}
}
