package scenario

import (
	"context"
	"io"
	"math/rand/v2"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/internal/failpoint"
	"github.com/lockfree-go/lockfree/internal/testdb"
)

// sentTracer records the statements a pool sends, one per round trip (a
// batch would be one for all its statements), and counts prepares, each
// one round trip more.
type sentTracer struct {
	mu       sync.Mutex
	sent     []string
	prepares int
}

func (t *sentTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.sent = append(t.sent, strings.Join(strings.Fields(d.SQL), " "))
	return ctx
}

func (t *sentTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (t *sentTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.sent = append(t.sent, "batch")
	return ctx
}

func (t *sentTracer) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (t *sentTracer) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

func (t *sentTracer) TracePrepareStart(ctx context.Context, _ *pgx.Conn, _ pgx.TracePrepareStartData) context.Context {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.prepares++
	return ctx
}

func (t *sentTracer) TracePrepareEnd(context.Context, *pgx.Conn, pgx.TracePrepareEndData) {}

func (t *sentTracer) take() (sent []string, prepares int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	sent, prepares = t.sent, t.prepares
	t.sent, t.prepares = nil, 0
	return sent, prepares
}

// inventorySale runs one sale of approach a on PostgreSQL, after one that
// prepares the statements, and returns what the second one sent.
func inventorySale(t *testing.T, a Approach) []string {
	t.Helper()
	ctx := context.Background()
	db := testdb.New(t, fencedlock.Migrations()...)
	cfg, err := pgxpool.ParseConfig(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	tr := &sentTracer{}
	cfg.MaxConns = 1 // one connection: each statement is prepared once
	cfg.ConnConfig.Tracer = tr
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	env := &Env{DB: pool, Admin: db.Pool, Keys: 1, Clients: 1, LeaseTTL: time.Minute}
	w, err := newInventory(ctx, env, a)
	if err != nil {
		t.Fatal(err)
	}
	if c, ok := w.(io.Closer); ok {
		defer c.Close()
	}
	rnd := rand.New(rand.NewPCG(1, 2))
	for range 2 {
		tr.take()
		if out := w.Op(ctx, 0, rnd); out != (Outcome{}) {
			t.Fatalf("%s: sale = %+v, want a plain success", a, out)
		}
	}
	sent, prepares := tr.take()
	if prepares > 0 {
		t.Fatalf("%s: %d prepares in the second sale: the statements are not cached", a, prepares)
	}
	return sent
}

// Each approach sends the fewest round trips the issue allows for one
// successful sale: one statement for the alternative and for raw; lock,
// fenced read, fenced write and release for the fenced twin — and the same
// four for the naive twin.
func TestInventoryRoundTrips(t *testing.T) {
	for a, want := range map[Approach]int{Alternative: 1, Raw: 1, FencedLock: 4, NaiveLock: 4} {
		sent := inventorySale(t, a)
		t.Logf("%s:\n\t%s", a, strings.Join(sent, "\n\t"))
		if len(sent) != want {
			t.Errorf("%s: %d round trips per sale, want %d:\n\t%s", a, len(sent), want, strings.Join(sent, "\n\t"))
		}
	}
}

// inventoryTokenCondition is what the fence adds to a statement.
var inventoryTokenCondition = regexp.MustCompile(` AND "fencing_token" <= \$\d+`)

// The naive twin sends exactly the fenced twin's statements without their
// token conditions: the pair differs only in the fence, and the naive
// twin's violations under the pause fault are the fence's to prevent.
func TestInventoryTwinsDifferOnlyInTheFence(t *testing.T) {
	fenced, naive := inventorySale(t, FencedLock), inventorySale(t, NaiveLock)
	unfenced := make([]string, len(fenced))
	conditions := 0
	for i, s := range fenced {
		unfenced[i] = inventoryTokenCondition.ReplaceAllString(s, "")
		if unfenced[i] != s {
			conditions++
		}
	}
	if !slices.Equal(unfenced, naive) || conditions != 2 {
		t.Fatalf("fenced twin (%d token conditions):\n\t%s\nnaive twin:\n\t%s",
			conditions, strings.Join(fenced, "\n\t"), strings.Join(naive, "\n\t"))
	}
}

// Under the pause fault, the fenced twin — the library's atomic.Fenced,
// which the harness cannot call Env.Pause inside — pauses at its inject
// point between the fenced read and the fenced write, and the fence keeps
// the stock right.
func TestInventoryFencedTwinPausesAtItsInjectPoint(t *testing.T) {
	sc, _ := Lookup("inventory")
	before := failpoint.Hits("atomic.fenced.before-write")
	rep, err := Run(context.Background(), sc, Config{
		Clients: 8, Keys: 1, Duration: 2 * time.Second, Faults: []Fault{Pause}, Approaches: []Approach{FencedLock},
	}, Infra{URL: testdb.URL(t)})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Results) != 1 {
		t.Fatalf("%d results, want the fenced lock's", len(rep.Results))
	}
	r := rep.Results[0]
	t.Logf("ops=%d rejected=%d pauses=%d violations=%d %s", r.Ops, r.Rejected, r.Pauses, r.Violations, r.Detail)
	if r.Pauses == 0 || failpoint.Hits("atomic.fenced.before-write") == before {
		t.Fatalf("the fenced twin never paused at atomic.fenced.before-write (%d pauses)", r.Pauses)
	}
	if r.Violations != 0 || r.Ops == 0 {
		t.Fatalf("%d violations (%s), %d sales", r.Violations, r.Detail, r.Ops)
	}
}

// The pause handler acts only on the operations that carry a pausePoint
// for the point reached: other callers of the library, and other points,
// pass untouched.
func TestPauseAtIsScopedToItsOperation(t *testing.T) {
	env := &Env{} // LeaseTTL 0: a pause returns at once, and is counted
	env.pausing.Store(true)
	ctx, p := pauseAt(context.Background(), env, rand.New(rand.NewPCG(1, 2)), "atomic.fenced.before-write")
	failpoint.Inject(context.Background(), "atomic.fenced.before-write")
	failpoint.Inject(ctx, "fencedlock.locker.acquired")
	if p.reached || env.pauses.Load() != 0 {
		t.Fatalf("reached=%v pauses=%d: the handler acted outside its operation and point", p.reached, env.pauses.Load())
	}
	failpoint.Inject(ctx, "atomic.fenced.before-write")
	if !p.reached || env.pauses.Load() != 1 {
		t.Fatalf("reached=%v pauses=%d at its own point, want one pause", p.reached, env.pauses.Load())
	}
}
